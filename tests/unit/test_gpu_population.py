"""Which GPUs a wheel can reach and which device code runs on each (cuda.toml ``[gpu].named``): the desktop
minor-version rule on discrete GPUs only, a Tegra GPU (Jetson) runs only its own SASS or PTX, and each CPU
has its own GPUs (an x86_64 wheel has no Jetson, no Grace part, no DGX Spark)."""

from __future__ import annotations

import pytest
from helpers.audit import contents, cuda, fatbin, lib

from release.audit.checks import gpus
from release.resources.cuda import cuda as facts

X86 = ("manylinux_2_28_x86_64",)
ARM = ("manylinux_2_28_aarch64",)


def support(sass_or_ptx: str, cc: str, *, tags: tuple[str, ...] = ARM, name: str | None = None) -> str:
    """The wheel column for the named GPU of ``cc`` (or ``name``) of a one-library wheel."""
    rows = gpus.gpu_table(
        contents(lib("pkg/lib/libk.so", fatbin(*sass_or_ptx.split())), platform_tags=tags), cuda()
    )
    row = next(r for r in rows if r.cc == cc and (name is None or r.name == name))
    return row.wheel


@pytest.mark.parametrize(
    ("code", "cc", "expected"),
    [
        ("sm_80", "8.7", "none"),  # Orin is Tegra: the desktop rule does not hold
        ("sm_86", "8.7", "none"),
        ("sm_80 compute_80", "8.7", "ptx-jit"),  # PTX JITs on Tegra as anywhere
        ("sm_87", "8.7", "native"),
        ("sm_80", "8.6", "native"),  # A10: discrete, minor-version rule
        ("sm_100", "10.3", "native"),  # B300
        ("sm_100", "11.0", "none"),  # Thor: another major, and Tegra
        ("sm_110", "11.0", "native"),
        ("sm_120", "12.1", "native"),  # DGX Spark: integrated, not Tegra: the desktop rule
    ],
)
def test_the_prediction_follows_the_gpus_own_rule(code: str, cc: str, expected: str) -> None:
    assert support(code, cc) == expected


def test_an_x86_64_wheel_has_no_integrated_gpu() -> None:
    rows = gpus.gpu_table(contents(lib("pkg/lib/libk.so", fatbin("sm_80")), platform_tags=X86), cuda())
    names = [r.name for r in rows]
    assert names == [
        "T4 / RTX 20",
        "A100",
        "A10 / RTX 30",
        "L4 / RTX 40",
        "H100 / H200",
        "B200",
        "B300",
        "RTX 50 / RTX PRO",
    ]
    assert not any(facts().gpu(r.major, r.minor).kind != "discrete" for r in rows)


def test_an_aarch64_wheel_has_grace_parts_jetson_thor_and_dgx_spark() -> None:
    rows = gpus.gpu_table(contents(lib("pkg/lib/libk.so", fatbin("sm_80")), platform_tags=ARM), cuda())
    names = {r.name for r in rows}
    assert {"GH200", "GB200", "Jetson Thor", "DGX Spark"} <= names
    assert {
        "T4 / RTX 20",
        "A100",
        "H100 / H200",
        "B200",
        "RTX 50 / RTX PRO",
    } <= names  # discrete, in arm servers


def test_a_jetson_is_reached_only_through_a_jetpack_on_the_generic_stack() -> None:
    thirteen = {g.name for g in facts().gpus_for("aarch64", 13)}
    twelve = {g.name for g in facts().gpus_for("aarch64", 12)}
    assert {"Jetson Orin", "Jetson Thor"} <= thirteen  # JetPack 7.0 (Thor), 7.2 (Orin): CUDA 13 on SBSA
    assert not {"Jetson Orin", "Jetson Thor"} & twelve  # JetPack 6 is L4T's own CUDA 12.6
    (why,) = [w for g, w in facts().out_of_reach("aarch64", 12) if g.name == "Jetson Orin"]
    assert "JetPack 6.2: CUDA 12.6 (L4T)" in why


def test_the_row_platform_tag_decides_over_the_wheels_own() -> None:
    from dataclasses import replace

    exp = replace(cuda(), platform_tag="manylinux_2_28_aarch64")
    rows = gpus.gpu_table(contents(lib("pkg/lib/libk.so", fatbin("sm_80")), platform_tags=X86), exp)
    assert "GH200" in {r.name for r in rows}


def test_the_desktop_rule_is_the_policys() -> None:
    """cuda_gpus keeps the desktop rule beside the Tegra one (archs imports the table, so the table cannot
    import archs): the two say the same for every capability and variant."""
    from release.policy.archs import Variant, ptx_runs_on, sass_runs_on
    from release.resources import cuda_gpus

    variants: tuple[Variant, ...] = ("", "a", "f")
    caps = [m * 10 + n for m, n in facts().capabilities]
    for arch in caps:
        for variant in variants:
            for major, minor in facts().capabilities:
                ours = cuda_gpus.desktop_sass_runs_on(arch, variant, major, minor)
                assert ours == sass_runs_on(arch, variant, major, minor)
                assert cuda_gpus.ptx_runs_on(arch, variant, major, minor) == ptx_runs_on(
                    arch, variant, major, minor
                )
