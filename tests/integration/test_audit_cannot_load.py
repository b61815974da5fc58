"""Cannot-load stated as such (issue 24 item 4): a library whose relocatable device code was never
device-linked (its host code calls a ``__cudaRegisterLinkedBinary_*`` no file defines) fails the
audit as "cannot be loaded", with the reason in the message, the inventory (``loads: false``,
``why``) and the GPU table, with a claim (``device_code``) and without one (``loader``: a
standalone audit of someone else's wheel). The device-linked twin passes. Real fixture wheels
(tests/fixtures/make_fixtures.py: built with nvcc), the real command, from an empty folder."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from helpers.proc import python_m, repo_env

pytestmark = pytest.mark.integration

WHEELS = Path(__file__).resolve().parents[1] / "fixtures" / "wheels"
UNLINKED = next(WHEELS.glob("gx_rdc_unlinked-*.whl"))
LINKED = next(WHEELS.glob("fx_rdc_linked-*.whl"))


def _audit(wheel: Path, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    copy = tmp_path / wheel.name
    shutil.copy2(wheel, copy)
    proc: subprocess.CompletedProcess[str] = python_m(
        "release", "audit", str(copy), "--json", *args, cwd=tmp_path, env=repo_env(), timeout=300
    )
    return proc.returncode, json.loads(proc.stdout)["results"][0]


def _library(result: dict[str, Any], name: str) -> dict[str, Any]:
    return next(lib for lib in result["inventory"] if lib["library"].endswith(name))


@pytest.mark.parametrize(("args", "check"), [((), "loader"), (("--gpu-archs", "8.0;9.0+PTX"), "device_code")])
def test_a_library_that_cannot_load_fails_saying_so(
    tmp_path: Path, args: tuple[str, ...], check: str
) -> None:
    code, result = _audit(UNLINKED, tmp_path, *args)
    assert code == 1, result
    failing = [f for f in result["findings"] if not f["ok"]]
    said = [f for f in failing if f["message"].startswith("libgx.so cannot be loaded:")]
    assert [f["check"] for f in said] == [check], failing
    # the GPU table's findings say why it runs nowhere (with a claim, the gpus check runs)
    gpus = [f for f in failing if f["check"] == "gpus"]
    assert all(
        "it cannot be loaded (relocatable device code never device-linked)" in f["message"] for f in gpus
    )
    assert bool(gpus) == (check == "device_code")
    assert "__cudaRegisterLinkedBinary_" in said[0]["message"] and "no SASS" not in said[0]["message"]
    lib = _library(result, "libgx.so")
    assert lib["loads"] is False
    assert lib["why"].startswith("relocatable device code never device-linked")


def test_the_device_linked_twin_loads(tmp_path: Path) -> None:
    code, result = _audit(LINKED, tmp_path)
    assert code == 0, [f for f in result["findings"] if not f["ok"]]
    libs = result["inventory"]
    assert libs and all(lib["loads"] is True and lib["why"] is None for lib in libs)
