"""Cross-process locks on files, and installs into a shared cache made once under one.

:func:`exclusive` holds ``fcntl.flock`` on a lock file for a ``with`` block, waiting as long as
another process holds it, and writes its holder into the file so that a waiting process can
say whom it waits for. The kernel drops the lock when its holder dies (``kill -9`` included),
so a stale lock file never blocks anyone.

:func:`install_once` fills a cache folder (a PyPI toolchain, patchelf, uv) once however many
processes ask at the same time: under the folder's lock it checks whether another process has
made it meanwhile, else fills a temporary folder beside it and renames that into place, so a
reader never sees half an install. (``release.publish.guards.lock`` is the other lock: one release
run at a time on a folder, refusing after a deadline instead of waiting.)
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(lock: Path, *, holder: str, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock on the file ``lock`` (made with its folder) for the ``with`` block.

    ``holder`` says who holds it ("the build of row X"); the file reads ``<holder> (pid N)``
    while it is held. When another process holds it, ``waiting`` is called once with what the
    file says (``""`` when it says nothing yet), then this waits for as long as that takes.
    """
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.seek(0)
            if waiting is not None:
                waiting(f.read(4096).strip())
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            f.seek(0)
            f.truncate()
            f.write(f"{holder} (pid {os.getpid()})\n")
            f.flush()
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def lock_file(folder: Path) -> Path:
    """The lock file of ``folder``: ``.<name>.lock`` beside it (pure)."""
    return folder.with_name(f".{folder.name}.lock")


def install_once(
    final: Path,
    *,
    ready: Callable[[Path], bool],
    fill: Callable[[Path], None],
    holder: str,
    waiting: Callable[[str], None] | None = None,
    lock: Path | None = None,
) -> bool:
    """Make the cache folder ``final`` unless ``ready(final)`` says it is made; True when this
    call filled it.

    Under ``final``'s lock (``lock``, by default :func:`lock_file`; :func:`exclusive`):
    ``ready(final)`` again (another process may have made it while this one waited), else
    ``fill(tmp)`` on an empty temporary folder beside ``final``, which then replaces whatever
    ``final`` held (a partial or stale install). An exception in ``fill`` leaves ``final`` as it
    was and no temporary folder behind. A cache whose earlier releases locked another file passes
    that file as ``lock``, so that an older and a newer wheelwright still exclude each other.
    """
    final.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(lock_file(final) if lock is None else lock, holder=holder, waiting=waiting):
        if ready(final):
            return False
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
        try:
            fill(tmp)
            if final.exists() or final.is_symlink():
                stale = Path(tempfile.mkdtemp(prefix=f".{final.name}.stale-", dir=final.parent))
                final.rename(stale / "old")  # a fresh name: a leftover of a killed run never blocks it
                shutil.rmtree(stale, ignore_errors=True)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return True
