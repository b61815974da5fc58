"""Command line: ``python -m release <command>``. Errors are caught here, once."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from release.core.errors import InputError, SelectionError, WheelwrightError
from release.core.machine import host_platform
from release.policy.load import load_policy
from release.policy.matrix import (
    Offered,
    Row,
    check_offered,
    expand,
    github_matrix,
    load_offered,
    pick_pr_row,
    select,
)
from release.policy.model import Policy

PLAN_JSON_VERSION = 1
DEFAULT_POLICY = "rows.toml"


def _load_offered(path: str | None) -> Offered | None:
    if path is None:
        return None
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read the --offered file: {exc.strerror}") from None
    return load_offered(text, path)


def resolve_rows(
    policy: Policy,
    *,
    patterns: Sequence[str] = (),
    platform: str | None = None,
    pr: bool = False,
    offered: Offered | None = None,
) -> tuple[Row, ...]:
    rows = expand(policy)
    if offered is not None and not pr:
        check_offered(rows, offered)
    if pr:
        if patterns:
            raise SelectionError("--pr chooses its one row by preference; drop the row globs")
        return (pick_pr_row(rows, platform or host_platform(), offered),)
    return select(policy, rows, patterns=tuple(patterns), platform=platform)


def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("rows", nargs="*", metavar="ROW_GLOB", help="row id globs, e.g. 'cu130-*' (default: all)")
    p.add_argument("--policy", default=DEFAULT_POLICY, help="policy file (default: %(default)s)")
    p.add_argument(
        "--arch", dest="platform", metavar="ARCH", help="only rows for this CPU arch (x86_64, aarch64)"
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


def _rows_from_args(args: argparse.Namespace) -> tuple[Policy, tuple[Row, ...]]:
    policy = load_policy(args.policy)
    rows = resolve_rows(
        policy,
        patterns=args.rows,
        platform=args.platform,
        pr=args.pr,
        offered=_load_offered(args.offered),
    )
    return policy, rows


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
    policy, rows = _rows_from_args(args)
    if args.json:
        print(json.dumps(plan_json(policy, rows), indent=2, sort_keys=True))
    else:
        print(render_plan(rows))
    return 0


def cmd_matrix(args: argparse.Namespace) -> int:
    _, rows = _rows_from_args(args)
    text = json.dumps(github_matrix(rows), sort_keys=True)
    if args.output:
        try:
            Path(args.output).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            raise InputError(f"--output {args.output}: cannot write: {exc.strerror}") from None
        print(f"wrote the matrix of {len(rows)} rows to {args.output}", file=sys.stderr)
    else:
        print(text)
    return 0


def cmd_smoke(args: argparse.Namespace) -> int:
    from release.build.python import find_python
    from release.records import row_matches_wheel, the_wheel
    from release.smoke.run import smoke_wheel, write_record

    policy, rows = _rows_from_args(args)
    if args.wheel and len(rows) != 1:
        raise InputError(f"--wheel needs exactly one row, but the selection has {len(rows)}")
    failed = 0
    for row in rows:
        wheel = Path(args.wheel) if args.wheel else the_wheel(Path(args.dist), row, "smoke")
        if not wheel.is_file():
            raise InputError(f"{wheel}: no such wheel")
        if not row_matches_wheel(row, wheel.name):
            raise InputError(
                f"{wheel.name} is not a wheel of row {row.id} (expected local label "
                f"{row.local_version or 'none'}, tag {row.python_tag}, platform *_{row.platform})"
            )
        outcome = smoke_wheel(
            row,
            policy.project,
            wheel,
            find_python(row.python, env=os.environ).path,
            index_url=args.index_url,
            extra_index_urls=args.extra_index_url,
        )
        record = write_record(wheel, row, outcome)
        print(f"{'PASS' if outcome.passed else 'FAIL'} smoke {row.id}: {wheel.name}")
        for line in outcome.lines:
            print(f"  {line}")
        print(f"  record: {record}")
        failed += not outcome.passed
    return 1 if failed else 0


def cmd_publish(args: argparse.Namespace) -> int:
    from release.publish.rows import publish_rows

    policy, rows = _rows_from_args(args)
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
    from release.build.run import build_row
    from release.core.machine import default_cache_dir

    policy, rows = _rows_from_args(args)
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


def cmd_release(args: argparse.Namespace) -> int:
    from release.pipeline import git_dirty, left_out_lines, render_summary, run_release
    from release.publish.rows import publish_rows

    policy, rows = _rows_from_args(args)
    target = args.target or ("rehearsal" if args.rehearsal else None)
    if target is None:
        raise InputError(
            "name the target: --target production (whole release) or --rehearsal (a local index)"
        )
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
    if not policy.target(target).rehearsal and len(rows) != len(expand(policy)):
        raise InputError(
            f"target {target!r} is not a rehearsal target: it takes only the whole release "
            f"({len(expand(policy))} rows), not a selection of {len(rows)}; use --rehearsal for a part"
        )
    if args.rehearsal and args.target and not policy.target(args.target).rehearsal:
        raise InputError(f"--rehearsal publishes only to a rehearsal target; {args.target!r} is not one")
    dirty = [] if args.allow_dirty else git_dirty(Path(policy.path).resolve().parent)
    if dirty:
        shown = ", ".join(dirty[:5]) + (" ..." if len(dirty) > 5 else "")
        raise InputError(
            f"the working tree has uncommitted changes ({shown}); a release is built from committed "
            "sources only. Commit or stash them (or pass --allow-dirty for a local experiment)."
        )
    from release.core.machine import default_cache_dir

    reports, install, published = run_release(
        policy,
        rows,
        rehearsal=args.rehearsal,
        target_name=target,
        dist=Path(args.dist),
        cache_dir=default_cache_dir(os.environ),
        host=host_platform(),
        backend=args.backend,
        publish=not args.no_publish,
    )
    print(render_summary(reports))
    out = left_out_lines(reports)
    if out:
        print(f"\n{sum(r.left_out for r in reports)} row(s) not built on this machine:")
        print("\n".join(out))
    failed = [r for r in reports if r.failed]
    if install:
        print(
            "\nPublished to the target's indexes. Try it (pip picks the CUDA wheel with either index order):"
        )
        print("\n".join(f"  {line}" for line in install))
    if failed:
        what = "the published release does not install as it should" if published else "nothing was published"
        print(f"\nFAILED: {len(failed)} row(s) failed; {what}.")
        return 1
    if not published:
        print("\nNothing was published (--no-publish).")
    return 0


def cmd_channels(args: argparse.Namespace) -> int:
    from release.publish.channels import check_rows

    policy, rows = _rows_from_args(args)
    findings = check_rows(policy, rows)
    if not policy.dependencies:
        print(f"{policy.path} routes no dependency to a channel ([[dependency]]); nothing to check")
    for f in findings:
        print(f"✓ {f.package} for {f.platform}: {len(f.usable)} usable file(s) on {f.index_url}")
    return 0


def cmd_audit(args: argparse.Namespace) -> int:
    """Wheels given as files are audited as they are; a row id or glob (what the nox
    sessions pass) means that row's wheel in --dist."""
    from release.audit.cli import cmd_audit as audit_files
    from release.records import the_wheel

    resolved: list[str] = []
    policy: Policy | None = None
    for item in args.wheels:
        if item.endswith(".whl") or Path(item).exists():
            resolved.append(item)
            continue
        policy = policy or load_policy(args.policy)
        for row in select(policy, expand(policy), patterns=(item,)):
            resolved.append(str(the_wheel(Path(args.dist), row, "audit")))
    args.wheels = resolved
    code: int = audit_files(args)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m release",
        description="wheelwright: build, audit, smoke-test and publish every row of a CUDA wheel "
        "release policy (rows.toml), all or nothing.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 tool missing, 4 a step failed.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser(
        "plan", help="show the rows the policy expands to", description="Show the rows rows.toml expands to."
    )
    _add_selection(p)
    p.add_argument("--json", action="store_true", help=f"versioned JSON (version {PLAN_JSON_VERSION})")
    p.set_defaults(func=cmd_plan)

    p = sub.add_parser("matrix", help="GitHub Actions matrix JSON for the selected rows")
    _add_selection(p)
    p.add_argument("--output", metavar="FILE", help="write the JSON here instead of stdout")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser(
        "smoke",
        help="install each row's wheel in a fresh venv, import it, run its check",
        description="Install the row's wheel (and its dependencies) in a fresh venv of the row's Python "
        "with this machine's pip configuration ignored, import it, prove which libcudart was loaded, "
        "and run the project's check computation on the GPU (skipped, and said so, when there is none).",
    )
    _add_selection(p)
    p.add_argument("--dist", default="dist", help="where built wheels are (default: %(default)s)")
    p.add_argument("--wheel", help="smoke this wheel file instead of the row's wheel in --dist")
    p.add_argument("--index-url", help="pip --index-url for the dependencies (default: pip's default index)")
    p.add_argument(
        "--extra-index-url", action="append", default=[], help="pip --extra-index-url (repeatable)"
    )
    p.set_defaults(func=cmd_smoke)

    p = sub.add_parser(
        "publish",
        help="upload audited wheels to a target's per-variant indexes",
        description="Upload the selected rows' wheels from dist/ to the target's indexes. Only wheels whose "
        "audit record matches their sha256 and the current policy are uploaded; everything is checked "
        "(every variant, the index's current contents) before the first upload. A non-rehearsal target "
        "takes only the whole release, audited and smoke-tested. Files already on the index with the same "
        "sha256 are skipped, so an interrupted publish completes when run again.",
    )
    _add_selection(p)
    p.add_argument(
        "--target", default="rehearsal", help="a [target.NAME] of the policy (default: %(default)s)"
    )
    p.add_argument("--dist", default="dist", help="where built wheels are (default: %(default)s)")
    p.add_argument("--check-only", action="store_true", help="run every guard, upload nothing")
    p.set_defaults(func=cmd_publish)

    p = sub.add_parser(
        "release",
        help="build, audit, smoke-test and publish every selected row, all or nothing",
        description="Build every selected row, audit each wheel against its row, smoke-test it in a fresh "
        "venv, and publish only if every row passed every step. With --rehearsal: the rows this machine "
        "can build (others are listed with the reason), published to a local index started under "
        ".wheelwright/index. Refuses to start on a dirty working tree.",
    )
    _add_selection(p)
    p.add_argument(
        "--rehearsal",
        action="store_true",
        help="release what this machine can build to the local rehearsal index",
    )
    p.add_argument("--target", help="a [target.NAME] (default with --rehearsal: rehearsal)")
    p.add_argument("--dist", default="dist", help="where wheels go (default: %(default)s)")
    p.add_argument(
        "--backend",
        choices=("auto", "host", "container"),
        default="auto",
        help="build backend (default: %(default)s)",
    )
    p.add_argument(
        "--allow-dirty", action="store_true", help="build from a working tree with uncommitted changes"
    )
    p.add_argument("--no-publish", action="store_true", help="stop after the smoke step")
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
    p.set_defaults(func=cmd_release)

    p = sub.add_parser(
        "channels",
        help="check that every [[dependency]] channel publishes for the selected rows",
        description="Ask each dependency's channel (simple index) which wheels it publishes, and fail "
        "naming every dependency a row would take from a channel with nothing for its arch.",
    )
    _add_selection(p)
    p.set_defaults(func=cmd_channels)

    p = sub.add_parser(
        "build",
        help="build the selected rows' wheels into dist/<variant>/",
        description="Build each selected row exactly as its row says: the row's Python, a CUDA toolchain of "
        "the row's exact version, TORCH_CUDA_ARCH_LIST and CMAKE_CUDA_ARCHITECTURES from the row, then "
        "auditwheel repair excluding every CUDA library. --backend container runs cibuildwheel in the row's "
        "manylinux CUDA image (CI); host builds here with the same environment and repair. A failed build "
        "leaves nothing in dist/.",
    )
    _add_selection(p)
    p.add_argument("--dist", default="dist", help="where wheels go (default: %(default)s)")
    p.add_argument(
        "--backend",
        choices=("auto", "host", "container"),
        default="auto",
        help="auto: a container engine if one works, else the host (default: %(default)s)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the build plan (environment, commands) and build nothing",
    )
    p.set_defaults(func=cmd_build)

    from release.audit.cli import add_audit_parser

    p = add_audit_parser(sub)
    p.add_argument(
        "--dist", default="dist", help="where row wheels are, for ROW arguments (default: %(default)s)"
    )
    p.set_defaults(func=cmd_audit)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.func(args)
    except WheelwrightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.return_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
