"""`check_installs`: the install lines of a CUDA variant are checked against the release's cpu
index standing in for the default index; without one the block says it checked nothing, never
a silent pass under a header that promises checks."""

from __future__ import annotations

from pathlib import Path

from helpers.rows import POLICY, rows_by_id

from release.pipeline import RowReport, check_installs
from release.policy.load import load_policy


def test_a_cuda_variant_without_a_cpu_stand_in_says_not_checked(tmp_path: Path) -> None:
    policy = load_policy(POLICY)
    rep = RowReport(rows_by_id(policy)["cu130-py311-aarch64"])
    lines = check_installs(
        policy, [rep], {"cu130": "http://127.0.0.1:9/cu130/simple/"}, env={}, cache_dir=tmp_path, jobs=1
    )
    assert lines[0] == "cu130:"
    assert lines[1].strip().startswith("pip install tinyaxpy --index-url http://127.0.0.1:9/cu130/simple/")
    assert (
        lines[-1].strip().startswith("not checked: no cpu wheel of this run stands in for the default index")
    )
    assert not any("✓" in line or "✗" in line for line in lines)


def test_the_cpu_variant_alone_has_nothing_to_check(tmp_path: Path) -> None:
    policy = load_policy(POLICY)
    rep = RowReport(rows_by_id(policy)["cpu-py311-aarch64"])
    lines = check_installs(
        policy, [rep], {"cpu": "http://127.0.0.1:9/cpu/simple/"}, env={}, cache_dir=tmp_path, jobs=1
    )
    assert lines[0] == "cpu:" and len(lines) == 3
    assert not any("not checked" in line for line in lines)


def test_emulation_is_said_once_per_foreign_arch_with_its_cost() -> None:
    from release.pipeline import emulation_notes

    rows = rows_by_id()
    picked = [rows[i] for i in ("cpu-py311-aarch64", "cu130-py311-aarch64", "cu130-py311-x86_64")]
    (line,) = emulation_notes(picked, "x86_64")
    assert line.startswith("==> 2 aarch64 row(s) on this x86_64 machine: cross-compiled")
    assert "emulated aarch64 CPython (qemu-user" in line and "2-3x" in line
    assert emulation_notes([rows["cu130-py311-x86_64"]], "x86_64") == []  # nothing foreign: nothing said
