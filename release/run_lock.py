"""The whole run holds the lock: each command that writes or reads a release's ``dist/`` holds its
lock from its first step to its last, taken here, in the command layer.

``release`` holds dist/'s lock (:func:`release.publish.guards.lock.hold`) from the first build to the
last install check; ``build``, ``audit`` (of a row's wheel, or of a wheel in dist/), ``smoke`` and
``publish`` hold it for theirs. A ``release`` or ``publish`` to a local-server target (a
rehearsal) also holds a lease on the local index (:mod:`release.publish.index.lease`) from its
publish step to the end of the run (the run scope opened here), so no other run stops or
empties that index while this one publishes to it or checks what installs from it. The publish step inside takes the same lock again (re-entrant in
one process). A second run waits up to ``--wait SECONDS`` (default ``WHEELWRIGHT_LOCK_WAIT_S``,
else 10 s), saying so, then refuses naming the first run's pid and command line (exit 4).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from release.core import log
from release.core.durations import seconds

LOCKED_COMMANDS = ("build", "audit", "smoke", "publish", "release")


def _wait(text: str) -> float:
    return seconds(text, f"--wait {text}", zero_ok=True)


def add_wait_option(p: argparse.ArgumentParser) -> None:
    """``--wait SECONDS`` on a command that holds dist/'s lock."""
    p.add_argument(
        "--wait",
        type=_wait,
        metavar="SECONDS",
        help="when another run holds --dist (or the local index), wait this long for it, then refuse naming "
        "it (default: $WHEELWRIGHT_LOCK_WAIT_S, else 10; 0 refuses at once)",
    )


def locked_dist(args: argparse.Namespace) -> Path | None:
    """The dist/ folder the command's run holds, or None when it touches none, or when its policy file
    is not there (the command refuses before any step; a lock file would be left in a foreign folder)."""
    command = getattr(args, "command", None)
    if command not in LOCKED_COMMANDS or not hasattr(args, "dist") or getattr(args, "dry_run", False):
        return None
    policy = getattr(args, "policy", None) or os.environ.get("WHEELWRIGHT_POLICY") or "rows.toml"
    if not Path(policy).is_file():  # no policy: the command stops at once, and leaves no lock behind
        return None
    dist = Path(args.dist)
    if command == "audit":  # wheel files audited as they are, outside dist/: nothing of a release
        inside = [w for w in args.wheels if not w.endswith(".whl") or _under(Path(w), dist)]
        if not inside:
            return None
    return dist


def _under(path: Path, folder: Path) -> bool:
    return path.resolve().is_relative_to(folder.resolve())


@contextlib.contextmanager
def command_lock(args: argparse.Namespace) -> Iterator[None]:
    """Hold what the command's whole run needs: dist/'s lock, and the scope a rehearsal's lease on
    the local index lasts for (claimed by its publish step)."""
    dist = locked_dist(args)
    if dist is None:
        yield
        return
    from release.publish.guards import lock
    from release.publish.index import lease as index_lease

    given = getattr(args, "wait", None)
    wait_s = lock.wait_from_env(os.environ) if given is None else given
    with lock.hold(dist, what="dist/", wait_s=wait_s, log=log.info), index_lease.run_scope(wait_s=wait_s):
        yield
