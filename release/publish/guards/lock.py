"""One run at a time: an advisory lock on a folder (dist/, a local index's root), naming its holder.

:func:`hold` takes ``fcntl.flock`` on the folder itself (a descriptor of the directory) and then
on ``<folder>/.wheelwright.lock``, and writes the holder into that file: pid, command line, start
time (also as /proc's clock ticks), host. Each descriptor is checked by inode after its lock is
taken: when the path names another file or folder by then (deleted or replaced between the open
and the lock), it is opened again and locked again. Deleting the lock file while a run holds it
lets no second run in: the folder's own lock still stands, and the second run names the first
from the kernel's table of locks (``/proc/locks``) and the holder's /proc entries when the file
no longer says. A second run waits up to ``wait_s`` (``--wait SECONDS``, else
``WHEELWRIGHT_LOCK_WAIT_S``, else :data:`DEFAULT_WAIT_S`), saying so every
:data:`PROGRESS_S` seconds, then refuses (StepFailed, exit 4) naming the first. The kernel
drops the lock when its holder dies, ``kill -9`` included, so a stale lock file never blocks
anyone: its contents only describe a holder while it is held.

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
import stat
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import overload

from release.core import liveness
from release.core.durations import seconds
from release.core.errors import StepFailed

LOCK_NAME = ".wheelwright.lock"
WAIT_ENV = "WHEELWRIGHT_LOCK_WAIT_S"
DEFAULT_WAIT_S = 10.0
POLL_S = 0.1
PROGRESS_S = 15.0  # a waiting run says it is still waiting this often

_held: dict[Path, list[int]] = {}  # folder -> [folder fd, file fd, depth], this process's locks


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: what the lock file says while it is held (or the kernel, when it says nothing)."""

    pid: int
    command: str
    started: str  # UTC, ISO 8601
    host: str
    ticks: int | None = None  # /proc start time of the holder: tells it from a later process of its pid

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


def me(command: str | None = None) -> Holder:
    """This process as a holder."""
    pid = os.getpid()
    return Holder(
        pid,
        command or command_line(),
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        socket.gethostname(),
        liveness.start_ticks(pid),
    )


def read_holder(folder: Path) -> Holder | None:
    """The holder the lock file names; None when it names none (free, or taken a moment ago)."""
    return holder_in(folder / LOCK_NAME)


def holder_in(path: Path) -> Holder | None:
    """The holder a lock file or a lease file names; None when it names none (being written, or not one)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        ticks = data.get("ticks")
        return Holder(
            int(data["pid"]),
            str(data["command"]),
            str(data["started"]),
            str(data["host"]),
            ticks if type(ticks) is int else None,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def current_holder(folder: Path) -> Holder | None:
    """Who holds ``folder``'s lock now: the lock file's holder when the kernel agrees (or cannot
    say), else the process the kernel names, described from /proc (its lock file was deleted or
    rewritten); None when no one is known to hold it."""
    written = read_holder(folder)
    pids = [p for p in liveness.flock_holders(folder) if p != os.getpid()]
    if not pids or (written is not None and written.pid in pids):
        return written
    pid = pids[0]
    ticks = liveness.start_ticks(pid)
    return Holder(
        pid,
        liveness.command_of(pid) or "its command line cannot be read",
        (liveness.started_utc(ticks) if ticks is not None else None) or "at an unknown time",
        socket.gethostname(),
        ticks,
    )


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
    holder = me(command)
    if key in _held:  # re-entrant within this process
        _held[key][2] += 1
        try:
            yield holder
        finally:
            _held[key][2] -= 1
        return
    waiter = _Waiter(key, what, wait_s, log)
    dir_fd = waiter.take(key, os.O_RDONLY | os.O_DIRECTORY, optional=True)
    try:
        file_fd = waiter.take(key / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    except BaseException:
        if dir_fd is not None:
            os.close(dir_fd)
        raise
    try:
        os.ftruncate(file_fd, 0)
        os.pwrite(file_fd, (json.dumps(dataclasses.asdict(holder), sort_keys=True) + "\n").encode(), 0)
        _held[key] = [-1 if dir_fd is None else dir_fd, file_fd, 1]
        yield holder
    finally:
        _held.pop(key, None)
        with contextlib.suppress(OSError):
            os.ftruncate(file_fd, 0)  # a lock file names a holder only while it is held
        for fd in (file_fd, dir_fd):
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


def _same_inode(fd: int, path: Path) -> bool:
    """True when ``path`` still names the file or folder ``fd`` is open on."""
    try:
        now, held = path.stat(), os.fstat(fd)
    except OSError:
        return False
    return (now.st_dev, now.st_ino) == (held.st_dev, held.st_ino) and stat.S_IFMT(now.st_mode) == stat.S_IFMT(
        held.st_mode
    )


@dataclass
class _Waiter:
    """Takes one lock after another for :func:`hold`, all within one deadline, saying what it waits for."""

    key: Path
    what: str
    wait_s: float
    log: Callable[[str], None] | None

    def __post_init__(self) -> None:
        self.started = time.monotonic()
        self.said_at: float | None = None

    @overload
    def take(self, path: Path, flags: int) -> int: ...
    @overload
    def take(self, path: Path, flags: int, *, optional: bool) -> int | None: ...

    def take(self, path: Path, flags: int, *, optional: bool = False) -> int | None:
        """An open descriptor of ``path`` holding its lock, ``path`` checked to still name it.
        ``optional``: None where the filesystem cannot lock it (a folder on some network
        filesystems: the lock file's lock alone then stands)."""
        while True:
            try:
                fd = os.open(path, flags | os.O_CLOEXEC, 0o644)
            except OSError as exc:
                if optional:
                    return None
                raise StepFailed(f"cannot open {path} to lock {self.what}: {exc.strerror or exc}") from None
            try:
                self._lock(fd)
            except OSError:  # not "held by another": _lock waits those out
                os.close(fd)
                if optional:
                    return None
                raise
            except BaseException:
                os.close(fd)
                raise
            if _same_inode(fd, path):
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)  # deleted or replaced between the open and the lock: again
            os.close(fd)

    def _lock(self, fd: int) -> None:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                pass
            holder = current_holder(self.key)
            who = holder.describe() if holder else "a run that started a moment ago"
            now = time.monotonic()
            waited = now - self.started
            if waited >= self.wait_s:
                raise StepFailed(
                    f"{self.what} ({self.key}) is in use by another wheelwright run: {who}. One run at a "
                    f"time: wait for it to finish (or stop it), then run again, or give --wait SECONDS; this "
                    f"run waited {self.wait_s:g} s (--wait, {WAIT_ENV}) and changed nothing [rule: one-run]"
                )
            if self.log is not None and (self.said_at is None or now - self.said_at >= PROGRESS_S):
                verb = "waiting" if self.said_at is None else f"still waiting ({waited:.0f} s)"
                self.log(f"{verb} up to {self.wait_s:g} s for {self.what} ({self.key}): in use by {who}")
                self.said_at = now
            time.sleep(POLL_S)
