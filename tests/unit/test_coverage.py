"""``release.coverage``: the prediction for a row's list (pure), and a row against its GPU dependency's
device code (synthetic libraries here; torch's real wheel in tests/integration/test_coverage_torch.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.audit import fatbin, lib

from release.core.errors import CheckFailed, InputError
from release.coverage.compare import compare, taken_list
from release.coverage.dependency import DependencyCode, Wanted
from release.coverage.predict import row_coverage
from release.coverage.run import CoverageReport, RowReport
from release.policy.archs import parse_arch_list
from release.policy.load import load_policy

ROOT = Path(__file__).resolve().parents[2]


def grid(cpu: str, train: str, archs: str) -> dict[str, str]:
    cov = row_coverage("r", cpu, train, parse_arch_list(archs))
    return {g.gpu.name: g.support for g in cov.gpus}


def test_a_ptx_only_route_to_hopper_is_jit_and_needs_the_trains_driver() -> None:
    cov = row_coverage("r", "x86_64", "13.0", parse_arch_list("8.0+PTX"))
    h100 = next(g for g in cov.gpus if g.gpu.cc == "9.0")
    assert (h100.support, h100.via, h100.claimed) == ("ptx-jit", ("compute_80",), False)
    assert h100.needs_driver == "CUDA 13.0 (driver >= 580.65.06)"
    assert grid("x86_64", "13.0", "8.0")["H100 / H200"] == "none"
    assert grid("x86_64", "13.0", "10.0")["H100 / H200"] == "none"


def test_the_arm_cuda_13_row_fails_on_orin_and_runs_on_thor() -> None:
    """The issue's case: 9.0;10.0;11.0+PTX installs on an Orin (JetPack 7.2) and has nothing for it."""
    g = grid("aarch64", "13.0", "9.0;10.0;11.0+PTX")
    assert g["Jetson Orin"] == "none" and g["Jetson Thor"] == "native" and g["GH200"] == "native"
    assert g["DGX Spark"] == "ptx-jit"  # 11.0's PTX JITs upward
    assert grid("aarch64", "13.0", "8.0;8.7;9.0+PTX")["Jetson Orin"] == "native"
    assert grid("aarch64", "13.0", "8.0;8.6;9.0+PTX")["Jetson Orin"] == "none"  # 8.0 SASS: not on Tegra


def test_cuda_12_arm_rows_cannot_reach_a_jetson() -> None:
    cov = row_coverage("r", "aarch64", "12.6", parse_arch_list("8.0;8.7;9.0+PTX"))
    assert "Jetson Orin" not in {g.gpu.name for g in cov.gpus}
    assert [g.name for g, _ in cov.out_of_reach] == ["Jetson Orin", "Jetson Thor"]


def code(*libs: object) -> DependencyCode:
    return DependencyCode("torch", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", libs)  # type: ignore[arg-type]


TORCHISH = code(
    lib(
        "torch/lib/libtorch_cuda.so", fatbin("sm_75", "sm_80", "sm_86", "sm_90", "sm_90a", "sm_100", "sm_120")
    )
)


def test_a_row_that_omits_a_gpu_its_dependency_serves_loses_it() -> None:
    archs = parse_arch_list("8.0;9.0+PTX")
    d = compare(row_coverage("r", "x86_64", "13.0", archs), archs, TORCHISH, "fail")
    assert [g.name for g in d.lost] == ["T4 / RTX 20"]  # PTX 9.0 covers the newer ones by JIT
    assert d.failed and not d.dead and not d.disjoint
    assert d.taken_text == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    report = CoverageReport((RowReport(row_coverage("r", "x86_64", "13.0", archs), (d,)),))
    with pytest.raises(
        CheckFailed, match=r"row r: its gpu_archs omits GPUs torch runs on: T4 / RTX 20 \(7.5\)"
    ):
        report.raise_if_failed("rows.toml")


def test_a_row_with_the_dependencys_list_passes_and_report_never_fails() -> None:
    archs = parse_arch_list("7.5;8.0;8.6;9.0;10.0;12.0+PTX")
    d = compare(row_coverage("r", "x86_64", "13.0", archs), archs, TORCHISH, "fail")
    assert not d.lost and not d.failed and not d.dead
    lossy = parse_arch_list("9.0+PTX")
    assert not compare(row_coverage("r", "x86_64", "13.0", lossy), lossy, TORCHISH, "report").failed


def test_dead_code_and_no_gpu_in_common() -> None:
    only_hopper = code(lib("torch/lib/libtorch_cuda.so", fatbin("sm_90")))
    archs = parse_arch_list("8.0;8.6")
    d = compare(row_coverage("r", "x86_64", "13.0", archs), archs, only_hopper, "fail")
    assert d.dead == ("8.0", "8.6") and d.disjoint and d.failed
    assert [g.name for g in d.lost] == ["H100 / H200"]


def test_take_follows_the_rows_ptx_habit() -> None:
    assert [str(a) for a in taken_list(TORCHISH, parse_arch_list("8.0;9.0"))][-1] == "12.0"
    assert (
        taken_list(code(lib("x/libx.so", fatbin("sm_90a"))), parse_arch_list("9.0+PTX")) == ()
    )  # no plain SASS
    archs = parse_arch_list("9.0+PTX")
    d = compare(row_coverage("r", "x86_64", "13.0", archs), archs, TORCHISH, "take")
    assert d.taken_coverage is not None and d.taken_coverage.archs == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    assert d.to_json()["taken"] == "7.5;8.0;8.6;9.0;10.0;12.0+PTX" and not d.failed


@pytest.mark.parametrize(
    ("name", "fits"),
    [
        ("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", True),
        ("torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl", True),
        ("torch-2.14.1+cu126-cp311-cp311-manylinux_2_28_x86_64.whl", False),  # another train
        ("torch-2.14.1+cpu-cp311-cp311-manylinux_2_28_x86_64.whl", False),
        ("torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl", False),  # another Python
        ("torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl", False),  # another CPU
        ("torchvision-0.29.1-cp311-cp311-manylinux_2_28_x86_64.whl", False),
    ],
)
def test_the_dependency_wheel_must_fit_the_row(name: str, fits: bool) -> None:
    assert Wanted("torch", "x86_64", "3.11", "cu130").fits(name) is fits


def test_gpu_coverage_takes_exact_spellings(tmp_path: Path) -> None:
    import os

    here = ROOT / "examples" / "torchsaxpy"
    rel = os.path.relpath(here, tmp_path)
    text = (here / "rows.toml").read_text(encoding="utf-8").replace('path = "."', f'path = "{rel}"')
    good = tmp_path / "good.toml"
    good.write_text(
        text.replace('package = "torch"', 'package = "torch"\ngpu_coverage = "fail"'), encoding="utf-8"
    )
    assert [d.gpu_coverage for d in load_policy(good).dependencies] == ["fail"]
    bad = tmp_path / "bad.toml"
    bad.write_text(
        text.replace('package = "torch"', 'package = "torch"\ngpu_coverage = "fial"'), encoding="utf-8"
    )
    with pytest.raises(
        InputError, match=r"dependency\[0\]\.gpu_coverage: 'fial' is not allowed; did you mean 'fail'"
    ):
        load_policy(bad)


def test_a_selection_without_cuda_rows_says_so() -> None:
    from release.coverage.render import render

    assert (
        render(CoverageReport(()))
        == "no CUDA row selected: a CPU wheel runs on no GPU, so there is nothing to cover"
    )


def test_take_gives_the_row_the_dependencys_list_for_its_build() -> None:
    from dataclasses import replace

    from release.coverage.run import with_taken_lists
    from release.policy.matrix import expand

    here = ROOT / "examples" / "torchsaxpy" / "rows.toml"
    policy = load_policy(here)
    (row,) = [r for r in expand(policy) if r.is_cuda]
    archs = parse_arch_list("9.0+PTX")
    row = replace(row, gpu_archs=archs)
    cov = row_coverage(row.id, row.platform, row.train, archs)
    took = compare(cov, archs, TORCHISH, "take")
    (built,) = with_taken_lists((row,), CoverageReport((RowReport(cov, (took,)),)))
    assert ";".join(str(a) for a in built.gpu_archs) == "7.5;8.0;8.6;9.0;10.0;12.0+PTX"
    reported = compare(cov, archs, TORCHISH, "report")
    assert with_taken_lists((row,), CoverageReport((RowReport(cov, (reported,)),))) == (row,)
    other = compare(cov, archs, code(lib("torch/lib/libtorch_cuda.so", fatbin("sm_90"))), "take")
    with pytest.raises(InputError, match="two gpu_coverage = 'take' dependencies give different lists"):
        with_taken_lists((row,), CoverageReport((RowReport(cov, (took, other)),)))
