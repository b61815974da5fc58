"""Checks ``libraries``, ``device_code`` and ``gpus`` on synthetic libraries."""

from __future__ import annotations

import pytest
from helpers.audit import CPU, contents, cuda, elf, fatbin, lib

from release.audit.checks import device_code, gpus, libraries
from release.audit.model import CPU_RULES, Finding


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


# --------------------------------------------------------------------------- device_code


def test_design_message_for_a_missing_arch() -> None:
    found = device_code.check(contents(lib("pkg/lib/libkernels.so", fatbin("sm_80"))), cuda("8.0;9.0"))
    assert failing(found) == [
        "libkernels.so claims GPU architectures ['80', '90'] but only carries device code for ['80']; "
        "a model would fail on hardware needing ['90']"
    ]
    assert found[0].library == "pkg/lib/libkernels.so"
    assert found[0].details["missing"] == ["90"]


def test_design_message_when_everything_is_covered() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "sm_100", "sm_120", "compute_120"))
    found = device_code.check(contents(k), cuda("8.0;9.0;10.0;12.0+PTX"))
    assert [(f.ok, f.message) for f in found] == [
        (True, "device code covers every claimed GPU architecture ['80', '90', '100', '120']")
    ]


def test_no_union_across_libraries() -> None:
    a = lib("pkg/lib/liba.so", fatbin("sm_80"))
    b = lib("pkg/lib/libb.so", fatbin("sm_90", "compute_90"))
    found = device_code.check(contents(a, b), cuda())
    msgs = failing(found)
    assert any(m.startswith("liba.so claims GPU architectures ['80', '90'] but only carries") for m in msgs)
    assert any(m.startswith("libb.so claims GPU architectures ['80', '90'] but only carries") for m in msgs)
    assert any("liba.so carries no PTX for ['compute_90']" in m for m in msgs)
    assert not any(f.ok and "covers every" in f.message for f in found)


def test_union_within_a_library_counts_here() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "compute_90"), fatbin("sm_90"))
    assert not failing(device_code.check(contents(k), cuda()))


def test_missing_ptx_for_the_newest() -> None:
    found = failing(device_code.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90"))), cuda()))
    assert found == [
        "libk.so carries no PTX for ['compute_90']: the newest claimed architecture must also ship as PTX "
        "so newer GPUs can JIT-compile it"
    ]


def test_unclaimed_plain_arch_means_the_list_was_ignored() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_86", "sm_90", "compute_80", "compute_90"))
    found = failing(device_code.check(contents(k), cuda()))
    assert found == [
        "libk.so carries device code the claim does not name: ['compute_80', 'sm_86']; the build ignored the "
        "arch list ['80', '90']"
    ]


@pytest.mark.parametrize(("policy", "fails"), [("reject", True), ("allow", False)])
def test_extra_variants_follow_the_policy(policy: str, fails: bool) -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "sm_90a", "sm_100f", "compute_90"))
    found = device_code.check(contents(k), cuda(extra=policy))
    assert bool(failing(found)) is fails
    note = next(f for f in found if "sm_90a" in f.message)
    assert "['sm_90a', 'sm_100f']" in note.message
    assert ('extra_variants = "reject"' in note.message) is fails


def test_claimed_variant_needs_its_variant() -> None:
    exp = cuda("8.0;9.0a+PTX")
    assert not failing(
        device_code.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90a", "compute_90a"))), exp)
    )
    plain = failing(
        device_code.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "compute_90"))), exp)
    )
    # sm_90 runs on an H100: no "a model would fail", but the arch-specific code the claim names is missing
    assert any("the code the claim names is missing for ['90a (runs sm_90 instead)']" in m for m in plain)
    assert not any("would fail" in m for m in plain)
    assert any("carries no PTX for ['compute_90a']" in m for m in plain)


def test_ltoir_is_not_device_code_a_gpu_runs() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "compute_90", "lto_86"))
    found = device_code.check(contents(k), cuda())
    assert not failing(found)


def test_no_arch_list_fails_closed() -> None:
    found = device_code.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80"))), cuda(None))
    assert len(found) == 1 and not found[0].ok
    assert "no GPU architecture list" in found[0].message


def test_unreadable_library_fails_closed() -> None:
    found = failing(device_code.check(contents(lib("pkg/lib/libk.so", error="truncated")), cuda()))
    assert found == ["cannot tell whether libk.so carries device code: truncated"]
    found = failing(device_code.check(contents(lib("pkg/lib/libk.so", fatbin_error="bad magic")), cuda()))
    assert found == ["libk.so: its device code could not be read: bad magic"]


def test_no_device_code_at_all_fails() -> None:
    found = failing(device_code.check(contents(lib("pkg/lib/libk.so")), cuda()))
    assert found == [
        "no library carries device code, so none of the claimed GPU architectures ['80', '90'] is covered"
    ]


def test_cpu_wheel_carries_no_device_code() -> None:
    assert not failing(device_code.check(contents(lib("pkg/lib/libk.so", info=elf(needed=()))), CPU))
    found = failing(device_code.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80", "compute_80"))), CPU))
    assert len(found) == 1 and "sm_80, compute_80" in found[0] and "CPU wheel" in found[0]


def test_arch_list_found_is_exact_and_says_what_runs_natively() -> None:
    units = [fatbin("sm_75", "sm_80", "sm_120") for _ in range(9)] + [
        fatbin("sm_75", "sm_80", "sm_89", "sm_90a", "sm_120")
    ]
    # every unit runs natively on 8.9 (sm_80) but only one on 9.0: 8.9 is promised, sm_90a is carried
    assert device_code.arch_list_found(contents(lib("pkg/lib/libk.so", *units))) == "7.5;8.0;8.9;sm_90a;12.0"
    ptx = lib("pkg/lib/libp.so", fatbin("sm_80", "sm_90", "compute_90"))
    assert device_code.arch_list_found(contents(ptx)) == "8.0;9.0+PTX"
    assert device_code.arch_list_found(contents(lib("pkg/lib/libk.so"))) is None
    ptx_only = lib("pkg/lib/libq.so", fatbin("sm_80", "compute_90"))
    assert device_code.arch_list_found(contents(ptx_only)) == "8.0;compute_90"
    two = contents(ptx, ptx_only)
    assert device_code.arch_list_found(two) == "pkg/lib/libp.so=8.0;9.0+PTX pkg/lib/libq.so=8.0;compute_90"


# --------------------------------------------------------------------------- libraries


def test_libraries_cuda_needs_device_code() -> None:
    assert not failing(libraries.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80"))), cuda()))
    no_dc = failing(libraries.check(contents(lib("pkg/lib/libk.so")), cuda()))
    assert len(no_dc) == 1 and "carries device code" in no_dc[0]
    nothing = failing(libraries.check(contents(), cuda()))
    assert len(nothing) == 1 and "ships no ELF library" in nothing[0]


def test_libraries_unreadable_so_fails_for_every_wheel() -> None:
    text = lib("pkg/lib/libk.so", error="not an ELF file: it starts with text 'INPUT(libk.so.1)'")
    for exp in (cuda(), CPU):
        msgs = failing(libraries.check(contents(text), exp))
        assert any("libk.so could not be inspected: not an ELF file" in m for m in msgs)


def test_libraries_cpu_rules() -> None:
    found = libraries.check(contents(lib("pkg/lib/libk.so", info=elf(needed=()))), CPU)
    assert [(f.ok, f.message) for f in found] == [(True, CPU_RULES)]
    assert CPU_RULES == "CPU wheel: held to the CPU rules"


# --------------------------------------------------------------------------- gpus


def test_support_rules() -> None:
    table = {
        (row.major, row.minor): row.libraries["pkg/lib/libk.so"]
        for row in gpus.gpu_table(
            contents(
                lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90a", "sm_100f", "compute_90")),
                platform_tags=("manylinux_2_28_aarch64",),  # Jetson Thor and Orin live beside arm CPUs
            ),
            cuda(),
        )
    }
    assert table[(7, 5)] == "none"
    assert table[(8, 0)] == table[(8, 6)] == table[(8, 9)] == "native"  # sm_80 runs on 8.x
    assert table[(9, 0)] == "native"  # sm_90a on exactly 9.0
    assert table[(10, 0)] == table[(10, 3)] == "native"  # sm_100f on the 10.x family
    assert table[(11, 0)] == table[(12, 0)] == "ptx-jit"  # compute_90 JITs upward
    assert table[(8, 7)] == "none"  # Jetson Orin (Tegra) runs no SASS but its own 8.7, and PTX 9.0 is newer


def test_a_library_is_native_only_if_every_translation_unit_is() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "compute_90"), fatbin("sm_80", "compute_90"))
    found = failing(gpus.check(contents(k), cuda()))
    assert found == [
        "libk.so does not run natively on H100 / H200 (9.0), which the claim names: 1 of its 2 "
        "translation units with kernels carry no SASS for it; the driver would have to JIT-compile their PTX"
    ]
    none = failing(
        gpus.check(
            contents(lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "compute_90"), fatbin("sm_80"))), cuda()
        )
    )
    assert len(none) == 1 and "their kernels cannot run there" in none[0]


def test_ltoir_only_units_are_skipped() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "compute_90"), fatbin("lto_80"))
    assert not failing(gpus.check(contents(k), cuda()))


def test_gpu_table_wheel_column_is_the_worst_library() -> None:
    a = lib("pkg/lib/liba.so", fatbin("sm_80", "sm_90", "compute_90"))
    b = lib("pkg/lib/libb.so", fatbin("sm_90"))
    rows = {r.name: r for r in gpus.gpu_table(contents(a, b), cuda())}
    assert rows["A100"].claimed and rows["A100"].wheel == "none"
    assert rows["H100 / H200"].wheel == "native"
    assert not rows["L4 / RTX 40"].claimed


def test_gpus_cpu_and_no_list() -> None:
    assert [f.ok for f in gpus.check(contents(), CPU)] == [True]
    assert [f.ok for f in gpus.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80"))), cuda(None))] == [
        False
    ]
