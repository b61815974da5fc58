"""``smoke --unaudited``: a GPU run of a wheel that fails its audit by design, through the
product's own smoke step, that can never feed a publish. Real build (tinyaxpy's CPU row on the
host), real venvs, real pip. Must-fail sides: without --wheel it is bad input (2); without
--unaudited the same wheel is refused for lacking its audit record (1); a failing check still
fails (1); and no smoke record is ever written by it."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest
from helpers.proc import python_m, repo_env

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
ROW = "cpu-py312-x86_64"


def release(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return python_m(
        "release", *args, "--policy", str(ROOT / "rows.toml"), cwd=cwd, env=repo_env(), timeout=900
    )


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cwd = tmp_path_factory.mktemp("unaudited")
    built = release(cwd, "build", "--backend", "host", ROW)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = (cwd / "dist").rglob("*.whl")
    return found


def _records(wheel: Path) -> list[str]:
    return sorted(p.name for p in wheel.parent.iterdir() if p.name.endswith((".smoke.json", ".audit.json")))


def test_unaudited_smokes_a_wheel_without_an_audit_record_and_writes_no_record(wheel: Path) -> None:
    refused = release(wheel.parent, "smoke", "--wheel", str(wheel), ROW)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "audit" in refused.stderr, refused.stderr

    ran = release(wheel.parent, "smoke", "--unaudited", "--wheel", str(wheel), ROW)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"PASS smoke {ROW}: {wheel.name}" in ran.stdout
    assert "record: none (--unaudited: no audit record was required)" in ran.stdout
    assert _records(wheel) == []


def test_unaudited_needs_a_wheel_file(wheel: Path) -> None:
    said = release(wheel.parent, "smoke", "--unaudited", ROW)
    assert said.returncode == 2, said.stdout + said.stderr
    assert "--unaudited smokes one wheel file: give it with --wheel" in said.stderr


def test_unaudited_still_fails_a_failing_check(wheel: Path, tmp_path: Path) -> None:
    broken = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(broken, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename == "tinyaxpy/__init__.py":
                data = data.replace(
                    b"def selftest(",
                    b"def selftest(*a, **k):\n    raise RuntimeError('broken on purpose')\n\n\ndef _old_selftest(",
                    1,
                )
            dst.writestr(info, data)
    said = release(tmp_path, "smoke", "--unaudited", "--wheel", str(broken), ROW)
    assert said.returncode == 1, said.stdout + said.stderr
    assert f"FAIL smoke {ROW}" in said.stdout and "broken on purpose" in said.stdout
    assert _records(broken) == []


def test_the_wheel_names_its_row_when_no_row_is_given(wheel: Path) -> None:
    """Issue 24 item 5: no ROW_GLOB, the row is the one the file name names."""
    ran = release(wheel.parent, "smoke", "--unaudited", "--wheel", str(wheel))
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert f"PASS smoke {ROW}: {wheel.name}" in ran.stdout


def test_a_wheel_no_row_claims_is_refused_naming_the_rows(wheel: Path, tmp_path: Path) -> None:
    stray = tmp_path / wheel.name.replace("cp312-cp312", "cp39-cp39")
    stray.write_bytes(wheel.read_bytes())
    said = release(wheel.parent, "smoke", "--unaudited", "--wheel", str(stray))
    assert said.returncode == 2, said.stdout + said.stderr
    assert (
        f"{stray.name}: no row of " in said.stderr
        and "is variant cpu for the wheel's Python and CPU arch" in said.stderr
    )
    many = release(wheel.parent, "smoke", "--unaudited", "--wheel", str(wheel), "cpu-*")
    assert many.returncode == 2, many.stdout + many.stderr
    assert "--wheel needs exactly one row, but the selection has" in many.stderr
    assert "or no row at all (the wheel's file name names its row)" in many.stderr
