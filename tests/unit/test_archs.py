from __future__ import annotations

import pytest

from release.policy.archs import (
    ArchSyntaxError,
    cmake_cuda_architectures,
    nvcc_gencode_flags,
    parse_arch,
    parse_arch_list,
    ptx_runs_on,
    sass_runs_on,
    torch_cuda_arch_list,
)

SEED = "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"


def test_round_trip_and_cmake_form() -> None:
    archs = parse_arch_list(SEED)
    assert torch_cuda_arch_list(archs) == SEED
    assert cmake_cuda_architectures(archs) == (
        "75-real;80-real;86-real;89-real;90-real;100-real;120-real;120-virtual"
    )
    assert nvcc_gencode_flags(parse_arch_list("9.0a;12.0+PTX")) == (
        "-gencode=arch=compute_90a,code=sm_90a",
        "-gencode=arch=compute_120,code=sm_120",
        "-gencode=arch=compute_120,code=compute_120",
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("12.0+ptx", "upper case"),
        ("12.0+Ptx", "upper case"),
        ("9.9", "not a real compute capability"),
        ("90", "CMake/sm number"),
        ("sm_90", "not an architecture"),
        ("", "not an architecture"),
    ],
)
def test_bad_spellings(text: str, fragment: str) -> None:
    with pytest.raises(ArchSyntaxError, match=fragment):
        parse_arch(text)


def test_empty_list_rejected() -> None:
    with pytest.raises(ArchSyntaxError, match="empty"):
        parse_arch_list(" ; ")


def test_variants_parse() -> None:
    a = parse_arch("9.0a")
    f = parse_arch("10.0f")
    assert (a.sass, a.virtual, f.sass) == ("sm_90a", "compute_90a", "sm_100f")


@pytest.mark.parametrize(
    ("cc", "variant", "gpu", "expected"),
    [
        (80, "", (8, 6), True),  # sm_80 runs on 8.6
        (80, "", (9, 0), False),  # never across majors
        (86, "", (8, 0), False),  # not on an older minor
        (90, "a", (9, 0), True),
        (100, "a", (10, 3), False),  # arch-specific: exactly its own
        (100, "f", (10, 3), True),  # family: same major, newer minor
        (100, "f", (12, 0), False),
    ],
)
def test_sass_rule(cc: int, variant: str, gpu: tuple[int, int], expected: bool) -> None:
    assert sass_runs_on(cc, variant, *gpu) is expected  # type: ignore[arg-type]


def test_ptx_rule() -> None:
    assert ptx_runs_on(80, "", 9, 0)
    assert ptx_runs_on(120, "", 12, 1)
    assert not ptx_runs_on(120, "", 10, 0)
    assert not ptx_runs_on(90, "a", 10, 0)
