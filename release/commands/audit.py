"""``python -m release audit WHEEL... [--row ID | --variant VARIANT --gpu-archs LIST]``.

Without ``--row`` or ``--variant`` each wheel is audited against the row its file name
claims (:func:`release.records.row_matches_wheel`). A file is audited as it is (a third
party's wheel has no build record); a ROW argument means that row's wheel in ``--dist``,
and its build record must match it (the record chain, exit 1 when it does not). Exit codes: 0 every wheel
passed, 1 some wheel has failing findings, 2 bad input (unreadable wheel, unknown
row, malformed arch list), 3 a tool missing (gcc/g++ for the C++ consumer check); with ``--json`` every error, the command's own too (a missing
policy, a claim that does not parse), is in the document's ``errors`` as well as on stderr.
Wheel files with no claim and no rows.toml in this folder, and another project's wheel files
under the rows.toml of this folder (its distribution name is not the policy's project), are
audited standalone with the checks that need no claim
(:func:`release.audit.claim.unclaimed_expectation`): a partial audit, the survey's verdict.
A record ``<wheel>.audit.json`` and a page ``<wheel>.audit.html`` (the GPU support grid, the
findings, the inventory) are written beside each wheel in ``--dist`` audited against a row of a
policy unless ``--no-record``; a wheel elsewhere (a download folder) and a standalone audit (a
claim given on the command line, or none) get nothing written beside them unless ``--record``. Under GitHub Actions each failing finding is also an ``::error``
annotation (title: the check) and each CUDA wheel's GPU support table goes to the job summary.
"""

from __future__ import annotations

import argparse
import difflib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from release.audit.claim import CLAIM_HINT, NO_CLAIM_CHECKS, row_expectation, unclaimed, unclaimed_expectation
from release.audit.model import AuditResult, Expectation
from release.audit.options import (
    add_claim_options,
    fixed_expectation,
    in_dist,
    is_wheel_argument,
    row_options,
    stranger,
)
from release.audit.report.render import render_gpu_markdown, render_json, render_text
from release.audit.step import audit_step, require_built
from release.core import log
from release.core.errors import CheckFailed, InputError, WheelwrightError
from release.policy.load import DEFAULT_POLICY
from release.policy.model import Policy

if TYPE_CHECKING:
    from release.policy.matrix import Row

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``audit`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "audit",
        help="audit wheels: a wheel ships only if it matches the row it claims",
        description="Audit wheels against their rows: device code per library and per translation "
        "unit, declared CUDA packages, RPATH/RUNPATH, RECORD, platform tag (auditwheel), C++ SDK. "
        "Exit 0 all passed, 1 findings, 2 bad input, 3 a tool missing (gcc/g++ for cpp_consumer: --checks "
        "runs the others).",
    )
    p.add_argument(  # "*": a missing WHEEL is the command's InputError, in the JSON document too
        "wheels",
        nargs="*",
        metavar="WHEEL",
        help="wheel files to audit as they are, or row ids/globs: that row's wheel in --dist, "
        "which needs its build record",
    )
    p.add_argument(
        "--row", metavar="ID", help="audit against this row (default: the row each file name claims)"
    )
    p.add_argument(
        "--variant",
        metavar="VARIANT",
        help="audit against a variant (cpu, cu130, ...) instead of a row: for wheels not built from this "
        "policy (not with --row)",
    )
    p.add_argument(
        "--gpu-archs",
        metavar="LIST",
        help="the GPU architectures the wheel claims, a claim of its own (no --variant needed): "
        '"7.5;8.0;12.0+PTX", PTX only as "compute_90", a/f variants as "9.0a"/"10.0f", one list '
        'per library as "libfoo.so=8.0;9.0+PTX" (a CUDA wheel without a claim fails device_code: there '
        "is nothing to hold its device code to; with no claim and no policy at all, only the checks "
        f"that need no claim run: {', '.join(NO_CLAIM_CHECKS)})",
    )
    add_claim_options(p)
    p.add_argument(  # None: rows.toml in this folder when there is one (a wheel file needs none)
        "--policy",
        default=os.environ.get("WHEELWRIGHT_POLICY") or None,
        help=f"policy file (default: $WHEELWRIGHT_POLICY, else {DEFAULT_POLICY} in this folder, if any)",
    )
    p.add_argument("--json", action="store_true", help='versioned JSON ({"version": 1, ...}) on stdout')
    p.add_argument("--gpu-markdown", action="store_true", help="print the GPU support tables as markdown")
    p.add_argument(
        "--cross-check",
        action="store_true",
        help="also list each library's device code with cuobjdump and compare (slow on big libraries)",
    )
    p.add_argument(
        "--no-cache",
        action="store_true",
        help="run the C++ consumer check's compiler even where the cache holds its finding for the same "
        "headers, libraries, compiler and CUDA headers (kept in the wheelwright cache's cpp-consumer folder; "
        "WHEELWRIGHT_CPP_CACHE=0 turns the cache off everywhere)",
    )
    written = p.add_mutually_exclusive_group()
    written.add_argument(
        "--no-record",
        action="store_true",
        help="do not write <wheel>.audit.json and <wheel>.audit.html beside the wheel (an audit against a "
        "row of a policy writes them by default for a wheel in --dist)",
    )
    written.add_argument(
        "--record",
        action="store_true",
        help="write them for a standalone audit too (a claim given here, no policy row) and for a wheel "
        "outside --dist, which by default get nothing written beside them, as auditwheel show writes nothing",
    )
    p.add_argument(
        "--dist", default="dist", help="where row wheels are, for ROW arguments (default: %(default)s)"
    )
    p.set_defaults(func=run)
    return p


def _policy(path: str, *, required: bool) -> tuple[Policy | None, str | None]:
    from release import records  # the record store: only for rows and policies

    if not required and path == DEFAULT_POLICY and not Path(path).is_file():
        return None, None
    from release.policy.load import load_policy

    policy = load_policy(path)
    return policy, records.policy_sha256(policy)


def _row(rows: tuple[Row, ...], row_id: str, policy: Policy) -> Row:
    for row in rows:
        if row.id == row_id:
            return row
    close = difflib.get_close_matches(row_id, [r.id for r in rows], n=1)
    plan = "python -m release plan" + (f" --policy {policy.path}" if policy.path != DEFAULT_POLICY else "")
    hint = f"; did you mean {close[0]!r}?" if close else f"; `{plan}` lists the row ids"
    raise InputError(f"{policy.path} has no row {row_id!r}{hint}")


def _no_policy(args: argparse.Namespace) -> InputError:
    """What a row id or ``--row`` says when there is no rows.toml here, and how to audit without one."""
    what = (
        f"--row {args.row}: a row"
        if args.row is not None
        else f"{next((w for w in args.wheels if not is_wheel_argument(w)), '')!r} is not a wheel file; a row id"
    )
    return InputError(
        f"{what} is read from the policy, and there is no {DEFAULT_POLICY} in this folder: pass --policy "
        f"PATH or run from the repo root. A wheel file needs no policy: give its path, and to judge its "
        f"device code a claim: {CLAIM_HINT}"
    )


def _fixed_expectation(args: argparse.Namespace) -> tuple[Expectation | None, Policy | None, str | None]:
    if not args.wheels:
        raise InputError("name at least one wheel file (or, with a policy, a row id)")
    fixed = fixed_expectation(args, lambda path, required: _policy(path, required=required), DEFAULT_POLICY)
    if fixed[0] is not None:
        return fixed
    if args.policy is None and not Path(DEFAULT_POLICY).is_file():
        raise _no_policy(args)
    policy, digest = _policy(args.policy or DEFAULT_POLICY, required=True)
    assert policy is not None
    if args.row is not None:
        from release.coverage.take import take_lists  # a "take" row: held to the list its build took
        from release.policy.matrix import expand

        (row,) = take_lists(policy, (_row(expand(policy), args.row, policy),), env=os.environ)
        return row_options(row_expectation(row, policy_sha256=digest), args), policy, digest
    return None, policy, digest


def _wheels(args: argparse.Namespace, policy: Policy | None) -> list[str]:
    """The wheels to audit. A file is audited as it is: a third party's wheel has no build
    record. A row id or glob (what the nox sessions pass) means that row's wheel in ``--dist``,
    and its build record must be there, bound to the wheel's sha256, the row and this policy."""
    wheels: list[str] = []
    problems: list[str] = []
    for item in args.wheels:
        if is_wheel_argument(item):
            wheels.append(item)
            continue
        from release import records  # the record store: only for rows and policies
        from release.policy.load import load_policy
        from release.policy.matrix import expand, select

        policy = policy or load_policy(args.policy or DEFAULT_POLICY)
        for row in select(policy, expand(policy), patterns=(item,)):
            wheel = records.the_wheel(Path(args.dist), row, "audit", policy_path=policy.path)
            try:
                require_built(wheel, row_id=row.id, policy_sha256=records.policy_sha256(policy))
            except CheckFailed as exc:
                problems.append(str(exc))
            wheels.append(str(wheel))
    if problems:
        raise CheckFailed("\n".join(problems))
    return wheels


def _standalone(args: argparse.Namespace, wheel: str, policy: Policy) -> Expectation:
    """A stranger's wheel with no claim given: the survey's audit, as from a folder with no policy."""
    log.warn(
        f"note: {Path(wheel).name} is not {policy.project.name}'s (the project of {policy.path}): it is "
        f"audited standalone with the checks that need no claim ({', '.join(NO_CLAIM_CHECKS)}), a partial "
        f"audit that writes no record unless --record; to judge its device code: {CLAIM_HINT}"
    )
    return unclaimed_expectation(driver=args.driver, checks=args.checks, allow=args.allow)


def _summary(result: AuditResult) -> None:
    """Under GitHub Actions: each CUDA wheel's GPU table in the job summary (the step annotated its failures)."""
    if log.github() and result.expectation.is_cuda:
        verdict = "passed" if result.passed else f"FAILED ({', '.join(result.failed_checks())})"
        log.job_summary(f"### audit of `{result.wheel}`: {verdict}\n\n{render_gpu_markdown(result)}")


def _error(wheel: str | None, exc: WheelwrightError) -> dict[str, Any]:
    """An entry of the JSON document's ``errors``: a wheel's, or the command's (``wheel`` null)."""
    return {"wheel": wheel, "error": str(exc), "exit_code": exc.return_code}


def run(args: argparse.Namespace) -> int:
    """Audit every wheel. An error of the command itself (bad input before any wheel, a tool missing)
    still prints the JSON document with ``--json``, then goes to :func:`release.cli.main` (stderr, its
    exit code)."""
    results: list[AuditResult] = []
    errors: list[dict[str, Any]] = []
    try:
        return _audit(args, results, errors)
    except WheelwrightError as exc:
        if args.json:
            print(render_json(results, [*errors, _error(None, exc)]))
        raise


def _audit(args: argparse.Namespace, results: list[AuditResult], errors: list[dict[str, Any]]) -> int:
    fixed, policy, digest = _fixed_expectation(args)
    args.wheels = _wheels(args, policy)
    if fixed is not None and unclaimed(fixed):
        log.warn(
            f"note: no claim and no {DEFAULT_POLICY} here: each wheel is audited standalone with the checks "
            f"that need no claim ({', '.join(fixed.checks or NO_CLAIM_CHECKS)}), a partial audit that writes no "
            f"record; its device code is reported, not judged. To judge it: {CLAIM_HINT}"
        )
    rows: tuple[Row, ...] = ()
    if fixed is None and policy is not None:
        from release.policy.matrix import expand

        rows = expand(policy)
    code = 0
    for wheel in args.wheels:
        try:
            if fixed is not None:
                expectation = fixed
            elif policy is not None and args.policy is None and stranger(wheel, policy):
                expectation = _standalone(args, wheel, policy)
            else:
                from release import records  # the record store: only for rows and policies

                row = records.row_for_wheel(Path(wheel).name, rows, policy_path=policy.path if policy else "")
                if policy is not None:  # a "take" row: held to the list its build took
                    from release.coverage.take import take_lists

                    row = take_lists(policy, (row,), env=os.environ)[0]
                expectation = row_options(row_expectation(row, policy_sha256=digest), args)
            audited = audit_step(
                wheel,
                expectation,
                # bound to a policy (a row) and in its dist: the record publish trusts; else nothing unless asked
                record=args.record
                or (
                    expectation.policy_sha256 is not None and not args.no_record and in_dist(wheel, args.dist)
                ),
                cross_check=args.cross_check,
                remember=False if args.no_cache else None,
            )
        except InputError as exc:
            errors.append(_error(Path(wheel).name, exc))
            log.warn(f"error: {exc}")
            code = max(code, exc.return_code)
            continue
        result = audited.result
        results.append(result)
        _summary(result)
        if not result.passed:
            code = max(code, 1)
        if args.gpu_markdown:
            print(render_gpu_markdown(result))
        elif not args.json:
            print(render_text(result))
            if audited.record is not None:
                print(f"  record: {audited.record}\n  report: {audited.page}")
            print()
    if args.json:
        print(render_json(results, errors))
    return code
