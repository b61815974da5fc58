"""The release-level publish guards (release/publish/rows.py) against a real local index:
every refusal uploads nothing, and each guard has a case that must fail it and one that passes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest_index import build_tiny_wheel, write_audit_record

from release.core.errors import CheckFailed, InputError
from release.core.hashing import sha256_file
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.publish.index_client import remote_hashes
from release.publish.local_index import LocalIndex, local_index
from release.publish.rows import publish_rows

pytestmark = pytest.mark.integration
TAG = "cp312-cp312-manylinux_2_28_x86_64"


def _policy_text(index: LocalIndex) -> str:
    return f"""
schema_version = 1
[project]
name = "tinyaxpy"
path = "examples/tinyaxpy"
import_name = "tinyaxpy"
check = "tinyaxpy:selftest"
[matrix]
platforms = ["x86_64"]
pythons = ["3.12"]
trains = ["13.0"]
cpu_wheel = "enable"
manylinux = "manylinux_2_28"
[train."13.0"]
variant = "cu130"
builder_image = {{ x86_64 = "pytorch/manylinux2_28-builder:cuda13.0" }}
gpu_archs.x86_64 = ["8.0", "9.0+PTX"]
[[train."13.0".cuda_packages]]
name = "nvidia-cuda-runtime"
libraries = ["libcudart.so.13"]
installs_to = "nvidia/cu13/lib"
[target.production]
rehearsal = false
index.cpu = {{ upload_url = "{index.upload_url("cpu")}", simple_url = "{index.simple_url("cpu")}" }}
index.cu130 = {{ upload_url = "{index.upload_url("cu130")}", simple_url = "{index.simple_url("cu130")}" }}
"""


@pytest.fixture
def index(tmp_path: Path) -> Iterator[LocalIndex]:
    with local_index(("cpu", "cu130"), tmp_path / "index") as idx:
        yield idx


def _setup(tmp_path: Path, index: LocalIndex, *, gpu_ran: bool) -> tuple[Policy, tuple[Row, ...], Path]:
    policy_file = tmp_path / "rows.toml"
    policy_file.write_text(_policy_text(index), encoding="utf-8")
    policy = load_policy(policy_file)
    psha = hashlib.sha256(policy_file.read_bytes()).hexdigest()
    dist = tmp_path / "dist"
    for variant, version in (("cpu", "0.3.0"), ("cu130", "0.3.0+cu130")):
        wheel = build_tiny_wheel(dist / variant, name="tinyaxpy", version=version, tag=TAG)
        write_audit_record(wheel, row=f"{variant}-py312-x86_64", variant=variant, policy_sha256=psha)
        smoke = {"passed": True, "executed": gpu_ran or variant == "cpu", "sha256": sha256_file(wheel)}
        wheel.with_name(wheel.name + ".smoke.json").write_text(json.dumps(smoke), encoding="utf-8")
    return policy, expand(policy), dist


def _on_index(index: LocalIndex) -> set[str]:
    return {f for v in ("cpu", "cu130") for f in remote_hashes(index.simple_url(v), "tinyaxpy")}


def _env(index: LocalIndex) -> dict[str, str]:
    return {**index.credentials_env("cpu"), **index.credentials_env("cu130"), "PATH": "/usr/bin:/bin"}


def test_production_needs_a_gpu_run_per_cuda_variant(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _setup(tmp_path, index, gpu_ran=False)
    with pytest.raises(CheckFailed, match="no wheel of cu130 was smoke-tested on a GPU"):
        publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index))
    assert _on_index(index) == set()


def test_production_publishes_the_whole_verified_release(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _setup(tmp_path, index, gpu_ran=True)
    with pytest.raises(CheckFailed, match="not on the index yet"):
        publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index), mode="verify")
    reports = publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index))
    assert sorted(r.variant for r in reports) == ["cpu", "cu130"]
    assert len(_on_index(index)) == 2
    # verify mode now passes: every audited file is on its index with its sha256
    assert (
        publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index), mode="verify") == []
    )


def test_unaudited_row_refused_with_nothing_uploaded(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _setup(tmp_path, index, gpu_ran=True)
    for record in (dist / "cu130").glob("*.audit.json"):
        record.unlink()
    with pytest.raises(CheckFailed):
        publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index))
    assert _on_index(index) == set()


def test_two_wheels_for_one_row_refused(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _setup(tmp_path, index, gpu_ran=True)
    build_tiny_wheel(dist / "cu130", name="tinyaxpy", version="0.2.0+cu130", tag=TAG)
    with pytest.raises(CheckFailed, match="2 wheels for cu130-py312-x86_64"):
        publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index))
    assert _on_index(index) == set()


def test_production_refuses_a_selection_and_unknown_skip_variant(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _setup(tmp_path, index, gpu_ran=True)
    with pytest.raises(CheckFailed, match="only takes the whole release"):
        publish_rows(policy, rows[:1], target_name="production", dist=dist, env=_env(index))
    with pytest.raises(InputError, match="--skip-variant cu999"):
        publish_rows(
            policy, rows, target_name="production", dist=dist, env=_env(index), skip_variants=["cu999"]
        )
    assert _on_index(index) == set()
