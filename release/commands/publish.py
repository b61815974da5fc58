"""``python -m release publish --target NAME | --rehearsal``: upload the selected rows' audited, smoke-tested wheels
from dist/ to the target's per-variant indexes, every guard checked before the first upload
(:mod:`release.publish.step`); ``--check-only`` runs the guards and uploads nothing."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from release.commands.options import TARGET_HELP, add_dist, row_command, rows_from_args, target_from_args

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``publish`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = row_command(
        subparsers,
        "publish",
        run,
        help="upload audited wheels to a target's per-variant indexes",
        description="Upload the selected rows' wheels from dist/ to the target's indexes. Only wheels whose "
        "passing audit and smoke records match their sha256, row and the current policy are uploaded; "
        "everything is checked (every variant, the index's current contents) before the first upload. A "
        "non-rehearsal target takes only the whole release (a selection is exit 2). Files already on the index with the same "
        "sha256 are skipped, so an interrupted publish completes when run again.",
    )
    p.add_argument("--target", help=TARGET_HELP)
    p.add_argument(
        "--rehearsal", action="store_true", help="publish to the policy's rehearsal target (a local index)"
    )
    add_dist(p)
    p.add_argument("--check-only", action="store_true", help="run every guard, upload nothing")
    return p


def run(args: argparse.Namespace) -> int:
    from release.publish.step import publish_rows

    policy, rows = rows_from_args(args)
    reports = publish_rows(
        policy,
        rows,
        target_name=target_from_args(args, policy),
        dist=Path(args.dist),
        mode="check" if args.check_only else "publish",
    )
    for report in reports:
        print(
            f"published {report.variant} to {report.index}: {len(report.uploaded)} uploaded, "
            f"{len(report.skipped)} already there, {len(report.verified)} verified"
        )
    return 0
