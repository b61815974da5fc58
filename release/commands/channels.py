"""``python -m release channels``: ask each ``[[dependency]]``'s channel (a simple index) which wheels
it publishes, and fail naming every dependency a selected row would take from a channel with nothing
for its arch (:func:`release.publish.channels.check_rows`)."""

from __future__ import annotations

import argparse
from typing import Any

from release.commands.options import row_command, rows_from_args

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``channels`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    return row_command(
        subparsers,
        "channels",
        run,
        help="check that every [[dependency]] channel publishes for the selected rows",
        description="Ask each dependency's channel (simple index) which wheels it publishes, and fail "
        "naming every dependency a row would take from a channel with nothing for its arch.",
    )


def run(args: argparse.Namespace) -> int:
    from release.publish.channels import check_rows

    policy, rows = rows_from_args(args)
    findings = check_rows(policy, rows)
    if not policy.dependencies:
        print(f"{policy.path} routes no dependency to a channel ([[dependency]]); nothing to check")
    for f in findings:
        print(f"✓ {f.package} for {f.platform}: {len(f.usable)} usable file(s) on {f.index_url}")
    return 0
