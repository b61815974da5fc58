"""The sandboxed tools start through prlimit where it is installed (a millisecond, not a fresh
interpreter's 15 ms of CPU): the tool gets exactly the limits, the process and the signals the
interpreter fallback gives it, and one past a limit still fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from release.core.sandbox import Sandbox, _limited_argv, _prlimit, run_limited
from release.core.sizes import GIB, MIB

_REPORT = (
    "import os, resource; "
    "print([resource.getrlimit(r) for r in "
    "(resource.RLIMIT_CPU, resource.RLIMIT_AS, resource.RLIMIT_FSIZE, resource.RLIMIT_CORE)]); "
    "print(os.getppid() == int(os.environ['PARENT'])); "
    "print([line for line in open('/proc/self/status') if line.startswith('SigIgn')][0].strip())"
)

needs_prlimit = pytest.mark.skipif(_prlimit() is None, reason="prlimit (util-linux) is not installed here")


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", os.defpath), "PARENT": str(os.getpid())}
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, start_new_session=True
    )


@needs_prlimit
def test_prlimit_is_used_and_gives_what_the_interpreter_gives(tmp_path: Path) -> None:
    sandbox = Sandbox(cpu_seconds=7, memory_bytes=3 * GIB, file_bytes=5 * MIB)
    args = [sys.executable, "-c", _REPORT]
    fast = _limited_argv(args, sandbox, sys.executable)
    slow = _limited_argv(args, sandbox, sys.executable, prlimit=False)
    assert fast[0] == _prlimit() and slow[0] == sys.executable
    got_fast, got_slow = _run(fast, tmp_path), _run(slow, tmp_path)
    assert got_fast.returncode == 0 and got_slow.returncode == 0, (got_fast.stderr, got_slow.stderr)
    assert got_fast.stdout == got_slow.stdout
    limits, same_parent, _ignored = got_fast.stdout.splitlines()
    assert limits == repr([(7, 8), (3 * GIB, 3 * GIB), (5 * MIB, 5 * MIB), (0, 0)])
    assert same_parent == "True", "prlimit execs the tool: no process in between"


@needs_prlimit
@pytest.mark.parametrize(("allocated", "fails"), [(1 * GIB, True), (64 * MIB, False)], ids=["past", "inside"])
def test_a_tool_past_its_memory_limit_fails_through_prlimit(
    tmp_path: Path, allocated: int, fails: bool
) -> None:
    ran = run_limited(
        [sys.executable, "-c", f"b = bytearray({allocated})"],
        cwd=tmp_path,
        sandbox=Sandbox(memory_bytes=512 * MIB),
    )
    assert ran.ok is not fails, ran.stderr
    assert ("MemoryError" in ran.stderr) is fails


def test_the_interpreter_fallback_still_sets_the_limits(tmp_path: Path) -> None:
    sandbox = Sandbox(cpu_seconds=5, memory_bytes=2 * GIB, file_bytes=3 * MIB)
    argv = _limited_argv([sys.executable, "-c", _REPORT], sandbox, sys.executable, prlimit=False)
    got = _run(argv, tmp_path)
    assert got.returncode == 0, got.stderr
    assert got.stdout.splitlines()[0] == repr([(5, 6), (2 * GIB, 2 * GIB), (3 * MIB, 3 * MIB), (0, 0)])
