"""``python -m release release``: build, audit, smoke-test and publish every selected row, all or nothing
(:mod:`release.pipeline`); this module is its options and its output."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any, Literal

from release.commands.options import (
    TARGET_HELP,
    add_backend,
    add_dist,
    add_probe_timeout,
    add_selection,
    rows_from_args,
    target_from_args,
)
from release.core import log
from release.core.errors import InputError

__all__ = ["add_parser", "run"]


def _jobs(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give at least 1")
    return value


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``release`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "release",
        help="build, audit, smoke-test and publish every selected row, all or nothing",
        description="Build every selected row, audit each wheel against its row, smoke-test it in a fresh "
        "venv, and publish only if every row passed every step. With --rehearsal: the rows this machine "
        "can build (others are listed with the reason), published to a local index started under "
        ".wheelwright/index. Refuses to start on a dirty working tree.",
    )
    add_selection(p)
    p.add_argument(
        "--rehearsal",
        action="store_true",
        help="release what this machine can build to the local rehearsal index",
    )
    p.add_argument("--target", help=TARGET_HELP)
    add_dist(p, "where wheels go")
    add_backend(p)
    p.add_argument(
        "--allow-dirty", action="store_true", help="build from a working tree with uncommitted changes"
    )
    p.add_argument("--no-publish", action="store_true", help="stop after the smoke step")
    p.add_argument(
        "--jobs",
        "-j",
        type=_jobs,
        default=os.cpu_count() or 1,
        metavar="N",
        help="rows built, audited and smoke-tested at once (default: this machine's cores, %(default)s)",
    )
    add_probe_timeout(p)
    p.add_argument(
        "--publish-only", action="store_true", help="publish already built, audited, smoke-tested wheels"
    )
    p.add_argument(
        "--check-only", action="store_true", help="with --publish-only: run every guard, upload nothing"
    )
    p.add_argument(
        "--verify-only",
        action="store_true",
        help="with --publish-only: run every guard and require every audited file already on its index",
    )
    p.add_argument(
        "--skip-variant",
        action="append",
        default=[],
        metavar="VARIANT",
        help="with --publish-only: check but do not upload this variant",
    )
    p.set_defaults(func=run)
    return p


def _own_output(repo: Path, entry: str, dist: Path) -> bool:
    """True for what wheelwright itself writes, not a source: ``dist`` (this run's lock file is in it
    before the tree is checked: the run holds it from the start) and ``.wheelwright/`` (the local
    index, its leases)."""
    path = (repo / entry.rstrip("/")).resolve()
    return any(
        path == own or path.is_relative_to(own) for own in (dist.resolve(), (repo / ".wheelwright").resolve())
    )


def run(args: argparse.Namespace) -> int:
    from release.pipeline import exit_code, git_dirty, run_release
    from release.publish.step import check_selection, publish_rows
    from release.summary import left_out_lines, render_summary, summary_markdown

    policy, rows = rows_from_args(args)
    target = target_from_args(args, policy)
    if args.publish_only:
        if args.no_publish or args.backend != "auto" or args.allow_dirty:
            raise InputError("--publish-only builds nothing: drop --no-publish, --backend and --allow-dirty")
        mode: Literal["publish", "check", "verify"] = (
            "verify" if args.verify_only else "check" if args.check_only else "publish"
        )
        done = publish_rows(
            policy, rows, target_name=target, dist=Path(args.dist), mode=mode, skip_variants=args.skip_variant
        )
        for p in done:
            print(f"published {p.variant}: {len(p.uploaded)} uploaded, {len(p.skipped)} already there")
        return 0
    if args.check_only or args.verify_only or args.skip_variant:
        raise InputError("--check-only, --verify-only and --skip-variant only apply with --publish-only")
    check_selection(policy, target, rows)
    repo = Path(policy.path).resolve().parent
    dirty = (
        [] if args.allow_dirty else [p for p in git_dirty(repo) if not _own_output(repo, p, Path(args.dist))]
    )
    if dirty:
        shown = ", ".join(dirty[:5]) + (" ..." if len(dirty) > 5 else "")
        raise InputError(
            f"the working tree has uncommitted changes ({shown}); a release is built from committed "
            "sources only. Commit or stash them (or pass --allow-dirty for a local experiment)."
        )
    from release.core.machine import default_cache_dir
    from release.resources.cpus import host_arch
    from release.smoke.run import Timeouts, probe_timeout

    timeouts = Timeouts(probe=probe_timeout(args.probe_timeout, os.environ))
    done_release = run_release(
        policy,
        rows,
        rehearsal=args.rehearsal,
        target_name=target,
        dist=Path(args.dist),
        cache_dir=default_cache_dir(os.environ),
        host=host_arch(),
        backend=args.backend,
        publish=not args.no_publish,
        smoke_timeouts=timeouts,
        jobs=args.jobs,
    )
    reports, install, published = done_release.reports, done_release.install, done_release.published
    print(render_summary(reports))
    out = left_out_lines(reports, verbose=log.level() >= log.VERBOSE)
    if out:
        print(f"\n{sum(r.left_out for r in reports)} row(s) not built on this machine:")
        print("\n".join(out))
    if done_release.html is not None:
        print(f"\nThe audit of every wheel, as one page: {done_release.html}")
    failed = [r for r in reports if r.failed]
    if install:
        print("\nPublished to the target's indexes. Install it with pip or uv (each line is checked to pick")
        print("the CUDA wheel, with the CUDA index first and with the default index first):")
        print("\n".join(f"  {line}" for line in install))
    if log.github():
        log.job_summary(
            summary_markdown(
                reports, install, title=f"wheelwright release ({target})", html=done_release.html
            )
        )
    if failed:
        what = "the published release does not install as it should" if published else "nothing was published"
        print(f"\nFAILED: {len(failed)} row(s) failed; {what}.")
        return exit_code(reports)
    if not published:
        print("\nNothing was published (--no-publish).")
    return 0
