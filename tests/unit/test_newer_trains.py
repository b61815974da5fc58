"""``trains --check``'s decision (release/policy/newer_trains.py, pure) and the command around it.

Must pass: a policy whose newest train is 13.2 and an index offering 13.3-13.5 gets one finding per
newer release, with the GPUs the GPU table says each release is the first to know, the pins a train
would take and the parts the index lacks. Must fail (no finding): a current policy, pre-releases,
releases older than the newest train. The command: exit 0 with the notice, the policy's bytes
unchanged; exit 3 naming the fix when pip reaches no index (a closed local port, no network needed).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from pathlib import Path

import pytest

from release import cli
from release.commands import trains as trains_command
from release.core.pip import index_versions
from release.policy.newer_trains import (
    NVCC,
    TOOLCHAIN_PACKAGES,
    check_trains,
    newest_per_release,
    render,
    toolchain_packages,
)
from release.resources.cuda import Gpu, cuda

ROOT = Path(__file__).resolve().parents[2]
NVCC_OFFERED = ("13.5.37", "13.4.92", "13.4.59", "13.3.73", "13.3.33", "13.2.86", "13.1.115", "13.0.88")
OFFERED = {
    NVCC: NVCC_OFFERED,
    "nvidia-cuda-crt": ("13.5.37", "13.4.92", "13.3.73", "13.2.86"),
    "nvidia-nvvm": ("13.5.37", "13.4.92", "13.3.73", "13.2.86"),
    "nvidia-cuda-runtime": ("13.5.37", "13.4.92", "13.3.29", "13.2.86"),
    "nvidia-cuda-cccl": ("13.3.5", "13.2.86"),
}


def test_newer_releases_are_found_with_their_pins() -> None:
    check = check_trains(["12.6", "13.0", "13.2"], OFFERED, cuda())
    assert [n.label for n in check.newer] == ["13.3", "13.4", "13.5"]
    assert check.newest_offered == "13.5.37"
    first, second, _ = check.newer
    assert first.pins == (
        "nvidia-cuda-nvcc==13.3.73",
        "nvidia-cuda-crt==13.3.73",
        "nvidia-nvvm==13.3.73",
        "nvidia-cuda-runtime==13.3.29",
        "nvidia-cuda-cccl==13.3.5",
    )
    assert first.missing == () and second.missing == ("nvidia-cuda-cccl",)
    # the real GPU table knows no GPU first run by a driver newer than 13.2's
    assert all(n.new_gpus == () for n in check.newer)
    assert all(not n.known_to_cuda_toml for n in check.newer)


def test_a_release_adds_the_gpus_the_table_dates_to_it() -> None:
    """A GPU dated 13.4 in [gpu].since is named at 13.4 only (not at 13.3, not again at 13.5)."""
    facts = dataclasses.replace(cuda(), gpus=(*cuda().gpus, Gpu("Imaginary X1", 13, 0, (13, 4))))
    check = check_trains(["13.2"], OFFERED, facts)
    assert [(n.label, n.new_gpus) for n in check.newer] == [
        ("13.3", ()),
        ("13.4", ("13.0 (Imaginary X1)",)),
        ("13.5", ()),
    ]
    text = "\n".join(render(check, "rows.toml"))
    assert "CUDA 13.4: adds GPU architecture(s) 13.0 (Imaginary X1)" in text


def test_a_current_policy_has_no_finding() -> None:
    check = check_trains(["13.0", "13.5"], OFFERED, cuda())
    assert check.newer == ()
    lines = render(check, "rows.toml")
    assert (
        lines[-1]
        == "✓ current: pip's index offers no CUDA release newer than 13.5 (nvidia-cuda-nvcc 13.5.37)"
    )


def test_prereleases_and_older_releases_are_no_finding() -> None:
    offered = {NVCC: ("13.3.0rc1", "13.3.0.dev2", "13.1.115", "not-a-version", "13")}
    assert check_trains(["13.2"], offered, cuda()).newer == ()
    assert newest_per_release(["13.4.59", "13.4.92", "13.4.100"]) == {(13, 4): "13.4.100"}


def test_an_index_without_nvcc_has_no_finding_and_says_so() -> None:
    check = check_trains(["13.2"], {}, cuda())
    assert check.newer == () and check.newest_offered is None
    assert render(check, "p.toml")[-1].endswith("(no newer nvcc)")


def test_no_train_is_refused() -> None:
    with pytest.raises(ValueError, match="no CUDA train"):
        check_trains([], OFFERED, cuda())


def test_the_parts_asked_about_come_from_the_newest_pinned_train() -> None:
    pins = {"12.6": (), "13.0": ("nvidia-cuda-runtime==13.0.96", "nvidia-cuda-nvcc==13.0.88")}
    assert toolchain_packages(pins, ["12.6", "13.0"]) == (NVCC, "nvidia-cuda-runtime")
    assert toolchain_packages({"12.6": ()}, ["12.6"]) == TOOLCHAIN_PACKAGES


def test_the_command_prints_the_notice_and_leaves_the_policy(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(trains_command, "offered_versions", lambda packages, env: OFFERED)
    policy = ROOT / "rows.toml"
    before = policy.read_bytes()
    assert cli.main(["trains", "--check", "--policy", str(policy)]) == 0
    out = capsys.readouterr().out
    assert "notice: pip's index offers 3 newer CUDA release(s) than 13.2: 13.3, 13.4, 13.5" in out
    assert "docs/adding-a-train.md" in out
    assert policy.read_bytes() == before


def test_no_index_is_exit_3_naming_the_fix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """pip pointed at a closed local port (no configuration file, no find-links): exit 3, the fix named."""
    env = {
        **os.environ,
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
        "PIP_RETRIES": "0",
        "PIP_TIMEOUT": "2",
    }
    env.pop("PIP_FIND_LINKS", None)
    env.pop("PIP_EXTRA_INDEX_URL", None)
    versions, _ = index_versions(NVCC, env=env, python=sys.executable)
    assert versions is None
    with pytest.MonkeyPatch.context() as m:
        for k, v in env.items():
            m.setenv(k, v)
        m.delenv("PIP_FIND_LINKS", raising=False)
        m.delenv("PIP_EXTRA_INDEX_URL", raising=False)
        code = cli.main(["trains", "--check", "--policy", str(ROOT / "rows.toml")])
    assert code == 3
    err = capsys.readouterr().err
    assert "pip found no nvidia-cuda-nvcc on the index it is configured for" in err
    assert "PIP_INDEX_URL" in err


def test_a_release_the_policy_loader_does_not_know_is_said() -> None:
    offered = {NVCC: ("13.6.10", "13.2.86")}
    (n,) = check_trains(["13.2"], offered, cuda()).newer
    assert n.label == "13.6" and not n.known_to_policy
    assert "KNOWN_CUDA_TRAINS does not name 13.6" in "\n".join(
        render(check_trains(["13.2"], offered, cuda()), "p")
    )
    (m,) = check_trains(["13.2"], {NVCC: ("13.3.73",)}, cuda()).newer
    assert m.known_to_policy
