"""No device code by design (issue 33, item 3): NVIDIA's own NVRTC, runtime and nvJitLink wheels.

Audited with ``--runs-on``, such a wheel was "FAILED ... runs on no GPU" on three checks. A wheel that
is NVIDIA's package of every library it ships, none carrying device code, gets a note from
``libraries``, ``device_code`` and ``gpus`` instead, said on the report's first line; any other wheel
without device code (another project's, or NVIDIA's with a library that is not its own) still fails.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from helpers.audit import contents, elf, lib

from release.audit import standalone
from release.audit.checks import device_code, libraries
from release.audit.claim import claim_expectation
from release.audit.model import AuditResult, Contents, Expectation
from release.audit.report.render import render_text

NVRTC = lib("nvidia/cu13/lib/libnvrtc.so.13", info=elf(needed=("libc.so.6",), soname="libnvrtc.so.13"))
OTHER = lib("pkg/lib/libhost.so", info=elf(needed=("libc.so.6",), soname="libhost.so"))


def wheel_of(name: str, *libs: object) -> Contents:
    c = contents(*libs)  # type: ignore[arg-type]
    return replace(c, wheel=replace(c.wheel, name=name, local=None))


def runs_on() -> Expectation:
    return claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="8.0,9.0")


def test_nvidias_nvrtc_wheel_without_device_code_gets_a_note_not_a_failure() -> None:
    c = wheel_of("nvidia-cuda-nvrtc", NVRTC)
    exp = standalone.by_design(standalone.resolve(runs_on(), c), c)
    assert exp.by_design is not None and "NVIDIA's package of NVRTC" in exp.by_design
    found = libraries.check(c, exp) + device_code.check(c, exp)
    assert [f.ok for f in found] == [True, True], [f.message for f in found]
    assert all(f.message.startswith("note: no device code by design") for f in found)
    result = AuditResult(
        "nvidia_cuda_nvrtc-13.0.88-py3-none-any.whl", Path("x.whl"), "0" * 64, exp, tuple(found), (), None
    )
    first = render_text(result).splitlines()[0]
    assert first.startswith("nvidia_cuda_nvrtc-13.0.88-py3-none-any.whl: no device code by design"), first


def test_a_wheel_without_device_code_that_is_not_nvidias_own_still_fails() -> None:
    for c in (
        wheel_of("pkg", NVRTC),  # a copy of NVRTC in someone else's wheel
        wheel_of("nvidia-cuda-nvrtc", NVRTC, OTHER),  # a library that is not NVRTC's
        wheel_of("pkg", OTHER),
    ):
        exp = standalone.by_design(standalone.resolve(runs_on(), c), c)
        assert exp.by_design is None
        found = libraries.check(c, exp) + device_code.check(c, exp)
        assert [f.ok for f in found] == [False, False], [f.message for f in found]
        assert "runs on no GPU" in " ".join(f.message for f in found)


def test_a_row_audit_is_never_noted_by_design() -> None:
    c = wheel_of("nvidia-cuda-nvrtc", NVRTC)
    row = replace(runs_on(), standalone=False)
    assert standalone.by_design(row, c).by_design is None
