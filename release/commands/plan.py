"""``python -m release plan [--json]``: show the rows the policy (rows.toml) expands to, as a table
or as versioned JSON (:data:`PLAN_JSON_VERSION`)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from release.commands.options import row_command, rows_from_args
from release.core import log

if TYPE_CHECKING:  # the policy modules are imported by the commands that read a policy
    from release.coverage.jetson import JetsonDecision
    from release.coverage.run import CoverageReport
    from release.policy.matrix import Row
    from release.policy.model import Policy

__all__ = ["PLAN_JSON_VERSION", "add_parser", "plan_json", "render_plan", "run"]

PLAN_JSON_VERSION = 1


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
    out.append(f"{len(rows)} row{'s' if len(rows) != 1 else ''}: {n_cuda} CUDA, {len(rows) - n_cuda} CPU")
    out += [f"{r.id}: gpu archs taken from {r.gpu_archs_source}" for r in rows if r.gpu_archs_source]
    return "\n".join(line.rstrip() for line in out)


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``plan`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = row_command(
        subparsers,
        "plan",
        run,
        help="show the rows the policy expands to",
        description="Show the rows rows.toml expands to.",
    )
    p.add_argument("--json", action="store_true", help=f"versioned JSON (version {PLAN_JSON_VERSION})")
    p.add_argument(
        "--coverage",
        action="store_true",
        help="add the coverage section (python -m release coverage): always there when a [[dependency]] "
        "says gpu_coverage = 'fail' or 'take'",
    )
    from release.commands.coverage import add_coverage_options

    add_coverage_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    policy, rows = rows_from_args(args)
    for note in policy.notes:
        log.info(f"note: {note}")
    coverage = _coverage(args, policy, rows)
    if coverage is not None:  # a "take" row shows, and plans, the list it builds (release.coverage.take)
        from release.coverage.run import with_taken_lists

        rows = with_taken_lists(rows, coverage)
    jetsons = _undecided_jetsons(policy) if coverage is None else []
    if args.json:
        data = plan_json(policy, rows)
        if coverage is not None:
            data["coverage"] = coverage.to_json()
        if policy.jetsons:
            data["jetson_rows"] = [j.to_json() for j in (coverage.jetsons if coverage else jetsons)]
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(render_plan(rows))
        if coverage is not None:
            from release.coverage.render import render

            print("\n" + render(coverage))
        elif jetsons:
            print("\nJetson rows ([[jetson]]):\n" + "\n".join(f"  {j.line()}" for j in jetsons))
    if coverage is not None:
        coverage.raise_if_failed(policy.path)
    return 0


def _undecided_jetsons(policy: Policy) -> list[JetsonDecision]:
    """The [[jetson]] rows before their dependency is read: plan --coverage decides them."""
    from release.coverage.jetson import decide

    why = "its GPU dependency's wheel decides it: plan --coverage, or python -m release coverage"
    return [decide(j, [], [why]) for j in policy.jetsons]


def _coverage(args: argparse.Namespace, policy: Policy, rows: Sequence[Row]) -> CoverageReport | None:
    """The coverage section (release.coverage): with --coverage, or where a dependency's gpu_coverage is
    'fail' or 'take' (then its wheel is read, and a row that loses GPUs fails the plan)."""
    strict = any(d.gpu_coverage != "report" for d in policy.dependencies)
    if not (args.coverage or strict):
        return None
    import os

    from release.coverage.run import cover

    return cover(policy, rows, wheelhouses=args.wheelhouse, env=os.environ, read_reported=args.coverage)
