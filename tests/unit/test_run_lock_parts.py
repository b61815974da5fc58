"""The pure parts of the run lock (issue 25 item 6): /proc's start time read right, a staging
folder's name read back to its run, which commands hold which dist/. The locks themselves are
tested with real processes in tests/integration/test_publish_run_lock.py."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from release.core import liveness
from release.publish.staging import staging_owner, staging_prefix
from release.run_lock import locked_dist


def test_start_ticks_reads_field_22_past_a_command_name_with_spaces_and_parentheses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "4242").mkdir()
    rest = " ".join(str(n) for n in range(4, 30))  # fields 4.. of the line: field 22 is "22"
    (tmp_path / "4242" / "stat").write_text(f"4242 (a) b (c) S {rest}\n")
    monkeypatch.setattr(liveness, "PROC", tmp_path)
    assert liveness.start_ticks(4242) == 22
    assert liveness.start_ticks(4243) is None  # no such process


def test_this_process_is_itself_and_not_a_reused_pid() -> None:
    ticks = liveness.start_ticks(os.getpid())
    assert ticks is not None
    assert liveness.same_process(os.getpid(), ticks)
    assert not liveness.same_process(os.getpid(), ticks + 1)  # its pid, another start: another process
    assert liveness.same_process(os.getpid(), None)  # nothing recorded: a live pid is kept
    assert not liveness.pid_alive(0) and not liveness.pid_alive(-1)


def test_a_staging_folder_name_says_its_run() -> None:
    assert staging_owner("wheelwright-publish-123-t456-ab_c9") == (123, 456)
    assert staging_owner("wheelwright-publish-123-abc") == (123, None)  # an earlier version's name
    assert staging_owner("wheelwright-publish-123-t9xyz") == (123, None)  # mkdtemp's letters, not ticks
    assert staging_owner("wheelwright-publish-x-t1-abc") is None
    assert staging_owner("staging-77-abc", "staging-") == (77, None)
    name = staging_prefix() + "abcdefgh"
    assert staging_owner(name) == (os.getpid(), liveness.start_ticks(os.getpid()))


def _args(command: str, **kw: object) -> argparse.Namespace:
    return argparse.Namespace(command=command, dist="dist", **kw)


def test_which_commands_hold_dist(tmp_path: Path) -> None:
    for command in ("build", "smoke", "publish", "release"):
        assert locked_dist(_args(command)) == Path("dist")
    assert locked_dist(_args("build", dry_run=True)) is None  # prints a plan, touches nothing
    assert locked_dist(argparse.Namespace(command="plan")) is None
    assert locked_dist(_args("verify")) is None  # reads indexes only
    outside = str(tmp_path / "w-1.0-py3-none-any.whl")
    assert locked_dist(_args("audit", wheels=[outside])) is None  # a wheel audited as it is
    assert locked_dist(_args("audit", wheels=[outside, "cu130-py312"])) == Path("dist")  # a row's wheel
    assert locked_dist(_args("audit", wheels=["dist/cu130/w-1.0-py3-none-any.whl"])) == Path("dist")
