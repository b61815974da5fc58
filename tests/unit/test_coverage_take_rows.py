"""Where a ``gpu_coverage = "take"`` row's list is resolved (release/coverage/take.py, pure parts): the row
gets the dependency's list and its source, which the plan's JSON and the build record carry; rows with no
``take`` dependency come back untouched with nothing read; a ``take`` dependency with no SASS to take is
refused rather than silently building rows.toml's list."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from helpers.audit import fatbin, lib

from release.core.errors import InputError
from release.coverage.compare import GpuCoverageMode, compare
from release.coverage.dependency import DependencyCode
from release.coverage.predict import row_coverage
from release.coverage.run import CoverageReport, RowReport, with_taken_lists
from release.coverage.take import needs_taking, take_lists
from release.policy.archs import parse_arch_list
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.wheelbuild.output import record_data

ROOT = Path(__file__).resolve().parents[2]
TORCH = "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
SHA = "ab" * 32


def _torch(*targets: str) -> DependencyCode:
    libs = (lib("torch/lib/libtorch_cuda.so", fatbin(*targets)),)
    return DependencyCode("torch", TORCH, libs, 0.0, SHA)


def _policy(mode: str) -> tuple[Policy, Row]:
    policy = load_policy(ROOT / "examples" / "torchsaxpy" / "rows.toml")
    deps = tuple(replace(d, gpu_coverage=mode) for d in policy.dependencies)
    policy = replace(policy, dependencies=deps)
    (row,) = [r for r in expand(policy) if r.is_cuda]
    return policy, replace(row, gpu_archs=parse_arch_list("9.0+PTX"))


def _taken(row: Row, code: DependencyCode, mode: GpuCoverageMode = "take") -> tuple[Row, ...]:
    cov = row_coverage(row.id, row.platform, row.train, row.gpu_archs)
    return with_taken_lists(
        (row,), CoverageReport((RowReport(cov, (compare(cov, row.gpu_archs, code, mode),)),))
    )


def test_a_take_row_gets_the_list_and_its_source_for_the_plan_and_the_record(tmp_path: Path) -> None:
    _, row = _policy("take")
    (built,) = _taken(row, _torch("sm_80", "sm_90", "sm_120", "compute_120"))
    assert built.torch_cuda_arch_list == "8.0;9.0;12.0+PTX"  # the row's newest ships PTX: so does the taken
    source = f"torch 2.14.1 ({TORCH} sha256 {SHA})"
    assert built.gpu_archs_source == source
    assert built.to_json()["gpu_archs_source"] == source
    assert "gpu_archs_source" not in row.to_json()  # a row of rows.toml's list: the plan's JSON as before
    wheel = tmp_path / "torchsaxpy-1.0+cu130-cp310-abi3-manylinux_2_34_x86_64.whl"
    wheel.write_bytes(b"not read for the record's fields")
    data = record_data(built, wheel=wheel, backend="host", toolchain=None, python="3.11.9",
                       policy_path=tmp_path / "rows.toml", kernel_cache=None, policy_sha256=SHA)  # fmt: skip
    assert (data.torch_cuda_arch_list, data.gpu_archs_source) == ("8.0;9.0;12.0+PTX", source)


def test_report_and_fail_rows_keep_their_list() -> None:
    _, row = _policy("report")
    assert _taken(row, _torch("sm_80", "sm_90"), "report") == (row,)
    assert _taken(row, _torch("sm_80", "sm_90"), "fail") == (row,)


def test_a_take_dependency_without_sass_is_refused_not_ignored() -> None:  # must fail
    _, row = _policy("take")
    with pytest.raises(
        InputError, match=r"\[\[dependency\]\] torch gpu_coverage = 'take': .* no arch list to take"
    ):
        _taken(row, _torch("compute_80"))


def test_rows_without_a_take_dependency_are_not_read() -> None:
    policy, row = _policy("report")
    assert not needs_taking(policy, row)
    env = {"WHEELWRIGHT_CACHE": "/nonexistent/never-read"}  # nothing is looked for: no error
    assert take_lists(policy, (row,), env=env) == (row,)
    taking, _ = _policy("take")
    assert needs_taking(taking, row)
    with pytest.raises(
        InputError, match=r"row cu130-py311-x86_64: \[\[dependency\]\] torch gpu_coverage = 'take'"
    ):
        take_lists(taking, (row,), env=env)  # must fail closed: no wheel of torch to take from


def test_the_release_pipeline_resolves_take_rows_before_anything_runs(tmp_path: Path) -> None:
    """run_release fails closed on a take row whose dependency wheel is missing, before any row is built."""
    from release.pipeline import run_release

    policy, row = _policy("take")
    env = {"WHEELWRIGHT_CACHE": str(tmp_path / "cache"), "PATH": "/usr/bin:/bin"}
    with pytest.raises(
        InputError, match=r"row cu130-py311-x86_64: \[\[dependency\]\] torch gpu_coverage = 'take'"
    ):
        run_release(policy, (row,), rehearsal=False, target_name="rehearsal", dist=tmp_path / "dist",
                    cache_dir=tmp_path / "cache", host=row.platform, env=env)  # fmt: skip
    assert not (tmp_path / "dist").exists()
