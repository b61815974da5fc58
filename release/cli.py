"""Command line: ``python -m release <command>``. Errors are caught here, once."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from release import early
from release.cli_options import (
    add_backend,
    add_dist,
    add_probe_timeout,
    row_command,
    rows_from_args,
)
from release.core import log
from release.core.errors import InputError, WheelwrightError
from release.run_lock import LOCKED_COMMANDS, add_wait_option, command_lock

if TYPE_CHECKING:  # the policy modules are imported by the commands that read a policy
    from release.policy.matrix import Row
    from release.policy.model import Policy

PLAN_JSON_VERSION = 1


def _add_verbosity(p: argparse.ArgumentParser, *, default: object) -> None:
    """``-q``/``-v``, before or after the command (after it wins)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-q", "--quiet", dest="level", action="store_const", const=log.QUIET, default=default,
        help="only warnings, failures and results",
    )  # fmt: skip
    g.add_argument(
        "-v", "--verbose", dest="level", action="store_const", const=log.VERBOSE, default=default,
        help="also every step's log as it happens, and the commands run",
    )  # fmt: skip


def plan_json(policy: Policy, rows: Sequence[Row]) -> dict[str, Any]:
    return {
        "version": PLAN_JSON_VERSION,
        "policy": policy.path,
        "project": {"name": policy.project.name, "path": policy.project.path},
        "rows": [r.to_json() for r in rows],
    }


def render_plan(rows: Sequence[Row]) -> str:
    header = ("row", "python", "variant", "arch", "gpu archs", "cuda packages", "builder image")
    lines = [
        (
            r.id,
            r.python,
            r.variant,
            r.platform,
            r.torch_cuda_arch_list or "-",
            ",".join(p.name for p in r.cuda_packages) or "-",
            r.builder_image,
        )
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(str(c).ljust(w) for c, w in zip(line, widths, strict=True)) for line in lines]
    n_cuda = sum(r.is_cuda for r in rows)
    out.append(f"{len(rows)} rows: {n_cuda} CUDA, {len(rows) - n_cuda} CPU")
    return "\n".join(line.rstrip() for line in out)


def cmd_plan(args: argparse.Namespace) -> int:
    policy, rows = rows_from_args(args)
    for note in policy.notes:
        log.info(f"note: {note}")
    if args.json:
        print(json.dumps(plan_json(policy, rows), indent=2, sort_keys=True))
    else:
        print(render_plan(rows))
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    from release.policy.matrix import github_matrix

    _, rows = rows_from_args(args)
    text = json.dumps(github_matrix(rows), sort_keys=True)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"--output {args.output}: cannot write: {exc.strerror}") from None
        log.info(f"wrote the matrix of {len(rows)} rows to {args.output}")
    else:
        print(text)
    return 0


def cmd_smoke(args: argparse.Namespace) -> int:
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


def cmd_publish(args: argparse.Namespace) -> int:
    from release.publish.step import publish_rows

    policy, rows = rows_from_args(args)
    reports = publish_rows(
        policy,
        rows,
        target_name=args.target,
        dist=Path(args.dist),
        mode="check" if args.check_only else "publish",
    )
    for report in reports:
        print(
            f"published {report.variant} to {report.index}: {len(report.uploaded)} uploaded, "
            f"{len(report.skipped)} already there, {len(report.verified)} verified"
        )
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    from release.core.machine import default_cache_dir
    from release.wheelbuild.run import build_row

    policy, rows = rows_from_args(args)
    built = 0
    for row in rows:
        records = build_row(
            row,
            policy_path=policy.path,
            dist_dir=Path(args.dist),
            cache_dir=default_cache_dir(os.environ),
            backend=args.backend,
            dry_run=args.dry_run,
        )
        for record in records:
            print(f"built {row.id}: {record.wheel}")
            built += 1
    if not args.dry_run:
        print(f"{built} wheel(s) built; records beside them (<wheel>.build.json)")
    return 0


def cmd_channels(args: argparse.Namespace) -> int:
    from release.publish.channels import check_rows

    policy, rows = rows_from_args(args)
    findings = check_rows(policy, rows)
    if not policy.dependencies:
        print(f"{policy.path} routes no dependency to a channel ([[dependency]]); nothing to check")
    for f in findings:
        print(f"✓ {f.package} for {f.platform}: {len(f.usable)} usable file(s) on {f.index_url}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m release",
        description="wheelwright: build, audit, smoke-test and publish every row of a CUDA wheel "
        "release policy (rows.toml), all or nothing.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 tool missing, 4 a step failed.",
    )
    from release import __version__

    parser.add_argument("--version", action="version", version=f"wheelwright {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = sub.choices

    p = row_command(
        sub,
        "plan",
        cmd_plan,
        help="show the rows the policy expands to",
        description="Show the rows rows.toml expands to.",
    )
    p.add_argument("--json", action="store_true", help=f"versioned JSON (version {PLAN_JSON_VERSION})")

    p = row_command(sub, "matrix", cmd_matrix, help="GitHub Actions matrix JSON for the selected rows")
    p.add_argument("--output", metavar="FILE", help="write the JSON here instead of stdout")

    p = row_command(
        sub,
        "smoke",
        cmd_smoke,
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

    p = row_command(
        sub,
        "publish",
        cmd_publish,
        help="upload audited wheels to a target's per-variant indexes",
        description="Upload the selected rows' wheels from dist/ to the target's indexes. Only wheels whose "
        "passing audit and smoke records match their sha256, row and the current policy are uploaded; "
        "everything is checked (every variant, the index's current contents) before the first upload. A "
        "non-rehearsal target takes only the whole release (a selection is exit 2). Files already on the index with the same "
        "sha256 are skipped, so an interrupted publish completes when run again.",
    )
    p.add_argument(
        "--target", default="rehearsal", help="a [target.NAME] of the policy (default: %(default)s)"
    )
    add_dist(p)
    p.add_argument("--check-only", action="store_true", help="run every guard, upload nothing")

    from release.release_cli import add_release_parser

    add_release_parser(sub)

    p = row_command(
        sub,
        "channels",
        cmd_channels,
        help="check that every [[dependency]] channel publishes for the selected rows",
        description="Ask each dependency's channel (simple index) which wheels it publishes, and fail "
        "naming every dependency a row would take from a channel with nothing for its arch.",
    )

    p = row_command(
        sub,
        "build",
        cmd_build,
        help="build the selected rows' wheels into dist/<variant>/",
        description="Build each selected row exactly as its row says: the row's Python, a CUDA toolchain of "
        "the row's exact version, TORCH_CUDA_ARCH_LIST and CMAKE_CUDA_ARCHITECTURES from the row, then "
        "auditwheel repair excluding every CUDA library. --backend container runs cibuildwheel in the row's "
        "manylinux CUDA image (CI); host builds here with the same environment and repair. A failed build "
        "leaves nothing in dist/.",
    )
    add_dist(p, "where wheels go")
    add_backend(p, "auto: a container engine if one works, else the host")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the build plan (environment, commands) and build nothing",
    )

    from release.audit.cli import add_audit_parser
    from release.index_cli import add_index_parser
    from release.publish.verify_cli import add_verify_parser
    from release.trains_cli import add_trains_parser

    add_audit_parser(sub)
    add_verify_parser(sub)
    add_trains_parser(sub)
    add_index_parser(sub)
    _add_verbosity(parser, default=log.NORMAL)
    for name, command in sub.choices.items():
        _add_verbosity(command, default=argparse.SUPPRESS)
        if name in LOCKED_COMMANDS:
            add_wait_option(command)
    return parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors (an unknown option, a value missing) are remembered, so
    that ``audit --json`` can put them into its JSON document too (subcommands' parsers are this class)."""

    last_error: str | None = None
    commands: Mapping[str, argparse.ArgumentParser] = {}  # the top-level parser's subcommands

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """An unknown option is reported by the subcommand's parser, with that command's usage."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = self.commands.get(getattr(parsed, "command", None) or "")
            (command or self).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        _Parser.last_error = f"{self.prog}: error: {message}"
        super().error(message)


def _usage_error_json(argv: Sequence[str]) -> None:
    """``audit ... --json`` whose command line does not parse: the JSON document names the error as well
    (argparse has said it on stderr, with the usage), so a script that reads stdout sees it."""
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["audit"] and "--json" in argv and _Parser.last_error is not None:
        from release.audit.report.render import render_json

        print(render_json([], [{"wheel": None, "error": _Parser.last_error, "exit_code": 2}]))


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    early.start(given)  # python -m release did it already
    parser = build_parser()
    try:
        args = parser.parse_args(given)
    except SystemExit as exc:
        if exc.code == 2:
            _usage_error_json(given)
        raise
    log.configure(level=args.level)
    try:
        with command_lock(args):  # the whole run holds dist/'s lock (release.run_lock)
            code: int = args.func(args)
        sys.stdout.flush()  # a reader that went away (`plan | head -1`) shows here, not at exit
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a pipe closed early
    except WheelwrightError as exc:
        log.warn(f"error: {exc}")
        return exc.return_code
    except KeyboardInterrupt:
        log.warn("error: interrupted")
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
