"""One publishing run over a dist/ folder: its lock held, its private staging folder, cleaned up.

:func:`publish_session` takes dist/'s lock (:mod:`release.publish.lock`: a second run waits,
then refuses naming the first), then makes ``dist/.publish/staging-<pid>-*``, where every
wheel is copied, audited again and uploaded from. The folder goes on every way out of the
``with`` block, an error or Ctrl-C included. A ``kill -9`` runs no cleanup; the next run,
holding the lock, removes every staging folder it finds (no other run can be using one) and
says so.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from release.publish import lock
from release.publish.plan import Log

STATE_DIR = ".publish"
STAGING_PREFIX = "staging-"


@dataclass(frozen=True)
class Session:
    dist: Path
    staging: Path
    holder: lock.Holder


def sweep_staging(state: Path, log: Log) -> list[Path]:
    """Remove the staging folders of runs that ended without cleaning up (call it holding the lock)."""
    removed: list[Path] = []
    if not state.is_dir():
        return removed
    for folder in sorted(state.glob(f"{STAGING_PREFIX}*")):
        pid = folder.name.removeprefix(STAGING_PREFIX).split("-", 1)[0]
        if pid == str(os.getpid()):
            continue  # this process's own (a nested session)
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        log(f"removed {folder}: a staging folder left by an earlier run (pid {pid}) that was killed")
    return removed


@contextlib.contextmanager
def publish_session(
    dist: Path, *, env: Mapping[str, str], log: Log, command: str | None = None
) -> Iterator[Session]:
    """Hold dist/'s lock and a fresh staging folder for the ``with`` block; both go at its end."""
    with lock.hold(dist, what="dist/", command=command, wait_s=lock.wait_from_env(env), log=log) as me:
        state = dist / STATE_DIR
        state.mkdir(parents=True, exist_ok=True)
        sweep_staging(state, log)
        staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=state))
        try:
            yield Session(dist, staging, me)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
