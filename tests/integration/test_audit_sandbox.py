"""release.core.sandbox.run_limited sets its rlimits without ``preexec_fn``: each limit still
reaches the tool (a tool past it fails, one inside it passes), from a parent with busy threads."""

from __future__ import annotations

import math
import os
import resource
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from release.core.sandbox import Sandbox, rlimits, run_limited
from release.core.sizes import GIB, MIB

pytestmark = pytest.mark.integration

_REPORT = (
    "import os, resource; "
    "print([resource.getrlimit(r) for r in "
    "(resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_CORE)]); "
    "print(os.getppid()); "
    "print([line for line in open('/proc/self/status') if line.startswith('SigIgn')][0].strip())"
)


def _ignored_signals_of_a_plain_child() -> str:
    """The ignored-signal mask of a tool started by plain subprocess (signals restored)."""
    code = "print([line for line in open('/proc/self/status') if line.startswith('SigIgn')][0].strip())"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_tool_runs_with_the_limits_itself_and_the_signals_a_plain_child_has(tmp_path: Path) -> None:
    sandbox = Sandbox(cpu_seconds=7, memory_bytes=3 * GIB, file_bytes=5 * MIB)
    ran = run_limited([sys.executable, "-c", _REPORT], cwd=tmp_path, sandbox=sandbox)
    assert ran.ok, ran.stderr
    limits, parent, ignored = ran.stdout.splitlines()
    # CPU: SIGXCPU at 7 s, SIGKILL at 8; no core files (hard limits this low exist on no real machine)
    assert limits == repr([(7, 8), (3 * GIB, 3 * GIB), (5 * MIB, 5 * MIB), (0, 0)])
    assert int(parent) == os.getpid(), "the tool replaced the interpreter that set its limits (exec)"
    assert ignored == _ignored_signals_of_a_plain_child(), "SIGPIPE and SIGXFSZ reach the tool as by default"


def test_limits_are_lowered_never_raised() -> None:
    sandbox = Sandbox(cpu_seconds=10**9, memory_bytes=1 << 62, file_bytes=1 << 62)
    for which, soft, hard in rlimits(sandbox):
        own = resource.getrlimit(which)[1]
        assert own == resource.RLIM_INFINITY or (soft <= own and hard <= own)


@pytest.mark.parametrize(
    ("written", "fails"),
    [(2 * MIB, True), (512 * 1024, False)],
    ids=["past-the-file-limit", "inside-it"],
)
def test_file_size_limit(tmp_path: Path, written: int, fails: bool) -> None:
    sandbox = Sandbox(file_bytes=1 * MIB)
    blocks = written // (256 * 1024)  # dd: a tool that keeps SIGXFSZ's default (Python ignores it)
    ran = run_limited(
        ["dd", "if=/dev/zero", "of=big", "bs=256K", f"count={blocks}"], cwd=tmp_path, sandbox=sandbox
    )
    assert ran.ok is not fails, ran.stderr
    if fails:
        assert ran.returncode == -signal.SIGXFSZ and "file size limit" in ran.why(sandbox)
    assert (tmp_path / "big").stat().st_size == min(written, 1 * MIB)


@pytest.mark.parametrize(
    ("allocated", "fails"),
    [(1 * GIB, True), (64 * MIB, False)],
    ids=["past-the-memory-limit", "inside-it"],
)
def test_memory_limit(tmp_path: Path, allocated: int, fails: bool) -> None:
    sandbox = Sandbox(memory_bytes=512 * MIB)
    ran = run_limited([sys.executable, "-c", f"b = bytearray({allocated})"], cwd=tmp_path, sandbox=sandbox)
    assert ran.ok is not fails, ran.stderr
    assert ("MemoryError" in ran.stderr) is fails


def test_limits_hold_when_started_from_busy_threads(tmp_path: Path) -> None:
    """What preexec_fn could not promise: many tools started at once from threads while others
    run Python code; each gets its limits (and one past them still fails)."""
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    spinners = [threading.Thread(target=busy) for _ in range(2)]
    for t in spinners:
        t.start()
    try:
        sandbox = Sandbox(memory_bytes=512 * MIB)

        def one(i: int) -> tuple[bool, bool]:
            cwd = tmp_path / str(i)
            cwd.mkdir()
            inside = run_limited([sys.executable, "-c", "b = bytearray(1 << 20)"], cwd=cwd, sandbox=sandbox)
            past = run_limited([sys.executable, "-c", "b = bytearray(1 << 30)"], cwd=cwd, sandbox=sandbox)
            return inside.ok, past.ok

        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(one, range(8)))
    finally:
        stop.set()
        for t in spinners:
            t.join()
    assert results == [(True, False)] * 8


def test_a_missing_tool_is_an_error_here_as_before(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        run_limited(["no-such-tool-anywhere"], cwd=tmp_path)
    with pytest.raises(FileNotFoundError):
        run_limited(["./missing"], cwd=tmp_path)
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n", encoding="utf-8")
    with pytest.raises(PermissionError):
        run_limited(["./not-executable"], cwd=tmp_path)


def test_a_relative_tool_runs_from_cwd(tmp_path: Path) -> None:
    script = tmp_path / "tool"
    script.write_text("#!/bin/sh\necho ran in $PWD\n", encoding="utf-8")
    script.chmod(0o755)
    ran = run_limited(["./tool"], cwd=tmp_path)
    assert ran.ok and ran.stdout.strip() == f"ran in {tmp_path}"


@pytest.mark.parametrize("wall", [math.inf, 30 * 24 * 3600.0])
def test_a_wall_limit_past_what_poll_takes_still_runs_the_tool(tmp_path: Path, wall: float) -> None:
    """poll(2) takes at most 2**31-1 ms: a longer (or no) wall limit must not crash the wait."""
    ran = run_limited(
        [sys.executable, "-c", "print('ran')"], cwd=tmp_path, sandbox=Sandbox(wall_seconds=wall)
    )
    assert ran.returncode == 0 and ran.stdout.strip() == "ran"
