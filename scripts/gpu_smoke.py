"""GPU truth run: install each wheel of a manifest in a fresh venv, offline, and run it on the GPU.

Standard library only: it runs on the GPU machine, which has no network and no wheelwright.
For each case it reports where libcudart was loaded from, the GPU, and the selftest's result
(max |diff| against the CPU reference) or the CUDA error, and whether that matches what the
audit predicted for this GPU:
  native / ptx-jit  -> must run, max |diff| == 0
  none              -> must fail with CUDA's "no kernel image is available" error
Exit 0 when every case matches its prediction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROBE = r"""
import json, sys
out = {}
try:
    import tinyaxpy
except BaseException as exc:
    print(json.dumps({"import": "%s: %s" % (type(exc).__name__, exc)})); sys.exit(0)
with open("/proc/self/maps") as f:
    out["libcudart"] = sorted({l.split()[-1] for l in f if "libcudart" in l})
out["build_info"] = tinyaxpy.build_info()
try:
    out["selftest"] = tinyaxpy.selftest()
except BaseException as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
print(json.dumps(out, default=str))
"""


def run_case(case: dict[str, str], wheels: Path, python: str) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix=f"gpu-{case['case']}-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        vpy = str(venv / "bin" / "python")
        env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
        subprocess.run(
            [
                vpy,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--find-links",
                str(wheels),
                str(wheels / case["wheel"]),
            ],
            check=True,
            env=env,
        )
        clean = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH")}
        t0 = time.monotonic()
        proc = subprocess.run([vpy, "-c", PROBE], capture_output=True, text=True, env=clean, check=False)
        report: dict[str, object] = (
            json.loads(proc.stdout.strip().splitlines()[-1]) if proc.stdout.strip() else {}
        )
        report["seconds"] = round(time.monotonic() - t0, 2)
        if proc.returncode != 0:
            report["stderr"] = proc.stderr[-2000:]
        return report


def judge(prediction: str, report: dict[str, object]) -> tuple[bool, str]:
    if "import" in report:
        return False, f"import failed: {report['import']}"
    result = report.get("selftest")
    if prediction in ("native", "ptx-jit"):
        if isinstance(result, dict) and result.get("max_abs_diff") == 0.0:
            return (
                True,
                f"ran on {result.get('device')} (cc {result.get('compute_capability')}), max |diff| = 0, as predicted ({prediction})",
            )
        return False, f"predicted {prediction} but it failed: {report.get('error')}"
    error = str(report.get("error", ""))
    if "no kernel image" in error:
        return True, f"failed as predicted (none): {error}"
    return False, f"predicted it cannot run, but got: {result or error}"


def main() -> int:
    manifest_path = Path(sys.argv[1])
    python = sys.argv[2] if len(sys.argv) > 2 else sys.executable
    manifest = json.loads(manifest_path.read_text())
    wheels = manifest_path.parent / "wheels"
    out_dir = Path(os.environ.get("OUT", "."))
    results = []
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            check=False,
        )
        gpu = smi.stdout.strip() or smi.stderr.strip()
    except FileNotFoundError:
        gpu = "no nvidia-smi on this machine"
    print(f"GPU: {gpu}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}")
    ok_all = True
    for case in manifest["cases"]:
        report = run_case(case, wheels, python)
        ok, verdict = judge(case["prediction_9_0"], report)
        ok_all &= ok
        print(f"[{'MATCH' if ok else 'MISMATCH'}] {case['case']}: {case['what']}")
        print(f"    wheel: {case['wheel']}")
        print(f"    libcudart: {report.get('libcudart')}")
        print(f"    {verdict}")
        results.append({**case, "report": report, "matches_prediction": ok, "verdict": verdict})
    (out_dir / "gpu_smoke.json").write_text(
        json.dumps({"version": 1, "gpu": gpu, "results": results}, indent=2, default=str) + "\n"
    )
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
