"""Prepare the GPU truth runs (issue: smoke on a real GPU): build the wheels, predict with the audit.

Writes ``.gpu/`` (ignored by git; carried to the GPU machine):
  wheels/   the four wheels under test and their runtime dependency wheels (for Python 3.12)
  manifest.json   per case: the wheel, what the audit's GPU table predicts for an H100/H200 (9.0)

Cases:
  a  cu130, the seed arch list (7.5 ... 12.0+PTX), built by wheelwright      -> native on 9.0
  b  cu130, SASS for 8.0 only                                                 -> cannot run on 9.0
  c  cu130, PTX for 8.0 only (CMAKE_CUDA_ARCHITECTURES=80-virtual)            -> PTX JIT on 9.0
  d  cu124 (CUDA 12.4 toolkit from Debian), 8.0;9.0+PTX, on the CUDA 13 driver -> native on 9.0

Then: scripts/gpu_smoke.py .gpu/manifest.json on the GPU machine (see docs/gpu-smoke.md).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from fetch_cuda12_debian import ensure_cuda12_toolkit  # noqa: E402

from release.audit.model import Expectation  # noqa: E402
from release.audit.run import audit_wheel  # noqa: E402
from release.core.machine import default_cache_dir, find_python  # noqa: E402
from release.core.proc import run  # noqa: E402
from release.policy.archs import parse_arch_list  # noqa: E402
from release.policy.load import load_policy  # noqa: E402
from release.policy.matrix import expand  # noqa: E402
from release.policy.model import CudaPackage  # noqa: E402
from release.smoke.run import pip_env  # noqa: E402
from release.wheelbuild.run import build_row  # noqa: E402

OUT = ROOT / ".gpu"
PY = "3.12"
H200 = (9, 0)


def build_example(env_changes: dict[str, str], dest: Path) -> Path:
    """Build the example directly with a hand-made environment (cases the policy would refuse)."""
    python = find_python(PY, env=os.environ).path
    work = Path(tempfile.mkdtemp(prefix="ww-gpu-"))
    venv = work / "venv"
    run([str(python), "-m", "venv", str(venv)], check=True)
    run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "setuptools==84.2.1", "wheel==0.48.0"],
        env=pip_env(),
        check=True,
    )
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TINYAXPY_", "TORCH_CUDA", "CMAKE_CUDA", "CUDA_"))
    }
    env.update(env_changes)
    env["PATH"] = f"{env_changes['CUDA_HOME']}/bin:{env['PATH']}"
    src = work / "src"
    shutil.copytree(
        ROOT / "examples" / "tinyaxpy", src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info")
    )
    run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "wheel",
            "--no-build-isolation",
            "--no-deps",
            "-w",
            str(dest),
            str(src),
        ],
        env={**env, "PIP_CONFIG_FILE": os.devnull},
        check=True,
    )
    wheels = sorted(dest.glob("tinyaxpy-*.whl"), key=lambda p: p.stat().st_mtime)
    shutil.rmtree(work, ignore_errors=True)
    return wheels[-1]


def predict(wheel: Path, variant: str, archs: str, packages: tuple[CudaPackage, ...], train: str) -> str:
    exp = Expectation.for_variant("cu130", parse_arch_list(archs), load_policy(ROOT / "rows.toml"))
    exp = Expectation(**{**exp.__dict__, "variant": variant, "train": train, "cuda_packages": packages})
    result = audit_wheel(wheel, exp)
    row = next(g for g in result.gpu_table if (g.major, g.minor) == H200)
    return str(row.wheel)


def main() -> None:
    if OUT.exists():
        shutil.rmtree(OUT)
    wheels = OUT / "wheels"
    wheels.mkdir(parents=True)
    policy = load_policy(ROOT / "rows.toml")
    row = next(r for r in expand(policy) if r.id == "cu130-py312-x86_64")
    cache = default_cache_dir(os.environ)
    dist = Path(tempfile.mkdtemp(prefix="ww-gpu-dist-"))
    a = build_row(row, policy_path=str(ROOT / "rows.toml"), dist_dir=dist, cache_dir=cache, backend="host")[
        0
    ].wheel
    cu13 = {"TINYAXPY_VARIANT": "cu130", "CUDA_HOME": "/usr/local/cuda-13.0"}
    staging = {k: Path(tempfile.mkdtemp(prefix=f"ww-gpu-{k}-")) for k in "bcd"}
    b = build_example({**cu13, "TORCH_CUDA_ARCH_LIST": "8.0"}, staging["b"])
    c = build_example({**cu13, "CMAKE_CUDA_ARCHITECTURES": "80-virtual"}, staging["c"])
    cuda12 = ensure_cuda12_toolkit()
    d = build_example(
        {"TINYAXPY_VARIANT": "cu124", "CUDA_HOME": str(cuda12), "TORCH_CUDA_ARCH_LIST": "8.0;9.0+PTX"},
        staging["d"],
    )
    cu12 = (CudaPackage("nvidia-cuda-runtime-cu12", (), ("libcudart.so.12",), "nvidia/cuda_runtime/lib"),)
    cases = [
        (
            "a",
            a,
            "cu130",
            "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX",
            row.cuda_packages,
            "13.0",
            "the cu130 wheel wheelwright builds",
        ),
        ("b", b, "cu130", "8.0", row.cuda_packages, "13.0", "device code: SASS for 8.0 only"),
        ("c", c, "cu130", "8.0", row.cuda_packages, "13.0", "device code: PTX for 8.0 only"),
        ("d", d, "cu124", "8.0;9.0+PTX", cu12, "12.4", "built with CUDA 12.4, run on the CUDA 13 driver"),
    ]
    manifest = []
    for case, wheel, variant, archs, packages, train, what in cases:
        named = (
            wheels / wheel.name
            if case == "a"
            else wheels / wheel.name.replace("-cp312-", f"-{case}-cp312-", 1)
        )
        # the four wheels share a name; give each its own build tag so one folder holds them all
        named = wheels / wheel.name.replace("-cp312-cp312-", f"-{ord(case) - 96}{case}-cp312-cp312-", 1)
        shutil.copy2(wheel, named)
        prediction = predict(named, variant, archs, packages, train)
        manifest.append({"case": case, "what": what, "wheel": named.name, "prediction_9_0": prediction})
        print(f"{case}: {named.name}: audit predicts {prediction} on 9.0 (H100/H200)")
    run(
        [
            sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", PY,
            "--platform", "manylinux_2_17_x86_64", "--platform", "manylinux2014_x86_64", "--platform", "manylinux_2_28_x86_64",
            "-d", str(wheels), "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-runtime-cu12==12.4.127",
        ],
        env=pip_env(),
        check=True,
    )  # fmt: skip
    (OUT / "manifest.json").write_text(
        json.dumps({"version": 1, "cases": manifest}, indent=2) + "\n", encoding="utf-8"
    )
    shutil.copy2(ROOT / "scripts" / "gpu_smoke.py", OUT / "gpu_smoke.py")
    print(f"wrote {OUT}/manifest.json; carry .gpu and run: python3 .gpu/gpu_smoke.py .gpu/manifest.json")


if __name__ == "__main__":
    main()
