"""Kernel claims on the local index: a shared lock on its root folder for each run that uses it.

A run that uses the local rehearsal index (publish to it, the install checks after, verify)
holds a **shared open-file-description lock** (``fcntl`` ``F_OFD_SETLK``, ``F_RDLCK``) on a
descriptor of the index's root folder, from its first use to its last (:func:`take`,
:func:`give_back`); the kernel drops it when the run ends, ``kill -9`` included. What would stop
or empty the index asks the kernel whether anyone else holds one (:func:`others_hold`:
``F_OFD_GETLK`` for an exclusive lock, without waiting) and names them (:func:`holder_pids`: the
processes whose ``/proc/<pid>/fdinfo`` shows that lock). Deleting a lease file, or the whole
``leases/`` folder, changes neither answer: the files only describe the holders
(:mod:`release.publish.index.lease`).

These locks are independent of the ``flock`` the index root's short critical sections take
(:mod:`release.publish.guards.lock`): a run holding its claim can still take that lock. An
exclusive record lock cannot be taken on a folder (it needs a descriptor open for writing), so a
stopper tests for one instead, under the root's ``flock``, which every claim is taken under too:
nothing claims between the test and the stop. A process of this user that can ptrace a run, or
kill it, can still end its claim (docs/publishing.md).
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

_FLOCK = "hhqqi4x"  # struct flock: l_type, l_whence, l_start, l_len (0: to the end), l_pid (0 for OFD locks)
_held: dict[Path, int] = {}  # index root -> this process's descriptor holding its claim


def _key(root: Path) -> Path:
    return root.resolve() if root.exists() else root.absolute()


def _open(root: Path) -> int:
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def take(root: Path) -> None:
    """Hold this process's shared claim on the index under ``root`` (again: nothing more). OSError
    when the folder cannot be opened or locked (the caller says so)."""
    key = _key(root)
    if key in _held:
        return
    fd = _open(key)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK, struct.pack(_FLOCK, fcntl.F_RDLCK, os.SEEK_SET, 0, 0, 0))
    except OSError:
        os.close(fd)
        raise
    _held[key] = fd


def holds(root: Path) -> bool:
    """Whether this process holds a claim on the index under ``root``."""
    return _key(root) in _held


def give_back(root: Path | None = None) -> None:
    """Drop this process's claim on ``root`` (None: every claim it holds)."""
    for key in [_key(root)] if root is not None else list(_held):
        fd = _held.pop(key, None)
        if fd is not None:
            os.close(fd)  # the descriptor's lock goes with it


def others_hold(root: Path) -> bool:
    """Whether a process other than this one holds a claim on the index under ``root``: the kernel
    asked whether an exclusive lock could be taken now (through this process's own claim when it
    holds one: a lock never conflicts with itself). False when the folder is gone."""
    key = _key(root)
    own = _held.get(key)
    try:
        fd = own if own is not None else _open(key)
    except OSError:
        return False
    try:
        answer = fcntl.fcntl(fd, fcntl.F_OFD_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))
    finally:
        if own is None:
            os.close(fd)
    kind: int = struct.unpack(_FLOCK, answer)[0]
    return kind != fcntl.F_UNLCK


def lock_id(root: Path) -> str | None:
    """How the kernel's lock table names the folder (``major:minor:inode``, as /proc/locks prints it)."""
    try:
        st = root.stat()
    except OSError:
        return None
    return f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"


def fdinfo_holds(text: str, lock: str) -> bool:
    """Whether one ``/proc/<pid>/fdinfo/<fd>`` text shows an open-file-description lock on ``lock``
    (``major:minor:inode``). Pure."""
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["lock:"] and "OFDLCK" in parts and lock in parts and "->" not in parts:
            return True
    return False


def holder_pids(root: Path, proc: Path = Path("/proc")) -> list[int]:
    """The processes (not this one) the kernel shows holding a claim on ``root``: each process's
    descriptors' ``fdinfo`` read (only this user's are readable). [] when none is found."""
    lock = lock_id(root)
    if lock is None:
        return []
    found: list[int] = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            infos = list((entry / "fdinfo").iterdir())
        except OSError:
            continue
        for info in infos:
            try:
                text = info.read_text(encoding="utf-8", errors="replace")
            except OSError:
                continue
            if fdinfo_holds(text, lock):
                found.append(int(entry.name))
                break
    return sorted(found)
