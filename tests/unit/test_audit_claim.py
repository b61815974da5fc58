"""Claims: the arch list syntax (PTX only, a/f, per library), --runs-on, --driver, --checks, --allow."""

from __future__ import annotations

import pytest
from helpers.audit import contents, cuda, fatbin, lib

from release.audit.checks import device_code, gpus
from release.audit.claim import (
    apply_options,
    claim_expectation,
    parse_checks,
    parse_claim,
    parse_runs_on,
    variant_train,
)
from release.audit.drivers import DriverSyntaxError, parse_driver
from release.audit.model import Expectation
from release.core.errors import InputError
from release.policy.archs import (
    Arch,
    ArchSyntaxError,
    claim_text,
    parse_arch,
    parse_claim_list,
    torch_cuda_arch_list,
)


def test_claim_entries_in_both_spellings() -> None:
    archs = parse_claim_list("7.5;8.0+PTX;sm_90a;compute_120;10.0f")
    assert [str(a) for a in archs] == ["7.5", "8.0+PTX", "sm_90a", "compute_120", "10.0f"]
    assert archs[2] == Arch(9, 0, "a", ptx=False, ships_sass=True, strict=False)
    assert archs[3] == Arch(12, 0, "", ptx=True, ships_sass=False, strict=False)
    assert parse_claim_list(claim_text(archs)) == archs  # the spelling reads back


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SM_90", "not an nvcc architecture"),
        ("sm_95", "not a real compute capability"),
        ("compute_90x", "not an nvcc architecture"),
        ("9.0+ptx", "in upper case"),
        ("", "empty"),
    ],
)
def test_claim_syntax_errors_say_how_to_write_it(text: str, message: str) -> None:
    with pytest.raises(ArchSyntaxError, match=message):
        parse_claim_list(text)


def test_the_policy_syntax_stays_strict() -> None:
    with pytest.raises(ArchSyntaxError):
        parse_arch("compute_90")
    with pytest.raises(ArchSyntaxError, match="TORCH_CUDA_ARCH_LIST cannot express"):
        torch_cuda_arch_list(parse_claim_list("8.0;compute_90"))


def test_per_library_claims() -> None:
    archs, per = parse_claim("7.5;8.0 lib/libk.so=9.0+PTX sm_100 libq.so=compute_80")
    assert [str(a) for a in archs] == ["7.5", "8.0"]
    assert [(name, [str(a) for a in a_]) for name, a_ in per] == [
        ("lib/libk.so", ["9.0+PTX", "sm_100"]),
        ("libq.so", ["compute_80"]),
    ]
    exp = Expectation("cu130", "13.0", archs, (), library_archs=per)
    assert exp.archs_for("pkg/lib/libk.so") == per[0][1]  # by the end of its wheel path
    assert exp.archs_for("pkg/lib/libq.so") == per[1][1]  # by file name
    assert (
        Expectation("cu130", "13.0", archs, (), library_archs=(("*/libq*", ()),)).archs_for("a/libq.so") == ()
    )
    assert exp.archs_for("pkg/lib/libother.so") == archs


@pytest.mark.parametrize(
    ("text", "message"),
    [("=8.0", "LIBRARY=ARCHS"), ("a.so=8.0 a.so=9.0", "two lists"), ("a.so=8.0=9.0", "LIBRARY=ARCHS")],
)
def test_per_library_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_claim(text)


def test_runs_on_driver_checks_allow() -> None:
    assert parse_runs_on("7.5, 8.0;9.0 9.0") == ((7, 5), (8, 0), (9, 0))
    with pytest.raises(InputError, match="not a real compute capability"):
        parse_runs_on("9.9")
    with pytest.raises(InputError, match="not a compute capability"):
        parse_runs_on("sm_90")
    assert parse_checks("gpus,device_code") == ("device_code", "gpus")
    with pytest.raises(InputError, match="did you mean 'device_code'"):
        parse_checks("devicecode")
    assert parse_driver("13.0").label == "13.0"
    assert parse_driver("580.159.04").label == "13.0"  # the lent H200's driver
    assert parse_driver("575.51.03").label == "12.9"
    for bad in ("13.7", "300.1", "thirteen"):
        with pytest.raises(DriverSyntaxError):
            parse_driver(bad)
    exp = apply_options(cuda(), runs_on="9.0", driver="13.0", checks="gpus", allow=["embedded-device-code"])
    assert exp.runs_on == ((9, 0),) and exp.driver is not None and exp.checks == ("gpus",)
    assert exp.embedded_device_code == "allow" and exp.overrides == ("--allow embedded-device-code",)
    with pytest.raises(InputError, match="--allow"):
        apply_options(cuda(), allow=["everything"])


def test_standalone_expectations() -> None:
    assert (
        variant_train("cu128") == "12.8"
        and variant_train("cu118") == "11.8"
        and variant_train("cu130") == "13.0"
    )
    with pytest.raises(InputError, match="not 'cpu' or a CUDA variant"):
        variant_train("cuda13")
    exp = claim_expectation(variant="cu128", gpu_archs="8.0;9.0+PTX", policy=None)
    assert exp.standalone and exp.train == "12.8" and exp.is_cuda
    auto = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="9.0")
    assert auto.standalone and auto.train is None and auto.variant == "cuda" and auto.is_cuda
    with pytest.raises(InputError, match="CPU wheel carries no device code"):
        claim_expectation(variant="cpu", gpu_archs="8.0", policy=None)


def test_read_back_passes_when_fed_back() -> None:
    """Whatever a library carries, its read-back claim passes device_code and gpus."""
    shapes = [
        (fatbin("sm_80", "sm_90", "compute_90"),),
        (
            fatbin("sm_75", "sm_80", "sm_120"),
            fatbin("sm_80", "sm_120", "compute_120"),
        ),  # 7.5 in one unit only
        (fatbin("sm_90a", "compute_90a"), fatbin("sm_100f")),
        (fatbin("compute_80"),),
        (fatbin("sm_80", "sm_89", "sm_90a", "sm_103f", "sm_121a", "compute_121"),),
    ]
    for units in shapes:
        c = contents(lib("pkg/lib/libk.so", *units))
        found = device_code.arch_list_found(c)
        assert found is not None
        archs, per = parse_claim(found)
        exp = Expectation("cu130", "13.0", archs, (), library_archs=per)
        failing = [f.message for f in device_code.check(c, exp) + gpus.check(c, exp) if not f.ok]
        assert failing == [], (found, failing)
    partial = contents(lib("pkg/lib/libk.so", fatbin("sm_75", "sm_80"), fatbin("sm_80")))
    assert device_code.arch_list_found(partial) == "sm_75;8.0"  # 7.5 is carried, not promised
