"""Verdicts that read right to a CUDA user (issue 33, item 3), from the command line as a user runs it.

* NVIDIA's own runtime, NVRTC and nvJitLink wheels with ``--runs-on``: no device code by design, a
  note on the first line and exit 0 (they were "FAILED ... runs on no GPU" on three checks);
* a standalone audit never speaks of "the row" or "variant cuda";
* device code embedded as data (warp-lang's way), audited by hand: the hint names the flag
  ``--allow embedded-device-code``, not the rows.toml key;
* a finding of 1,000+ characters is folded in the text, whole in the JSON;
* no ``gcc`` on PATH: the error names the check that needs it and the ``--checks`` that runs the
  others, and that command runs as printed.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.real_wheels import BY_KEY, TWIN_PINS, fetch

from release.audit.report.render import fold

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "tests" / "fixtures" / "wheels"
GOOD = WHEELS / "fx_good_cu130-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
EMBEDDED = WHEELS / "fx_embedded-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"


def audit(*argv: str, cwd: Path, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "release", "audit", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("key", ["nvidia_cuda_nvrtc", "nvidia_nvjitlink", "nvidia_cuda_runtime"])
def test_nvidias_host_only_wheels_get_a_note_not_a_failure(key: str, tmp_path: Path) -> None:
    pin = BY_KEY.get(key) or next(p for p in TWIN_PINS if p.key == key)
    wheel = fetch(pin)
    proc = audit(str(wheel), "--runs-on", "8.0,9.0", cwd=tmp_path)
    first = proc.stdout.splitlines()[0]
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    assert first.startswith(f"{wheel.name}: no device code by design: nvidia-"), first
    assert "runs on no GPU" not in proc.stdout
    for check in ("libraries", "device code", "GPUs (per translation unit)"):
        section = proc.stdout.split(f"\n{check}\n", 1)[1].splitlines()[0]
        assert section.startswith("  ✓ note: no device code by design"), (check, section)


def test_a_standalone_audit_speaks_of_no_row_and_no_variant_cuda(tmp_path: Path) -> None:
    proc = audit(str(GOOD), "--runs-on", "8.0,9.0", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert "the row" not in proc.stdout and "variant cuda" not in proc.stdout, proc.stdout


def test_embedded_device_code_by_hand_names_the_flag(tmp_path: Path) -> None:
    proc = audit(str(EMBEDDED), "--variant", "cu130", "--gpu-archs", "8.0;9.0+PTX", cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "allow it (--allow embedded-device-code)" in proc.stdout, proc.stdout
    assert "embedded_device_code" not in proc.stdout


def test_a_long_finding_is_folded_and_whole_in_json() -> None:
    items = [f"nvidia/cu13/lib/libthing{i:03}.so" for i in range(60)]
    message = "it links " + ", ".join(items)
    assert len(message) > 1000
    folded = fold(message)
    assert len(folded) < 1000 and "and " in folded and " more (the whole list: --json)" in folded
    assert folded.startswith("it links nvidia/cu13/lib/libthing000.so, ") and folded.endswith(items[-1])
    n = int(re.search(r"and (\d+) more", folded).group(1))  # type: ignore[union-attr]
    assert n + folded.count("libthing") == 60
    assert fold("short, message, kept") == "short, message, kept"
    needs = "; ".join(f"_m{i:02}.cpython-312-x86_64-linux-gnu.so needs GLIBCXX_3.4.21" for i in range(30))
    semicolons = f"auditwheel says linux_x86_64 at best ({needs}, which manylinux2014 does not allow)"
    folded = fold(semicolons)  # cupy's platform-tag finding: a list joined by '; ', items holding ', '
    assert (
        len(folded) < 1000 and "; and " in folded and folded.endswith("which manylinux2014 does not allow)")
    )


def test_a_missing_gcc_names_its_check_and_how_to_run_the_others(tmp_path: Path) -> None:
    bare = tmp_path / "bin"  # a PATH with everything but the C compilers
    bare.mkdir()
    for folder in os.environ["PATH"].split(os.pathsep):
        for tool in Path(folder).glob("*") if Path(folder).is_dir() else ():
            name = tool.name
            if name in ("gcc", "g++", "cc", "c++") or re.fullmatch(
                r"(x86_64-linux-gnu-)?(gcc|g\+\+)(-\d+)?", name
            ):
                continue
            if not (bare / name).exists():
                (bare / name).symlink_to(tool)
    proc = audit(str(GOOD), "--runs-on", "8.0", cwd=tmp_path, path=str(bare))
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "the C++ consumer check (cpp_consumer) needs it" in proc.stderr, proc.stderr
    (hint,) = re.findall(r"or run the other checks without it: (--checks \S+)", proc.stderr)
    again = audit(str(GOOD), "--runs-on", "8.0", *shlex.split(hint), cwd=tmp_path, path=str(bare))
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cpp_consumer" not in json.dumps(again.stdout.splitlines()[:4])
