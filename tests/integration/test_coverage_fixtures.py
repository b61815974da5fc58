"""``plan`` with a ``gpu_coverage`` dependency, on the repository's small real wheels (tests/fixtures/wheels,
built with nvcc) standing in for a GPU dependency: a row that loses a GPU its dependency runs on fails the
plan under ``"fail"`` and passes with the dependency's own list; a dependency wheel whose device code cannot
be read, or that has none, fails closed under ``"fail"`` and is said under ``"report"``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers.proc import python_m

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "tests" / "fixtures" / "wheels"
BASE = WHEELS / "gpu" / "e_gx_oldptx_cu130.toml"  # one row: cu130-py312-x86_64


def _policy(tmp_path: Path, archs: str, package: str, mode: str) -> Path:
    text = BASE.read_text(encoding="utf-8")
    text = text.replace(
        'path = "../../project"', f'path = "{os.path.relpath(WHEELS.parent / "project", tmp_path)}"'
    )
    text = text.replace('gpu_archs.x86_64 = ["8.0+PTX"]', f"gpu_archs.x86_64 = {archs}")
    text += f'\n[[dependency]]\npackage = "{package}"\nindex = "pypi"\ngpu_coverage = "{mode}"\n'
    path = tmp_path / f"{package}-{mode}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _plan(tmp_path: Path, policy: Path, wheel: str, *extra: str) -> tuple[int, str, str]:
    house = tmp_path / "house"
    house.mkdir(exist_ok=True)
    shutil.copy(next(WHEELS.glob(f"{wheel}-*.whl")), house)
    env = {**os.environ, "WHEELWRIGHT_CACHE": str(tmp_path / "cache")}
    done = python_m("release", "plan", "--policy", str(policy), "--wheelhouse", str(house), *extra,
                    env=env, cwd=ROOT, timeout=120)  # fmt: skip
    return done.returncode, done.stdout, done.stderr


def test_a_row_that_loses_a_gpu_fails_and_the_dependencys_list_passes(tmp_path: Path) -> None:
    """gx_native_cu130 carries 7.5;8.0;8.6;9.0;10.0;12.0+PTX: a row of 8.0+PTX loses the T4."""
    code, _, err = _plan(
        tmp_path, _policy(tmp_path, '["8.0+PTX"]', "gx_native_cu130", "fail"), "gx_native_cu130"
    )
    assert code == 1, err
    assert (
        "row cu130-py312-x86_64: its gpu_archs omits GPUs gx_native_cu130 runs on: T4 / RTX 20 (7.5)" in err
    )
    same = '["7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"]'
    code, out, err = _plan(tmp_path, _policy(tmp_path, same, "gx_native_cu130", "fail"), "gx_native_cu130")
    assert code == 0, err
    assert (
        "✓ cu130-py312-x86_64 against gx_native_cu130" in out
        and "lost (the dependency runs there, the row does not): none" in out
    )


def test_an_unreadable_or_empty_dependency_fails_closed(tmp_path: Path) -> None:
    code, _, err = _plan(
        tmp_path, _policy(tmp_path, '["8.0+PTX"]', "fx_corrupt_fatbin", "fail"), "fx_corrupt_fatbin"
    )
    assert code == 2 and "[[dependency]] fx_corrupt_fatbin: fx_corrupt_fatbin-1.0.0+cu130" in err, err
    assert "carries no readable device code" in err
    code, out, err = _plan(tmp_path, _policy(tmp_path, '["8.0+PTX"]', "fx_no_device_code", "report"),
                           "fx_no_device_code", "--coverage")  # fmt: skip
    assert code == 0, err
    assert "against fx_no_device_code: not read: fx_no_device_code-1.0.0+cu130" in out
    assert "carries no device code: nothing to compare with" in out
