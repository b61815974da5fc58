"""``python -m release matrix [--output FILE]``: the GitHub Actions matrix JSON of the selected rows,
on stdout or into a file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from release.commands.options import row_command, rows_from_args
from release.core import log
from release.core.errors import InputError

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``matrix`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = row_command(subparsers, "matrix", run, help="GitHub Actions matrix JSON for the selected rows")
    p.add_argument("--output", metavar="FILE", help="write the JSON here instead of stdout")
    return p


def run(args: argparse.Namespace) -> int:
    from release.policy.matrix import github_matrix

    _, rows = rows_from_args(args)
    text = json.dumps(github_matrix(rows), sort_keys=True)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"--output {args.output}: cannot write: {exc.strerror}") from None
        log.info(f"wrote the matrix of {len(rows)} row{'' if len(rows) == 1 else 's'} to {args.output}")
    else:
        print(text)
    return 0
