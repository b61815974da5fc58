"""GPU truth cases (docs/gpu-smoke.md) through the product's own smoke command:
``python -m release smoke --unaudited --wheel W --policy P`` for each case of
tests/fixtures/wheels/gpu/gpu.json (several wheels are built to fail their audit, hence
``--unaudited``: no audit record needed, none written). Prints what the audit predicted beside
what the GPU did, and writes $OUT/gpu_cases.json when $OUT is set.

Run on a GPU machine with no network, from the repository root:
``python scripts/gpu_truth_cases.py --wheelhouse .gpu/wheelhouse`` (the wheelhouse holds the
CUDA runtime wheels the cases need: nvidia-cuda-runtime 13.0 and 13.2, and
nvidia-cuda-runtime-cu12 12.4.127 for case d).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from release.core.errors import StepFailed  # noqa: E402
from release.core.proc import Result, run  # noqa: E402

WHEELS = ROOT / "tests" / "fixtures" / "wheels"
# what a failure must say, per case predicted to fail (the CUDA error, or the loader's)
TOKENS = {"b": "NoKernelImage", "f": "UnsupportedPtx", "g": "undefined symbol"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheelhouse", required=True, help="the CUDA runtime wheels, installed with no index"
    )
    parser.add_argument("--only", nargs="*", default=[], help="case letters to run (default: all)")
    args = parser.parse_args()
    cases = json.loads((WHEELS / "gpu" / "gpu.json").read_text(encoding="utf-8"))["cases"]
    results = []
    for case in cases:
        if args.only and case["case"] not in args.only:
            continue
        command = [
            sys.executable, "-m", "release", "smoke", "--unaudited",
            "--wheel", str(WHEELS / case["wheel"]),
            "--policy", str(WHEELS / case["policy"]),
            "--wheelhouse", str(Path(args.wheelhouse).resolve()),
        ]  # fmt: skip
        try:  # the core wrapper: a timeout kills the whole process group (pip, the probe)
            done = run(command, cwd=ROOT, check=False, timeout=900, step=f"GPU truth case {case['case']}")
        except StepFailed as exc:  # timed out: a row of its own, the other cases still run
            done = Result(tuple(command), 124, "", str(exc))
        said = done.stdout + done.stderr
        ran = done.returncode == 0 and "no GPU here" not in said
        predicted_runs = case["predicted"].startswith("runs")
        token = TOKENS.get(case["case"], "")
        matched = ran if predicted_runs else (done.returncode == 1 and token in said)
        verdict = "MATCH" if matched else "MISMATCH"
        print(f"[{verdict}] {case['case']}: {case['why']}\n    predicted: {case['predicted']}")
        print(
            "    $ python -m release smoke --unaudited --wheel "
            + case["wheel"]
            + f"  (exit {done.returncode})"
        )
        print("    " + "\n    ".join(done.stdout.strip().splitlines()[-6:]))
        results.append(
            {
                "case": case["case"],
                "wheel": case["wheel"],
                "predicted": case["predicted"],
                "exit": done.returncode,
                "ran": ran,
                "verdict": verdict,
                "stdout": done.stdout,
                "stderr": done.stderr[-4000:],
            }
        )
    if os.environ.get("OUT"):  # the device tool's folder that comes back
        (Path(os.environ["OUT"]) / "gpu_cases.json").write_text(
            json.dumps(results, indent=1), encoding="utf-8"
        )
    total = sum(r["verdict"] == "MATCH" for r in results)
    print(f"{total}/{len(results)} predictions matched")
    return 0 if total == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
