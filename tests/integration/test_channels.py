"""Dependency channels from rows.toml, checked against a real local index before any build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.index import build_tiny_wheel
from helpers.policy import link_examples

from release.core.errors import CheckFailed
from release.policy.load import load_policy
from release.policy.matrix import expand
from release.publish.channels import check_rows, rules_for
from release.publish.index.local import local_index

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _policy_with(tmp_path: Path, dependency: str) -> Path:
    path = tmp_path / "rows.toml"
    path.write_text((ROOT / "rows.toml").read_text() + "\n" + dependency, encoding="utf-8")
    link_examples(tmp_path)
    return path


def test_channel_with_nothing_for_aarch64_fails_before_build(tmp_path: Path) -> None:
    with local_index(("cu130",), tmp_path / "index") as index:
        wheels = tmp_path / "w"
        wheels.mkdir()
        built = build_tiny_wheel(wheels, version="1.0", tag="py3-none-manylinux_2_28_x86_64")
        shutil.copy2(built, index.folder("cu130"))
        dep = (
            f'[[dependency]]\npackage = "{built.name.split("-")[0]}"\nindex = "{index.simple_url("cu130")}"\n'
        )
        policy = load_policy(_policy_with(tmp_path, dep))
        rows = {r.id: r for r in expand(policy)}
        assert rules_for(policy, rows["cpu-py312-x86_64"]) == []  # CPU wheels take no CUDA channel
        found = check_rows(policy, [rows["cu130-py312-x86_64"]])
        assert found, "the x86_64 row's channel publishes for it"
        with pytest.raises(CheckFailed) as info:
            check_rows(policy, [rows["cu130-py312-aarch64"]])
        assert "aarch64" in str(info.value)


def test_dependency_keys_validated(tmp_path: Path) -> None:
    from release.core.errors import PolicyError

    bad = _policy_with(tmp_path, '[[dependency]]\npackage = "torchao"\nindex = "cuda"\n')
    # the value is not repeated: an index URL may hold a secret (release/policy/targets.py)
    with pytest.raises(
        PolicyError,
        match=r"dependency\[0\]\.index: is neither a URL nor a known index name \(pypi, testpypi\)",
    ):
        load_policy(bad)
    bad = _policy_with(
        tmp_path, '[[dependency]]\npackage = "torchao"\nindex = "pypi"\nplatforms = ["arm64"]\n'
    )
    with pytest.raises(
        PolicyError, match=r"dependency\[0\]\.platforms\[0\]: 'arm64' is not in matrix.platforms"
    ):
        load_policy(bad)
