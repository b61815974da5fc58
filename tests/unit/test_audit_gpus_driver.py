"""The GPU table and the gpus check: kernel units only, a/f variants, drivers, --runs-on, libraries that cannot load."""

from __future__ import annotations

from dataclasses import replace

from helpers.audit import contents, cuda, elf, entry, fatbin, lib

from release.audit.checks import device_code, gpus
from release.audit.claim import apply_options
from release.audit.drivers import library_cuda_major, need_for_entry
from release.audit.model import Expectation, Finding, Library
from release.binary.fatbin import Fatbinary, FatbinEntry
from release.policy.archs import parse_claim_list


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def claim(text: str) -> Expectation:
    """A cu130 expectation for a claim in the audit's syntax (nvcc spellings too)."""
    return replace(cuda(), gpu_archs=parse_claim_list(text))


def ptx(arch: int, isa: tuple[int, int]) -> FatbinEntry:
    return FatbinEntry("ptx", arch, "", code_version=isa)


def with_units(library: Library, *kernels: bool | None) -> Library:
    return replace(library, unit_kernels=kernels)


def table(c: object, exp: object) -> dict[str, str]:
    return {row.cc: row.libraries["pkg/lib/libk.so"] for row in gpus.gpu_table(c, exp)}  # type: ignore[arg-type]


def test_the_link_steps_unit_is_not_counted() -> None:
    stub = fatbin("sm_80")  # nvcc's link step: SASS for the link's targets, no kernel
    unit = Fatbinary(0, (entry("sm_80"), ptx(80, (9, 0))))
    k = with_units(lib("pkg/lib/libk.so", stub, unit), False, True)
    assert table(contents(k), cuda("8.0+PTX"))["9.0"] == "ptx-jit"  # the H200 ran it by JIT
    counted = with_units(k, True, True)
    assert table(contents(counted), cuda("8.0+PTX"))["9.0"] == "partial"  # had the stub held kernels
    assert device_code.arch_list_found(contents(k)) == "8.0+PTX"
    assert not failing(device_code.check(contents(with_units(lib("pkg/lib/libk.so", fatbin("sm_75"), unit), False, True)),
                                         cuda("8.0+PTX")))  # fmt: skip  # the stub's target is no claim


def test_a_and_f_variants_run_where_cuda_says() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_90a", "sm_100f", "sm_120a"))
    t = table(
        contents(k, platform_tags=("manylinux_2_28_aarch64",)), cuda("9.0a;10.0f;12.0a")
    )  # Thor, Spark: arm
    assert t["9.0"] == "native" and t["10.0"] == t["10.3"] == "native" and t["12.0"] == "native"
    assert t["8.0"] == t["11.0"] == t["12.1"] == "none"  # 12.0a is 12.0 only
    assert not failing(gpus.check(contents(k), apply_options(cuda("9.0a;10.0f;12.0a"), runs_on="9.0,10.3")))
    msgs = failing(gpus.check(contents(k), apply_options(cuda("9.0a;10.0f;12.0a"), runs_on="12.1")))
    assert msgs and "does not run on DGX Spark (12.1)" in msgs[0]


def test_plain_claim_met_by_a_variant_says_no_model_would_fail() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90a", "compute_90a"))
    msgs = failing(device_code.check(contents(k), cuda("8.0;9.0+PTX")))
    assert not any("would fail" in m for m in msgs)  # sm_90a runs on an H100
    assert any("['sm_90a', 'compute_90a']" in m and "arch-specific" in m for m in msgs)
    assert any("carries no PTX for ['compute_90']" in m for m in msgs)
    assert not failing(gpus.check(contents(k), cuda("8.0;9.0+PTX")))


def test_ptx_jit_needs_the_driver_of_its_isa() -> None:
    k = lib("pkg/lib/libk.so", Fatbinary(0, (entry("sm_80"), ptx(80, (9, 2)))))
    exp = cuda("8.0+PTX")
    assert library_cuda_major(k, exp) == 13
    (row,) = [r for r in gpus.gpu_table(contents(k), exp) if r.cc == "9.0"]
    assert row.libraries["pkg/lib/libk.so"] == "ptx-jit"
    assert row.needs["pkg/lib/libk.so"].startswith("CUDA 13.2")
    on_130 = apply_options(exp, driver="13.0", runs_on="9.0")
    assert table(contents(k), on_130)["9.0"] == "none"
    msgs = failing(gpus.check(contents(k), on_130))
    assert any("does not run on H100 / H200 (9.0) on a CUDA 13.0 driver" in m for m in msgs)
    assert any(
        "PTX (ISA 9.2) needs a driver of CUDA 13.2" in m and "cudaErrorUnsupportedPtxVersion" in m
        for m in msgs
    )
    assert not failing(gpus.check(contents(k), apply_options(exp, driver="13.2", runs_on="9.0")))
    # the same arch list from 13.0 (ISA 9.0) runs on that driver
    k130 = lib("pkg/lib/libk.so", Fatbinary(0, (entry("sm_80"), ptx(80, (9, 0)))))
    assert not failing(gpus.check(contents(k130), on_130))


def test_sass_runs_on_any_driver_of_its_major_and_newer() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90"))
    assert table(contents(k), apply_options(cuda("8.0;9.0"), driver="13.0"))["9.0"] == "native"
    assert table(contents(k), apply_options(cuda("8.0;9.0"), driver="12.8"))["9.0"] == "none"  # a 13 runtime
    cu12 = replace(k, elf=elf(needed=("libcudart.so.12",)))
    assert table(contents(cu12), apply_options(cuda("8.0;9.0"), driver="13.0"))["9.0"] == "native"
    assert table(contents(k), apply_options(cuda("8.0;9.0"), driver="12.0"))["12.0"] == "none"


def test_unknown_isa_needs_a_newer_driver_than_any_known() -> None:
    need = need_for_entry(ptx(80, (9, 9)))
    assert need is not None and need.release is None and "newer than any wheelwright knows" in need.label()


def test_partial_support_and_runs_on() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90"), fatbin("sm_100f"))  # Blackwell-only kernels
    t = table(contents(k), claim("8.0;9.0;sm_100f"))
    assert t["9.0"] == "partial" and t["10.0"] == "partial" and t["7.5"] == "none"
    found = gpus.check(contents(k), apply_options(claim("sm_80;sm_90;sm_100f"), runs_on="9.0"))
    assert not failing(found)  # partial on a GPU of --runs-on: a note, not a failure
    assert any(
        f.ok and f.details.get("support") == "partial" and "1 with sm_100f" in f.message for f in found
    )
    msgs = failing(gpus.check(contents(k), apply_options(claim("sm_80;sm_90;sm_100f"), runs_on="7.5")))
    assert msgs == [
        "libk.so does not run on T4 / RTX 20 (7.5), which --runs-on names: 2 of its 2 translation units "
        "with kernels have neither SASS nor PTX for it"
    ]


def test_a_library_that_cannot_load_runs_nowhere() -> None:
    rdc = replace(lib("pkg/lib/libk.so", device=True), relocatable=(fatbin("sm_80", "sm_90", "compute_90"),),
                  link_needs=("__cudaRegisterLinkedBinary_abc",))  # fmt: skip
    assert set(table(contents(rdc), cuda())) and set(table(contents(rdc), cuda()).values()) == {"none"}
    msgs = failing(device_code.check(contents(rdc), cuda()))
    assert len(msgs) == 1 and msgs[0].startswith(
        "libk.so cannot be loaded: it carries only relocatable device code"
    )
    assert "__cudaRegisterLinkedBinary_abc" in msgs[0] and "nvcc -dlink" in msgs[0]
    linked = replace(rdc, fatbins=(fatbin("sm_80", "sm_90"),), link_needs=())
    assert not failing(device_code.check(contents(linked), cuda("8.0;9.0")))
