"""The options and the row selection every row command shares (``--policy``, ``--arch``, globs,
``--dist``, ``--backend``, ``--probe-timeout``): one home, imported by each command module of
:mod:`release.commands`, so no command module imports another."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from release.core.errors import InputError, SelectionError
from release.policy.load import DEFAULT_POLICY, default_policy

if TYPE_CHECKING:  # the policy modules are imported by the commands that read a policy
    from release.policy.matrix import Offered, Row
    from release.policy.model import Policy

__all__ = [
    "ARCH_ENV",
    "MACHINE_ARCH_COMMANDS",
    "add_backend",
    "add_dist",
    "add_probe_timeout",
    "add_selection",
    "resolve_rows",
    "row_command",
    "rows_from_args",
    "selected_arch",
]


def _load_offered(path: str | None) -> Offered | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the --offered file: {exc.strerror}") from None
    from release.policy.matrix import load_offered

    return load_offered(text, path)


def resolve_rows(
    policy: Policy,
    *,
    patterns: Sequence[str] = (),
    platform: str | None = None,
    pr: bool = False,
    offered: Offered | None = None,
    platform_from: str | None = None,
) -> tuple[Row, ...]:
    from release.policy.matrix import check_offered, expand, pick_pr_row, select
    from release.resources.cpus import host_arch

    rows = expand(policy)
    if offered is not None and not pr:
        check_offered(rows, offered)
    if pr:
        if patterns:
            raise SelectionError("--pr chooses its one row by preference; drop the row globs")
        if platform is not None:  # an arch the policy does not build is refused as without --pr
            select(policy, rows, platform=platform, platform_from=platform_from)
        return (pick_pr_row(rows, platform or host_arch(), offered),)
    return select(policy, rows, patterns=tuple(patterns), platform=platform, platform_from=platform_from)


def add_selection(p: argparse.ArgumentParser) -> None:
    from release.resources.cpus import cpus

    first, second = cpus().manylinux[:2]  # the help's examples, by the CPU table's names
    p.add_argument(
        "rows",
        nargs="*",
        metavar="ROW_GLOB",
        help="row id globs or their leading parts, e.g. 'cu130-*' or 'cu130-py312', or cibuildwheel identifiers "
        f"('cp312-manylinux_{first}': every variant of that Python and arch) (default: all); the id of "
        "any Python an abi3/py3-none row's wheel serves selects that row",
    )
    p.add_argument(
        "--policy",
        default=default_policy(os.environ),
        help=f"policy file (default: $WHEELWRIGHT_POLICY, else {DEFAULT_POLICY}; here: %(default)s)",
    )
    p.add_argument(
        "--arch",
        dest="platform",
        metavar="ARCH",
        help=f"only rows for this CPU arch: {first}, {second}, or all (default: $WHEELWRIGHT_ARCH, else this "
        "machine's arch for build/smoke/publish/release and all for plan/matrix; a glob that names an arch, "
        f"like 'cu130-py312-{second}', selects that arch)",
    )
    p.add_argument(
        "--pr", action="store_true", help="pull-request mode: one row, the newest CUDA on offer for the arch"
    )
    p.add_argument(
        "--offered",
        metavar="FILE",
        help='JSON {"version": 1, "identifiers": [cibuildwheel ids], "images": [builder images]}; '
        "fails naming every advertised row not offered",
    )


def row_command(
    sub: argparse._SubParsersAction[Any],
    name: str,
    func: Callable[[argparse.Namespace], int],
    help: str,
    description: str | None = None,
) -> argparse.ArgumentParser:
    """A subcommand over selected rows: its parser, the row selection options, its function."""
    p: argparse.ArgumentParser = sub.add_parser(name, help=help, description=description)
    add_selection(p)
    p.set_defaults(func=func)
    return p


TARGET_HELP = "a [target.NAME] of the policy (default with --rehearsal: rehearsal)"


def target_from_args(args: argparse.Namespace, policy: Policy) -> str:
    """The target ``publish`` and ``release`` publish to: ``--target NAME``, or ``--rehearsal`` (the
    policy's ``rehearsal`` target); neither is bad input, as is ``--rehearsal`` with a target that is
    not a rehearsal one. One rule for both commands (and ``verify`` needs ``--target`` too)."""
    target: str | None = args.target or ("rehearsal" if args.rehearsal else None)
    if target is None:
        raise InputError(
            "name the target: --target production (whole release) or --rehearsal (a local index)"
        )
    if args.rehearsal and args.target and not policy.target(args.target).rehearsal:
        raise InputError(f"--rehearsal publishes only to a rehearsal target; {args.target!r} is not one")
    return target


def add_dist(p: argparse.ArgumentParser, what: str = "where built wheels are") -> None:
    p.add_argument("--dist", default="dist", help=f"{what} (default: %(default)s)")


def add_backend(p: argparse.ArgumentParser, what: str = "build backend") -> None:
    from release.wheelbuild.backends import AUTO, BACKENDS, CHOICES

    each = "; ".join(f"{b.name}: {b.builds}" for b in BACKENDS)
    p.add_argument(
        "--backend",
        choices=CHOICES,
        default=AUTO,
        help=f"{what}: {each}; {AUTO}: the container where an engine holds the row's image, else the host "
        "(default: %(default)s)",
    )


def add_probe_timeout(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--probe-timeout",
        type=float,
        metavar="SECONDS",
        help="how long the smoke probe (import, then the check computation on the GPU) may run "
        "(default: $WHEELWRIGHT_SMOKE_TIMEOUT, else 600)",
    )


MACHINE_ARCH_COMMANDS = frozenset({"build", "smoke", "publish", "release", "channels"})
ARCH_ENV = "WHEELWRIGHT_ARCH"


def selected_arch(
    command: str, given: str | None, patterns: Sequence[str], env: Mapping[str, str], host: str
) -> str | None:
    """The CPU arch a selection is limited to (None: every arch), decided in one place (pure).

    ``--arch`` wins, then ``$WHEELWRIGHT_ARCH``; ``all`` means every arch. Without either, the
    commands that act on this machine (build, smoke, publish, release) take this machine's arch,
    unless a glob names an arch itself; plan and matrix show every arch.
    """
    from release.resources.cpus import cpus

    chosen = given or env.get(ARCH_ENV) or None
    if chosen is not None:
        return None if chosen == "all" else chosen
    if command not in MACHINE_ARCH_COMMANDS:
        return None
    if any(arch in pattern for pattern in patterns for arch in cpus().names):
        return None
    return host


def rows_from_args(args: argparse.Namespace) -> tuple[Policy, tuple[Row, ...]]:
    from release.policy.load import load_policy
    from release.resources.cpus import host_arch

    policy = load_policy(args.policy)
    rows = resolve_rows(
        policy,
        patterns=args.rows,
        platform=selected_arch(
            getattr(args, "command", "") or "", args.platform, args.rows, os.environ, host_arch()
        ),
        pr=args.pr,
        offered=_load_offered(args.offered),
        platform_from=ARCH_ENV if not args.platform and os.environ.get(ARCH_ENV) else None,
    )
    return policy, rows
