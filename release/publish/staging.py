"""One publishing run over a dist/ folder: its lock held, its private staging folder, cleaned up.

:func:`publish_session` takes dist/'s lock (:mod:`release.publish.guards.lock`: a second run waits,
then refuses naming the first), then makes the run's private staging folder **outside dist/**
(the folder the threat model distrusts: anyone who can write it can swap a file there):
``<temp dir>/wheelwright-publish-<pid>-*``, mode 0700, owned by this user, checked as such after
it is made. Every wheel is copied there, audited again and uploaded from there
(:mod:`release.publish.guards.reverify`, :mod:`release.publish.guards.seal`). The folder goes on every way out
of the ``with`` block, an error or Ctrl-C included. A ``kill -9`` runs no cleanup; the next run
removes every staging folder of this user whose run is gone and says so: the folder's name
records its run's pid and start time (``wheelwright-publish-<pid>-t<ticks>-*``), and a run is
gone when that pid no longer lives or lives as a process started at another time (checked in
/proc, not assumed). One of a run still alive is never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from release.core import liveness
from release.core.errors import StepFailed
from release.publish.guards import lock
from release.publish.guards.plan import Log

STATE_DIR = ".publish"  # dist/.publish: where staging folders were kept before (swept, never made)
STAGING_PREFIX = "wheelwright-publish-"
LEGACY_PREFIX = "staging-"


@dataclass(frozen=True)
class Session:
    dist: Path
    staging: Path
    holder: lock.Holder


def staging_root(env: Mapping[str, str]) -> Path:
    """Where staging folders are made: ``TMPDIR`` (as :mod:`tempfile` reads it), else the system's."""
    value = env.get("TMPDIR", "")
    return Path(value) if value and Path(value).is_dir() else Path(tempfile.gettempdir())


def staging_owner(name: str, prefix: str = STAGING_PREFIX) -> tuple[int, int | None] | None:
    """(pid, start ticks) of the run a staging folder's name says made it (``<prefix><pid>-t<ticks>-*``;
    an earlier version wrote ``<prefix><pid>-*``: ticks None); None for a name that says neither."""
    parts = name.removeprefix(prefix).split("-")
    if not parts[0].isdigit():
        return None
    tag = parts[1] if len(parts) > 2 else ""
    ticks = int(tag[1:]) if tag.startswith("t") and tag[1:].isdigit() else None
    return int(parts[0]), ticks


def sweep_staging(root: Path, log: Log, *, legacy: Path | None = None) -> list[Path]:
    """Remove the staging folders of runs that ended without cleaning up: this user's folders
    under ``root`` whose run is gone: its pid no longer lives, or lives as another process (a start
    time other than the one the folder's name records; :func:`release.core.liveness.same_process`).
    A folder whose run cannot be proved gone is kept. (And, by the same rule, under ``legacy``,
    dist/.publish, the place an earlier version kept them; call it holding dist/'s lock)."""
    removed: list[Path] = []
    me = os.getuid()
    found = [(f, STAGING_PREFIX) for f in sorted(root.glob(f"{STAGING_PREFIX}*"))]
    if legacy is not None and legacy.is_dir():
        found += [(f, LEGACY_PREFIX) for f in sorted(legacy.glob(f"{LEGACY_PREFIX}*"))]
    for folder, prefix in found:
        owner = staging_owner(folder.name, prefix)
        try:
            st = folder.lstat()
        except OSError:
            continue
        if owner is None or not stat.S_ISDIR(st.st_mode) or st.st_uid != me:
            continue
        pid, ticks = owner
        if liveness.same_process(pid, ticks):
            continue  # a run still going (any dist/; this one's own included), checked by its start time
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
        log(f"removed {folder}: a staging folder left by an earlier run (pid {pid}) that was killed")
    return removed


def staging_prefix() -> str:
    """This run's staging folders' name prefix: ``wheelwright-publish-<pid>-t<start ticks>-``."""
    pid = os.getpid()
    ticks = liveness.start_ticks(pid)
    return f"{STAGING_PREFIX}{pid}-" + (f"t{ticks}-" if ticks is not None else "")


def make_staging(root: Path) -> Path:
    """A fresh private folder for this run: mode 0700, owned by this user (checked, not assumed)."""
    try:
        folder = Path(tempfile.mkdtemp(prefix=staging_prefix(), dir=root))
        st = folder.lstat()
    except OSError as exc:
        raise StepFailed(f"cannot make a private staging folder in {root}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        shutil.rmtree(folder, ignore_errors=True)
        raise StepFailed(
            f"{folder}: the staging folder is not this user's private folder (mode "
            f"{stat.S_IMODE(st.st_mode):o}, uid {st.st_uid}); set TMPDIR to a folder only you can write"
        )
    return folder


@contextlib.contextmanager
def publish_session(
    dist: Path, *, env: Mapping[str, str], log: Log, command: str | None = None
) -> Iterator[Session]:
    """Hold dist/'s lock and a fresh private staging folder for the ``with`` block; both go at its end."""
    with lock.hold(dist, what="dist/", command=command, wait_s=lock.wait_from_env(env), log=log) as me:
        root = staging_root(env)
        sweep_staging(root, log, legacy=dist / STATE_DIR)
        staging = make_staging(root)
        try:
            yield Session(dist, staging, me)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
