"""One run at a time: an advisory lock on a folder (dist/, a local index's root), naming its holder.

:func:`hold` takes ``fcntl.flock`` on ``<folder>/.wheelwright.lock`` and writes the holder into
it: pid, command line, start time, host. A second run waits up to ``wait_s`` (default
``WHEELWRIGHT_LOCK_WAIT_S``, else :data:`DEFAULT_WAIT_S`), then refuses (StepFailed, exit 4)
naming the first. The kernel drops the lock when its holder dies, ``kill -9`` included, so a
stale lock file never blocks anyone: its contents only describe a holder while it is held.

Within one process the lock is re-entrant (a release holds dist/ and calls publish, which
takes it again): ``flock`` would otherwise refuse the process its own lock.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from release.core.durations import seconds
from release.core.errors import StepFailed

LOCK_NAME = ".wheelwright.lock"
WAIT_ENV = "WHEELWRIGHT_LOCK_WAIT_S"
DEFAULT_WAIT_S = 10.0
POLL_S = 0.1

_held: dict[Path, list[int]] = {}  # folder -> [fd, depth], this process's locks


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what the lock file says while it is held."""

    pid: int
    command: str
    started: str  # UTC, ISO 8601
    host: str

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host} (`{self.command}`), started {self.started}"


def command_line(argv: list[str] | None = None) -> str:
    """This process's command as a person would type it (``python -m release publish ...``)."""
    args = list(sys.argv if argv is None else argv)
    if args and args[0].endswith(os.path.join("release", "__main__.py")):
        return shlex.join(["python", "-m", "release", *args[1:]])
    return shlex.join(["python", *args]) if args else "python"


def wait_from_env(env: Mapping[str, str]) -> float:
    """``WHEELWRIGHT_LOCK_WAIT_S`` (seconds a second run waits before it refuses), else the default."""
    raw = env.get(WAIT_ENV, "").strip()
    if not raw:
        return DEFAULT_WAIT_S
    return seconds(raw, f"{WAIT_ENV}={raw!r}", zero_ok=True)


def read_holder(folder: Path) -> Holder | None:
    """The holder the lock file names; None when it names none (free, or taken a moment ago)."""
    try:
        data = json.loads((folder / LOCK_NAME).read_text(encoding="utf-8"))
        return Holder(int(data["pid"]), str(data["command"]), str(data["started"]), str(data["host"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@contextlib.contextmanager
def hold(
    folder: Path,
    *,
    what: str,
    command: str | None = None,
    wait_s: float = DEFAULT_WAIT_S,
    log: Callable[[str], None] | None = None,
) -> Iterator[Holder]:
    """Hold ``folder``'s lock for the ``with`` block; StepFailed naming the holder after ``wait_s``.

    ``what`` names the folder in messages ("dist/", "the local index"). The folder is created.
    """
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    me = Holder(
        os.getpid(),
        command or command_line(),
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        socket.gethostname(),
    )
    if key in _held:  # re-entrant within this process
        _held[key][1] += 1
        try:
            yield me
        finally:
            _held[key][1] -= 1
        return
    fd = os.open(key / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        _acquire(fd, key, what, wait_s, log)
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(dataclasses.asdict(me), sort_keys=True) + "\n").encode(), 0)
        _held[key] = [fd, 1]
        yield me
    finally:
        _held.pop(key, None)
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)  # a lock file names a holder only while it is held
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _acquire(fd: int, key: Path, what: str, wait_s: float, log: Callable[[str], None] | None) -> None:
    deadline = time.monotonic() + wait_s
    said = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        holder = read_holder(key)
        who = holder.describe() if holder else "a run that started a moment ago"
        if time.monotonic() >= deadline:
            raise StepFailed(
                f"{what} ({key}) is in use by another wheelwright run: {who}. One run at a time: "
                f"wait for it to finish (or stop it), then run again; this run waited {wait_s:g} s "
                f"({WAIT_ENV}) and changed nothing [rule: one-run]"
            )
        if not said and log is not None:
            log(f"waiting up to {wait_s:g} s for {what} ({key}): in use by {who}")
            said = True
        time.sleep(POLL_S)
