"""``python -m release smoke``: install each selected row's wheel in a fresh venv of the row's Python,
import it, prove which libcudart was loaded and run the project's check computation on the GPU. The
wheel needs its passing audit record, bound to its sha256, row and policy (exit 1 without)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from release.commands.options import add_dist, add_probe_timeout, row_command, rows_from_args
from release.core import log
from release.core.errors import InputError

if TYPE_CHECKING:  # the policy modules are imported by the commands that read a policy
    from release.policy.matrix import Row

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``smoke`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = row_command(
        subparsers,
        "smoke",
        run,
        help="install each row's wheel in a fresh venv, import it, run its check",
        description="Install the row's wheel (and its dependencies) in a fresh venv of the row's Python "
        "with this machine's pip configuration ignored, import it, prove which libcudart was loaded, "
        "and run the project's check computation on the GPU (skipped, and said so, when there is none). "
        "The wheel needs its passing audit record, bound to its sha256, row and policy (exit 1 without).",
    )
    add_dist(p)
    p.add_argument(
        "--wheel",
        help="smoke this wheel file instead of the row's wheel in --dist (its passing audit record beside it); "
        "without a ROW_GLOB its row is the one its file name names (variant label, Python tag, CPU arch)",
    )
    p.add_argument("--index-url", help="pip --index-url for the dependencies (default: pip's default index)")
    p.add_argument(
        "--extra-index-url", action="append", default=[], help="pip --extra-index-url (repeatable)"
    )
    p.add_argument(
        "--wheelhouse",
        metavar="DIR",
        help="install the wheel's dependencies from DIR only (pip --no-index --find-links DIR): for a "
        "machine with no network; fill it elsewhere with pip download --only-binary=:all: --dest DIR WHEEL",
    )
    p.add_argument(
        "--unaudited",
        action="store_true",
        help="with --wheel: smoke a wheel that has no passing audit record (a wheel that fails its audit by "
        "design, to see what a GPU does with it); no smoke record is written, so nothing it says can reach "
        "a publish",
    )
    add_probe_timeout(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Each row's wheel needs its passing audit record (bound to its sha256, row and policy)."""
    from release.records import policy_sha256, row_matches_wheel, the_wheel
    from release.smoke.run import Timeouts, probe_timeout, smoke_pythons, smoke_step

    if args.wheel and not args.rows:  # the wheel names its row: its label, Python tag and CPU arch
        from release.policy.load import load_policy
        from release.policy.matrix import expand
        from release.records import row_for_wheel

        policy = load_policy(args.policy)
        rows: tuple[Row, ...] = (
            row_for_wheel(Path(args.wheel).name, expand(policy), policy_path=policy.path),
        )
    else:
        policy, rows = rows_from_args(args)
    if args.wheel and len(rows) != 1:
        raise InputError(
            f"--wheel needs exactly one row, but the selection has {len(rows)}: give the wheel's row id, "
            "or no row at all (the wheel's file name names its row)"
        )
    if args.unaudited and not args.wheel:
        raise InputError("--unaudited smokes one wheel file: give it with --wheel")
    timeouts = Timeouts(probe=probe_timeout(args.probe_timeout, os.environ))
    psha = policy_sha256(policy)
    house = Path(args.wheelhouse).resolve() if args.wheelhouse else None
    if house is not None:
        if args.index_url or args.extra_index_url:
            raise InputError(
                "--wheelhouse installs from that folder only: drop --index-url and --extra-index-url"
            )
        if not house.is_dir():
            raise InputError(f"--wheelhouse {args.wheelhouse}: no such folder")
    failed = 0
    for row in rows:
        wheel = (
            Path(args.wheel)
            if args.wheel
            else the_wheel(Path(args.dist), row, "smoke", policy_path=args.policy)
        )
        if not wheel.is_file():
            raise InputError(f"{wheel}: no such wheel")
        if not row_matches_wheel(row, wheel.name):
            raise InputError(
                f"{wheel.name} is not a wheel of row {row.id} (expected local label "
                f"{row.local_version or 'none'}, tags {row.wheel_tag_form} (project.wheel_tags = "
                f"{row.wheel_tags!r}), platform *_{row.platform})"
            )
        outcome, record = smoke_step(
            row,
            policy.project,
            wheel,
            smoke_pythons(row, os.environ),
            policy_sha256=psha,
            policy_path=policy.path,
            index_url=args.index_url,
            extra_index_urls=args.extra_index_url,
            timeouts=timeouts,
            wheelhouse=house,
            audited=not args.unaudited,
        )
        print(f"{'PASS' if outcome.passed else 'FAIL'} smoke {row.id}: {wheel.name}")
        for line in outcome.lines:
            print(f"  {line}")
        print(
            f"  record: {record}" if record else "  record: none (--unaudited: no audit record was required)"
        )
        if not outcome.passed:
            failing = [line for line in outcome.lines if line.startswith("✗")]
            log.annotate(f"smoke failed: {row.id}", "\n".join(failing) or "the smoke test failed")
        failed += not outcome.passed
    return 1 if failed else 0
