"""NVIDIA's aarch64 CUDA wheels, audited on this (x86_64) machine as a user audits them: ``python -m release
audit W --json`` from an empty folder. No false failure: each gets the verdict its x86_64 twin (the same
project and version) gets, check by check, and the C++ consumer links the aarch64 SDK with an aarch64
toolchain (the cross compilers here), where it used to link an x86_64 program against aarch64 libraries and
report that cuRAND's SDK "does not link".

Pinned by file name and sha256 in tests/helpers/real_wheels.py (``AARCH64_PINS``; about 106 MB, fetched once into
the test cache). All four ship a C++ SDK. The verdicts, the same on both architectures:

======================  =====  ===========================================================================
nvidia_cuda_runtime      0     the runtime's 55 headers compile with CUDA's and libcudart.so.13 links
nvidia_cufile            1     ``loader``: libcufile_rdma.so.1 needs libcufile.so.0 with no RUNPATH to it;
                               ``hygiene``: it links libibverbs.so.1 (and on x86_64 librdmacm, libmlx5),
                               which manylinux does not allow; its SDK links
nvidia_curand            1     ``cpp_consumer``: curand.h declares curandGenerateBinomial(Method), which
                               libcurand.so.10 does not export (a true defect, on both architectures)
nvidia_nvjitlink         0
======================  =====  ===========================================================================

cuobjdump (an x86_64 program) reads aarch64 ELF files: ``--cross-check`` on the aarch64 cuRAND lists the
same 120 entries and headers as the fatbin reader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.real_wheels import AARCH64_BY_KEY, real_aarch64_wheel, x86_64_twin

from release.resources.cpus import host_arch

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
# exit code and failing checks, on both architectures
VERDICTS: dict[str, tuple[int, set[str]]] = {
    "nvidia_cuda_runtime": (0, set()),
    "nvidia_cufile": (1, {"loader", "hygiene"}),
    "nvidia_curand": (1, {"cpp_consumer"}),
    "nvidia_nvjitlink": (0, set()),
}


def audit(wheel: Path, *args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    """``python -m release audit WHEEL ARGS --json --no-record --no-cache`` in ``cwd`` (no rows.toml there)."""
    cwd.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "release", "audit", str(wheel), *args, "--json", "--no-record", "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=1200,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    assert proc.stdout, proc.stderr
    report: dict[str, Any] = json.loads(proc.stdout)
    assert not report["errors"], (report["errors"], proc.stderr[-3000:])
    return proc.returncode, report


def _failing(report: dict[str, Any]) -> set[str]:
    (result,) = report["results"]
    return {f["check"] for f in result["findings"] if not f["ok"]}


def _cpp(report: dict[str, Any]) -> dict[str, Any]:
    (result,) = report["results"]
    (finding,) = [f for f in result["findings"] if f["check"] == "cpp_consumer"]
    return finding  # type: ignore[no-any-return]


def test_every_aarch64_pin_has_a_verdict() -> None:
    assert set(AARCH64_BY_KEY) == set(VERDICTS)


@pytest.mark.parametrize("key", sorted(VERDICTS))
def test_an_aarch64_wheel_gets_its_x86_64_twins_verdict(key: str, tmp_path: Path) -> None:
    code, report = audit(real_aarch64_wheel(key), cwd=tmp_path / "aarch64")
    twin_code, twin = audit(x86_64_twin(key), cwd=tmp_path / "x86_64")
    assert (code, _failing(report)) == (twin_code, _failing(twin)) == VERDICTS[key], (
        [f["message"][:500] for f in report["results"][0]["findings"] if not f["ok"]],
        [f["message"][:500] for f in twin["results"][0]["findings"] if not f["ok"]],
    )
    cpp, twin_cpp = _cpp(report), _cpp(twin)
    assert cpp["details"]["toolchain"]["arch"] == "aarch64"
    assert cpp["details"]["toolchain"]["cross"] is (host_arch() != "aarch64")
    assert twin_cpp["details"]["toolchain"]["arch"] == "x86_64"
    # the same headers, the same functions named; the link is each architecture's own
    assert cpp["details"]["functions"] == twin_cpp["details"]["functions"]
    if key == "nvidia_curand":
        for finding in (cpp, twin_cpp):
            assert "undefined reference to `curandGenerateBinomial'" in finding["message"], finding["message"]
            assert "wrong format" not in finding["message"] and "incompatible" not in finding["message"]


def test_cuobjdump_reads_an_aarch64_library(tmp_path: Path) -> None:
    """The cross-check stays on for aarch64 wheels: this machine's cuobjdump lists aarch64 cuRAND's device code
    as the fatbin reader does."""
    code, report = audit(
        real_aarch64_wheel("nvidia_curand"), "--runs-on", "8.0", "--cross-check", "--checks", "cross_check",
        cwd=tmp_path / "empty",
    )  # fmt: skip
    (result,) = report["results"]
    (finding,) = [f for f in result["findings"] if f["check"] == "cross_check"]
    assert code == 0 and finding["ok"], finding
    assert finding["message"] == (
        "libcurand.so.10: cuobjdump lists the same 120 device code entries as the fatbin reader "
        "(and the same headers: variants, PTX ISA, compression)"
    )
