"""Leases on the local rehearsal index: no run stops or empties it while another run uses it.

A rehearsal starts the local index (:mod:`release.publish.index.local`), empties it, publishes
to it and then checks what pip and uv install from it. A second run in the same folder must
not stop or empty it in between. Each run that uses the index holds a **claim** from its first
use to the end of the run: a kernel lock, shared, on the index's root folder
(:mod:`release.publish.index.claims`), which the kernel drops when the run ends, ``kill -9``
included. Beside it the run writes a **lease** file ``<root>/leases/<pid>-t<start ticks>.json``
(pid, /proc start time, command line, start) that only describes it: deleting it, or the whole
``leases/`` folder, lets nothing through. Claims are taken under the index root's lock
(:mod:`release.publish.guards.lock`) only when no other run holds one; a lease whose process is
gone (:func:`release.core.liveness.same_process`) is swept by the next reader.

- :func:`claim`: take this run's claim (a publish to a local-server target does, before it
  touches the index; ``verify`` of a local target too); while another run holds one, wait up to
  ``wait_s`` (saying so), then refuse (StepFailed, exit 4, ``[rule: one-run]``) naming it. The
  claim lasts until the run's :func:`run_scope` ends (the command layer opens one around
  ``release`` and ``publish``: the install checks after the publish are covered), else until the
  process exits.
- :func:`lease` (context manager): claim and give back around a block.
- :func:`in_use_problem`: what stops a stop or an emptying of the index now (another process's
  claim, asked of the kernel without waiting, each holder named from the kernel's lock table and
  described by its lease file or, when that is gone, its /proc entries), in words; None when
  nothing does. Called under the index root's lock by whatever stops or empties the index (a
  rehearsal's fresh start, ``index stop``).

The index itself outlives the runs (a rehearsal leaves an index to ``pip install`` from);
nothing here stops it.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from release.core import liveness
from release.core.errors import StepFailed
from release.publish.guards import lock
from release.publish.index import claims

LEASES_DIR = "leases"
_claimed: dict[Path, Path] = {}  # index root -> this process's lease file there
_scope_wait: list[float] = []  # the --wait of each open run_scope, innermost last


def _lease_file(root: Path, holder: lock.Holder) -> Path:
    tag = f"-t{holder.ticks}" if holder.ticks is not None else ""
    return root / LEASES_DIR / f"{holder.pid}{tag}.json"


def live_leases(root: Path) -> list[lock.Holder]:
    """Other runs' live leases on the index under ``root``; dead ones are removed on the way."""
    found: list[lock.Holder] = []
    folder = root / LEASES_DIR
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        holder = lock.holder_in(path)
        if holder is None:
            continue  # being written, or not a lease: never a reason to remove anything
        if holder.pid == os.getpid():
            continue
        if liveness.same_process(holder.pid, holder.ticks):
            found.append(holder)
        else:
            path.unlink(missing_ok=True)  # its run is gone (checked, not assumed)
    return found


def _described(root: Path, pid: int) -> lock.Holder:
    """A claim's holder: as its live lease file says, else from /proc (its lease was deleted)."""
    for holder in live_leases(root):
        if holder.pid == pid:
            return holder
    ticks = liveness.start_ticks(pid)
    return lock.Holder(
        pid,
        liveness.command_of(pid) or "its command line cannot be read",
        (liveness.started_utc(ticks) if ticks is not None else None) or "at an unknown time",
        socket.gethostname(),
        ticks,
    )


def holders(root: Path) -> list[lock.Holder] | None:
    """The other processes holding a claim on the index under ``root``, named by the kernel;
    [] when none does; None when the kernel says one does but not who (another user's process)."""
    if not claims.others_hold(root):
        live_leases(root)  # sweep the dead ones on the way
        return []
    pids = claims.holder_pids(root)
    return [_described(root, pid) for pid in pids] if pids else None


def in_use_problem(root: Path, doing: str, *, waited: str = "") -> str | None:
    """Why ``doing`` ("stop the local index") may not happen now; None when no other run uses it."""
    others = holders(root)
    if others == []:
        return None
    if others is None:
        who = "a process the kernel shows holding a claim on it, which this user cannot see"
    else:
        leased = {h.pid for h in live_leases(root)}
        who = "; ".join(
            h.describe() + ("" if h.pid in leased else " (its lease file is gone; named by the kernel)")
            for h in others
        )
    return (
        f"cannot {doing} ({root}): another wheelwright run is using it: {who}. Wait for that run to "
        f"finish, then run again{waited} [rule: one-run]"
    )


def claim(
    root: Path,
    *,
    wait_s: float | None = None,
    log: Callable[[str], None] | None = None,
    alone: bool = True,
) -> Path:
    """Take this run's claim and lease on the local index under ``root`` unless it holds one; it
    lasts until the run's :func:`run_scope` ends (else until :func:`release_claims` or the process's exit).

    ``alone`` (a run that fills or empties the index: publish): while another run holds a claim
    this waits up to ``wait_s`` (default: the run scope's, else
    :func:`release.publish.guards.lock.wait_from_env`), saying so, then refuses (StepFailed) naming
    it. Not ``alone`` (a run that only reads it: verify): claimed beside the others.
    """
    key = root.resolve() if root.exists() else root.absolute()
    if key in _claimed:
        return _claimed[key]
    if wait_s is None:
        wait_s = _scope_wait[-1] if _scope_wait else lock.wait_from_env(os.environ)
    me = lock.me()
    path = _lease_file(key, me)
    start, said = time.monotonic(), False
    while True:
        left = max(0.0, wait_s - (time.monotonic() - start))
        with lock.hold(key, what="the local index", wait_s=left, log=log):
            waited = f"; this run waited {wait_s:g} s (--wait, {lock.WAIT_ENV}) and changed nothing"
            problem = in_use_problem(key, "use the local index", waited=waited) if alone else None
            if problem is None:
                try:
                    claims.take(key)
                except OSError as exc:
                    raise StepFailed(
                        f"cannot claim the local index ({key}): its folder cannot be locked: {exc}"
                    ) from None
                path.parent.mkdir(parents=True, exist_ok=True)
                tmp = path.with_suffix(".tmp")
                tmp.write_text(json.dumps(dataclasses.asdict(me), sort_keys=True) + "\n", encoding="utf-8")
                tmp.replace(path)
                _claimed[key] = path
                return path
        if time.monotonic() - start >= wait_s:
            raise StepFailed(problem)
        if log is not None and not said:
            log(f"waiting up to {wait_s:g} s for the local index ({key}): {problem.split('. Wait')[0]}")
            said = True
        time.sleep(lock.POLL_S * 5)


def release_claims() -> None:
    """Give up every claim this process holds, and remove its lease files."""
    claims.give_back()
    while _claimed:
        _key, path = _claimed.popitem()
        path.unlink(missing_ok=True)


@contextlib.contextmanager
def run_scope(*, wait_s: float | None = None) -> Iterator[None]:
    """One run: the leases claimed inside (by a publish to a local-server target) last until it
    ends, so the run's install checks after the publish are covered too. ``wait_s``: how long a
    claim inside waits for another run's lease (``--wait``)."""
    _scope_wait.append(lock.wait_from_env(os.environ) if wait_s is None else wait_s)
    try:
        yield
    finally:
        _scope_wait.pop()
        if not _scope_wait:
            release_claims()


@contextlib.contextmanager
def lease(root: Path, *, wait_s: float, log: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold this run's lease on the local index under ``root`` for the ``with`` block."""
    with run_scope(wait_s=wait_s):
        yield claim(root, log=log)


atexit.register(release_claims)
