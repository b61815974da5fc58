"""sha256 of a file: the identity every record binds to.

:func:`sha256_file` reads and hashes 32 MiB windows: the GIL is released while each is read and
while it is hashed, so other threads' Python work goes on meanwhile, with two hand-overs per window.

:func:`hash_early` starts hashing a file on a thread of its own before anyone asks for it: the audit
command starts its first wheel's while the rest of wheelwright is imported (about 0.1 s of Python
on one core, the other one idle). :func:`take_early` hands that job to the one who needs the
digest; :meth:`EarlyHash.result` gives it only for the file that was hashed (same device, inode,
size and modification time, unchanged while it was hashed); the caller hashes the file itself
otherwise.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterable
from io import FileIO
from pathlib import Path

__all__ = ["WINDOW", "EarlyHash", "hash_early", "sha256_file", "take_early"]

WINDOW = 32 << 20  # bytes read and hashed per call (fewer hand-overs of the GIL; a bounded buffer)

Stamp = tuple[int, int, int, int]  # device, inode, size, modification time (ns)


def stamp(st: os.stat_result) -> Stamp:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def _sha256_of(f: FileIO, size_hint: int) -> str:
    digest = hashlib.sha256()
    buf = bytearray(max(1, min(WINDOW, size_hint)))
    view = memoryview(buf)
    while n := f.readinto(buf):
        digest.update(view[:n])
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    with path.open("rb", buffering=0) as f:
        return _sha256_of(f, os.fstat(f.fileno()).st_size)


class EarlyHash:
    """A file's sha256, computed on a daemon thread from the moment this is made."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._stamp: Stamp | None = None
        self._digest: str | None = None
        self._done = threading.Event()
        threading.Thread(target=self._work, name="sha256-early", daemon=True).start()

    def _work(self) -> None:
        try:
            with Path(self.path).open("rb", buffering=0) as f:
                before = stamp(os.fstat(f.fileno()))
                digest = _sha256_of(f, before[2])
                if stamp(os.fstat(f.fileno())) == before:  # unchanged while it was read
                    self._stamp, self._digest = before, digest
        except OSError:
            pass  # the caller hashes the file itself
        finally:
            self._done.set()

    def result(self, st: os.stat_result) -> str | None:
        """The digest (waiting for it) when the file hashed is the one ``st`` describes; else None."""
        self._done.wait()
        return self._digest if self._stamp == stamp(st) else None


_EARLY: dict[str, EarlyHash] = {}
_LOCK = threading.Lock()


def _key(path: str | os.PathLike[str]) -> str:
    return os.path.realpath(path)


def hash_early(paths: Iterable[str | os.PathLike[str]]) -> None:
    """Start hashing each existing file of ``paths`` now (one thread each), for :func:`take_early`."""
    for path in paths:
        key = _key(path)
        with _LOCK:
            if key not in _EARLY and Path(key).is_file():
                _EARLY[key] = EarlyHash(key)


def take_early(path: str | os.PathLike[str]) -> EarlyHash | None:
    """The early hash of ``path`` started by :func:`hash_early`, if any (taken: asked once)."""
    with _LOCK:
        return _EARLY.pop(_key(path), None)
