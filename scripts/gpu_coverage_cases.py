"""Coverage's prediction against a real GPU (issue 32): for each case, the list a wheel's build carries,
what ``release.coverage.predict`` says it does on this machine's GPU, and what the GPU does through the
product's own smoke command (``python -m release smoke --unaudited --wheel W --policy P --wheelhouse H``).

Cases (the GPU truth fixtures of tests/fixtures/wheels/gpu, built by tests/fixtures/make_fixtures.py with
the host's nvcc 13.0):

* ``jit``: gx_oldptx_cu130: SASS 8.0 + PTX 8.0 (the row list 8.0+PTX): on 9.0 coverage says ptx-jit, so it
  must run, by JIT;
* ``none``: gx_sass80_cu130: SASS 8.0 only: coverage says none on 9.0, so it must fail with
  cudaErrorNoKernelImageForDevice ('no kernel image').

Run on the GPU machine from the repository root, no network, Python 3.12:
``python3.12 scripts/gpu_coverage_cases.py --wheelhouse .gpu/coverage`` (the folder holds the CUDA runtime
wheel the cases install: nvidia-cuda-runtime 13.0.x for x86_64). Writes $OUT/gpu_coverage.json when $OUT is
set. Exit 0 when every prediction matched.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from release.audit.checks.device_code import arch_list_found  # noqa: E402
from release.audit.model import Contents  # noqa: E402
from release.audit.reading.archive import open_wheel  # noqa: E402
from release.audit.reading.inspector import inspect_libraries  # noqa: E402
from release.core.errors import StepFailed, ToolError  # noqa: E402
from release.core.proc import Result, run  # noqa: E402
from release.coverage.predict import predict  # noqa: E402
from release.policy.archs import parse_claim_list  # noqa: E402
from release.resources.cuda import cuda  # noqa: E402

WHEELS = ROOT / "tests" / "fixtures" / "wheels"
CASES = (  # (case, wheel dist, policy, what a failure must say)
    ("jit", "gx_oldptx_cu130", "gpu/e_gx_oldptx_cu130.toml", ""),
    ("none", "gx_sass80_cu130", "gpu/b_gx_sass80_cu130.toml", "NoKernelImage"),
)


def gpu_capability() -> tuple[int, int]:
    """This machine's GPU (``nvidia-smi --query-gpu=compute_cap``), else 9.0 (the lent H100/H200)."""
    try:
        done = run(
            ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"], check=False, timeout=60
        )
        major, minor = done.stdout.strip().splitlines()[0].split(".")
        return int(major), int(minor)
    except (StepFailed, ToolError, IndexError, ValueError, OSError):  # no nvidia-smi: the lent card's 9.0
        return 9, 0


def wheel_list(wheel: Path) -> str:
    """The wheel's device code as a list, read by the audit's reader."""
    with open_wheel(wheel) as opened:
        found = arch_list_found(Contents(opened, inspect_libraries(opened)))
    if found is None:
        raise SystemExit(f"{wheel.name}: no device code")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheelhouse", required=True, help="the CUDA runtime wheels, installed with no index"
    )
    args = parser.parse_args()
    major, minor = gpu_capability()
    gpu = cuda().gpu(major, minor)
    results = []
    for name, dist, policy, token in CASES:
        wheel = next(WHEELS.glob(f"{dist}-*.whl"))
        archs = wheel_list(wheel)
        (predicted,) = predict(parse_claim_list(archs), (gpu,), "13.0")
        command = [
            sys.executable, "-m", "release", "smoke", "--unaudited", "--wheel", str(wheel),
            "--policy", str(WHEELS / policy), "--wheelhouse", str(Path(args.wheelhouse).resolve()),
        ]  # fmt: skip
        try:
            done = run(command, cwd=ROOT, check=False, timeout=900, step=f"GPU coverage case {name}")
        except StepFailed as exc:
            done = Result(tuple(command), 124, "", str(exc))
        said = done.stdout + done.stderr
        ran = done.returncode == 0 and "no GPU here" not in said
        matched = (done.returncode == 1 and token in said) if predicted.support == "none" else ran
        verdict = "MATCH" if matched else "MISMATCH"
        print(f"[{verdict}] {name}: {wheel.name} carries {archs}")
        print(f"    coverage on {gpu.name} ({gpu.cc}): {predicted.support} via {list(predicted.via) or '-'}")
        print(f"    smoke: exit {done.returncode}")
        print("    " + "\n    ".join(said.strip().splitlines()[-6:]))
        results.append({
            "case": name, "wheel": wheel.name, "carries": archs, "gpu": gpu.name, "cc": gpu.cc,
            "predicted": predicted.support, "via": list(predicted.via), "exit": done.returncode, "ran": ran,
            "verdict": verdict, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:],
        })  # fmt: skip
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "gpu_coverage.json").write_text(
            json.dumps(results, indent=1), encoding="utf-8"
        )
    total = sum(r["verdict"] == "MATCH" for r in results)
    print(f"{total}/{len(results)} coverage predictions matched")
    return 0 if total == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
