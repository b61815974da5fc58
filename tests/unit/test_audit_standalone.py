"""Audits without a policy: the train and the package rules come from the wheel (release.audit.standalone)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers.audit import contents, elf, fatbin, lib

from release.audit import standalone
from release.audit.checks import loader, packages
from release.audit.checks.packages import declared_requirements
from release.audit.claim import claim_expectation
from release.audit.model import Contents, Finding


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def wheel_with(requires: list[str], *libs: object, local: str | None = None) -> Contents:
    meta = "Name: pkg\nVersion: 1.0\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    c = contents(*libs, metadata=meta)  # type: ignore[arg-type]
    return replace(c, wheel=replace(c.wheel, local=local, name="pkg"))


def auto() -> object:
    return claim_expectation(variant=None, gpu_archs="8.0;9.0+PTX", policy=None)


@pytest.mark.parametrize(
    ("requires", "needed", "local", "train", "how"),
    [
        ([], ("libcudart.so.13",), "cu128", "12.8", "local version label"),
        ([], ("libcudart.so.12",), None, "12", "CUDA runtime its libraries link"),
        (["cuda-toolkit[cudart]==13.0.3"], ("libc.so.6",), None, "13.0", "requirement 'cuda-toolkit"),
        (["nvidia-cublas-cu12"], ("libc.so.6",), None, "12", "requirement 'nvidia-cublas-cu12'"),
        ([], ("libcublas.so.13",), None, "13", "CUDA library its libraries link"),
        ([], ("libc.so.6",), None, None, "nothing in the wheel"),
    ],
)
def test_the_train_comes_from_the_wheel(
    requires: list[str], needed: tuple[str, ...], local: str | None, train: str | None, how: str
) -> None:
    c = wheel_with(requires, lib("pkg/lib/libk.so", fatbin("sm_80"), info=elf(needed=needed)), local=local)
    found, why = standalone.infer_train(c, declared_requirements(c.wheel.metadata or "")[0])
    assert (found, how in why) == (train, True), why


def test_declared_packages_expand_toolkit_extras_and_carry_install_folders() -> None:
    needed = ("libcudart.so.13", "libcublas.so.13", "libcurand.so.10", "libcudnn.so.9")
    c = wheel_with(
        ["cuda-toolkit[cudart,cublas,curand]==13.0.3", "nvidia-cudnn-cu13==9.24.0.43", "cuda-bindings>=13"],
        lib(
            "pkg/lib/libk.so",
            fatbin("sm_80"),
            info=elf(needed=needed, runpath=("$ORIGIN/../../nvidia/cu13/lib",)),
        ),
    )
    exp = standalone.resolve(auto(), c)  # type: ignore[arg-type]
    assert exp.train == "13.0" and exp.variant == "cu130"
    by_name = {p.name: p for p in exp.cuda_packages}
    assert by_name["nvidia-cublas"].libraries == ("libcublas.so.13",)
    assert by_name["nvidia-cublas"].also_accepted == ("cuda-toolkit[cublas]",)
    assert by_name["nvidia-curand"].libraries == (
        "libcurand.so.10",
    )  # shared by CUDA 12 and 13: the declared one
    assert by_name["nvidia-cudnn-cu13"].installs_to == "nvidia/cudnn/lib"
    # cuDNN lands in nvidia/cudnn/lib, which this RUNPATH does not reach: the loader says so
    msgs = failing(loader.check(c, exp))
    assert len(msgs) == 1 and "libcudnn.so.9 from nvidia-cudnn-cu13" in msgs[0]
    assert not failing(packages.check(c, exp))


def test_packages_of_another_cuda_major_fail() -> None:
    c = wheel_with(
        ["nvidia-cuda-runtime-cu12==12.4.*", "nvidia-cuda-runtime-cu11==11.8.89"],
        lib("pkg/lib/libk.so", fatbin("sm_80"), info=elf(needed=("libcudart.so.12",))),
    )
    exp = standalone.resolve(auto(), c)  # type: ignore[arg-type]
    msgs = failing(packages.check(c, exp))
    assert msgs == [
        "declares 'nvidia-cuda-runtime-cu11==11.8.89', a CUDA 11 package, but the wheel is CUDA 12 (the CUDA "
        "runtime its libraries link (libcudart.so.12))"
    ]


def test_a_pin_outside_the_train_fails() -> None:
    c = wheel_with(["cuda-toolkit[cudart]==12.8.1"], lib("pkg/lib/libk.so", fatbin("sm_80")), local="cu130")
    msgs = failing(packages.check(c, standalone.resolve(auto(), c)))  # type: ignore[arg-type]
    assert len(msgs) == 1 and "pins a version outside CUDA 13.0" in msgs[0]


def test_a_library_no_declared_package_provides() -> None:
    c = wheel_with([], lib("pkg/lib/libk.so", fatbin("sm_80"), info=elf(needed=("libcudart.so.12",))))
    exp = standalone.resolve(auto(), c)  # type: ignore[arg-type]
    (msg,) = failing(loader.check(c, exp))
    assert "needs libcudart.so.12" in msg and "nvidia-cuda-runtime-cu12 ships it" in msg
