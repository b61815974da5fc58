"""``python -m release index start|stop|status``: the local package index a rehearsal publishes to.

A rehearsal starts it under ``.wheelwright/index`` and leaves it running so the printed install
lines work; this command starts one (for the policy's variants), says whether one runs and where,
and stops it (its files are kept; another run's lease on it refuses the stop, naming that run).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from release.core import log
from release.core.errors import StepFailed
from release.policy.load import DEFAULT_POLICY, default_policy

__all__ = ["DEFAULT_ROOT", "add_parser", "run"]

DEFAULT_ROOT = ".wheelwright/index"


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``index`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "index",
        help="start, stop or show the local package index a rehearsal publishes to",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--root", default=DEFAULT_ROOT, help="the index's folder (default: %(default)s)")
    p.add_argument(
        "--policy",
        default=default_policy(os.environ),
        help=f"with start: serve this policy's variants (default: $WHEELWRIGHT_POLICY, else {DEFAULT_POLICY})",
    )
    p.add_argument(
        "--variants", help="with start: comma-separated variants instead of the policy's (cpu,cu130)"
    )
    p.add_argument("--port", type=int, default=0, help="with start: the port (default: a free one)")
    p.set_defaults(func=run)
    return p


def _variants(args: argparse.Namespace) -> list[str]:
    if args.variants:
        return [v for v in args.variants.split(",") if v]
    from release.policy.load import load_policy
    from release.policy.matrix import expand

    return sorted({row.variant for row in expand(load_policy(args.policy))})


def _start_hint(args: argparse.Namespace) -> str:
    """``python -m release index start`` with the user's own ``--root`` (and ``--policy``: the
    variants it serves), so that run as printed it starts the index this command looked for (pure)."""
    from release.hints import step_hint

    root = "" if Path(args.root) == Path(DEFAULT_ROOT) else f" --root {args.root}"
    return step_hint("index", f"start{root}", policy_path=args.policy)


def run(args: argparse.Namespace) -> int:
    from release.publish.index import local as local_index
    from release.publish.index import server as index_server

    root = Path(args.root)
    if args.action == "status":
        try:
            index = local_index.attach(root)
        except StepFailed:
            print(json.dumps({"root": str(root.resolve()), "running": False}, indent=2, sort_keys=True))
            log.info(f"no local index is running under {root} (start one: {_start_hint(args)})")
            return 0
        state = {
            "root": str(index.root_dir),
            "running": True,
            "pid": index.pid,
            "indexes": {v: index.simple_url(v) for v in index.variants},
        }
        print(json.dumps(state, indent=2, sort_keys=True))
        return 0
    return index_server.start_or_stop(
        args.action, root, _variants(args) if args.action == "start" else [], args.port
    )
