"""The standalone audit as a user runs it on NVIDIA's own CUDA 13 packages: from an empty folder.

A sweep over 18 real CUDA wheels found that nvidia-cuda-cupti 13.0.85 and nvidia-nvtx 13.0.85, which
ship ``nvidia/cu13/lib/libcupti.so.13`` and ``libnvtx3interop.so.1``, were told "nothing in the wheel
names a CUDA release"; that an audit with no claim and no rows.toml exited 2 ("rows.toml: file not
found"); and that ``--json`` printed nothing on stdout for a claim that does not parse. The wheels are
pinned in tests/helpers/real_wheels.py (fetched into a cache, never copied into the repository).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.proc import python_m, repo_env
from helpers.real_wheels import real_wheel

from release.audit.claim import NO_CLAIM_CHECKS

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

TOLD = {
    "nvidia_cuda_cupti": "it is nvidia-cuda-cupti, CUDA 13's package of CUPTI",
    "nvidia_nvtx": "it is nvidia-nvtx, CUDA 13's package of NVTX 3 interop",
}


def audit(folder: Path, *argv: str) -> tuple[int, dict[str, Any], str]:
    proc = python_m("release", "audit", *argv, "--json", cwd=folder, env=repo_env(), timeout=600)
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.fixture
def empty(tmp_path: Path) -> Path:
    folder = tmp_path / "empty"
    folder.mkdir()
    return folder


@pytest.mark.parametrize("key", sorted(TOLD))
def test_nvidias_cuda13_packages_name_their_train(key: str, empty: Path, tmp_path: Path) -> None:
    """No claim: a verdict from the checks that need no claim, the train told by the package itself,
    no record beside the wheel (a link to the cached wheel, so a record would land in tmp_path)."""
    wheel = tmp_path / real_wheel(key).name
    wheel.symlink_to(real_wheel(key))
    code, doc, err = audit(empty, str(wheel))
    assert code in (0, 1) and not doc["errors"], err
    (result,) = doc["results"]
    assert (result["train"], result["train_source"]) == ("13", TOLD[key])
    assert result["checks_run"] == list(NO_CLAIM_CHECKS) and result["partial"] is True
    assert "note: no claim and no rows.toml here" in err
    assert not list(tmp_path.glob("*.audit.*")), "a partial audit writes no record"
    # with a claim, the same train: the packages check holds what it declares to CUDA 13
    code, doc, err = audit(empty, str(wheel), "--runs-on", "8.0", "--checks", "packages,gpus", "--no-record")
    (result,) = doc["results"]
    assert result["train"] == "13" and not [
        f for f in result["findings"] if f["check"] == "packages" and not f["ok"]
    ]


def test_json_names_a_bad_claim_on_stdout(empty: Path) -> None:
    wheel = real_wheel("nvidia_nvtx")
    code, doc, err = audit(empty, str(wheel), "--gpu-archs", "8.x", "--no-record")
    assert code == 2 and doc["version"] == 1 and doc["results"] == []
    (error,) = doc["errors"]
    assert error["wheel"] is None and error["exit_code"] == 2
    assert error["error"].startswith("--gpu-archs: '8.x' is not an architecture")
    assert f"error: {error['error']}" in err
