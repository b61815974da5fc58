"""The policy's own words for two audit claims, end to end through ``python -m release audit``:
a train's ``oldest_driver`` (predict for that driver; fail PTX it cannot JIT) and
``matrix.embedded_device_code`` (device code embedded as data). Real fixture wheels built with
nvcc (tests/fixtures/make_fixtures.py), each audited under a policy that must fail it and one
that must pass it; only the key differs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.policy import stub_project

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "tests" / "fixtures" / "wheels"
PTX132 = "gx_ptx132-1.0.0+cu132-cp312-cp312-manylinux_2_28_x86_64.whl"  # SASS 8.0 + PTX 8.0, by CUDA 13.2
EMBEDDED = "fx_embedded-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"  # an sm_80 cubin in .rodata


def policy(
    folder: Path, case: str, *, rename: str = "", archs: str = "", add: tuple[str, str] = ("", "")
) -> Path:
    """A GPU truth case's policy (tests/fixtures/wheels/gpu/), the project renamed, the arch list
    replaced and one line added after the line ``add[0]`` where asked: only the key under test differs."""
    text = (WHEELS / "gpu" / case).read_text(encoding="utf-8")
    if rename:
        old = text.split('name = "', 1)[1].split('"', 1)[0]
        text = text.replace(old, rename)
    if archs:
        line = next(ln for ln in text.splitlines() if ln.startswith("gpu_archs.x86_64"))
        text = text.replace(line, f"gpu_archs.x86_64 = {archs}")
    after, line = add
    if line:
        assert after in text
        text = text.replace(after, f"{after}\n{line}", 1)
    # the fixtures' stand-in source folder is tests/fixtures/project; here, one beside the copy
    text = text.replace('path = "../../project"\n', 'path = "."\n', 1)
    stub_project(folder)
    path = folder / "rows.toml"
    path.write_text(text, encoding="utf-8")
    return path


def audit(folder: Path, wheel: str) -> tuple[int, dict[str, object], str]:
    shutil.copy(WHEELS / wheel, folder / wheel)  # the record and report go beside the copy
    done = subprocess.run(
        [sys.executable, "-m", "release", "audit", "--policy", str(folder / "rows.toml"), "--json", wheel],
        cwd=folder, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True,
        check=False, timeout=600,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout), done.stderr


def _failing(report: dict[str, object]) -> list[dict[str, object]]:
    results = report["results"]
    assert isinstance(results, list) and len(results) == 1
    return [f for f in results[0]["findings"] if not f["ok"]]


@pytest.mark.parametrize(
    ("oldest_driver", "exit_code"),
    [
        ('oldest_driver = "13.0"', 1),
        ('oldest_driver = "13.2"', 0),
        ("", 0),
        ('oldest_driver = "580.65.06"', 1),
    ],
)
def test_oldest_driver_fails_ptx_that_driver_cannot_jit(
    tmp_path: Path, oldest_driver: str, exit_code: int
) -> None:
    policy(tmp_path, "f_gx_ptx132.toml", add=('variant = "cu132"', oldest_driver))
    code, report, stderr = audit(tmp_path, PTX132)
    assert code == exit_code, (report, stderr)
    failing = _failing(report)
    if exit_code == 0:
        assert failing == []
        return
    (finding,) = failing
    assert finding["check"] == "gpus"
    assert "PTX (ISA 9.2) needs a driver of CUDA 13.2" in str(finding["message"])
    assert 'train."13.2".oldest_driver' in str(finding["message"])


@pytest.mark.parametrize(
    ("key", "exit_code"),
    [("", 1), ('embedded_device_code = "reject"', 1), ('embedded_device_code = "allow"', 0)],
)
def test_embedded_device_code_follows_the_policy(tmp_path: Path, key: str, exit_code: int) -> None:
    policy(
        tmp_path, "a_gx_native_cu130.toml", rename="fx_embedded", archs='["8.0", "9.0+PTX"]',
        add=('extra_variants = "reject"', key),
    )  # fmt: skip
    code, report, stderr = audit(tmp_path, EMBEDDED)
    assert code == exit_code, (report, stderr)
    failing = _failing(report)
    assert [f["check"] for f in failing] == (["device_code"] if exit_code else [])
    if exit_code:
        assert 'allow it (embedded_device_code = "allow")' in str(failing[0]["message"])
