"""``python -m release coverage [ROW_GLOB ...] [--json] [--wheelhouse DIR] [--download]``: which GPUs each
row's arch list serves, before anything is built, and each row against its GPU dependency's device code
(:mod:`release.coverage`). Exit 1 when a ``gpu_coverage = "fail"`` dependency loses a GPU."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from release.commands.options import row_command, rows_from_args

__all__ = ["add_coverage_options", "add_parser", "run"]


def add_coverage_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--wheelhouse",
        action="append",
        default=[],
        type=Path,
        metavar="DIR",
        help="a folder holding the GPU dependencies' wheels (torch) for the rows; repeatable "
        "(wheelwright's dependency-wheels cache is always searched)",
    )


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``coverage`` command to ``subparsers``."""
    p = row_command(
        subparsers,
        "coverage",
        run,
        help="which GPUs each row's arch list serves, and against its GPU dependency",
        description="For each CUDA row: the GPUs of its CPU its gpu_archs serve natively, by PTX JIT or "
        "not at all; and against each [[dependency]] with device code (torch): the GPUs it loses, the "
        "architectures nobody runs, the dependency's own list.",
    )
    p.add_argument("--json", action="store_true", help="versioned JSON")
    p.add_argument(
        "--download",
        action="store_true",
        help="fetch a missing dependency wheel with `pip download --no-deps` from the entry's index",
    )
    add_coverage_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    from release.coverage.render import render
    from release.coverage.run import cover

    policy, rows = rows_from_args(args)
    report = cover(policy, rows, wheelhouses=args.wheelhouse, env=os.environ, download_missing=args.download)
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print(render(report))
    report.raise_if_failed(policy.path)
    return 0
