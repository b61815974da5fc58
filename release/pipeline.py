"""``python -m release release``: plan -> build -> audit -> smoke -> publish, all or nothing.

Every row runs every step it can; a row that fails any step stops the publish (nothing is
uploaded) but the other rows still run, so one report shows every problem. A rehearsal
releases the rows this machine can build (host CPU arch; trains with a toolchain here) to
a local index it starts, and says for every other row why it was left out.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from release.core.errors import CheckFailed, InputError, ToolError, WheelwrightError
from release.core.proc import run
from release.policy.matrix import Row
from release.policy.model import Policy

STEPS = ("build", "audit", "smoke", "publish")


@dataclasses.dataclass
class RowReport:
    row: Row
    wheel: Path | None = None
    status: dict[str, str] = dataclasses.field(default_factory=dict)  # step -> ok | FAIL: ... | skipped: ...
    seconds: float = 0.0
    reason: str | None = None  # why this machine cannot build the row

    @property
    def failed(self) -> bool:
        return any(v.startswith("FAIL") for v in self.status.values())

    @property
    def left_out(self) -> bool:
        return self.reason is not None


def git_dirty(repo: Path) -> list[str]:
    """Changed or untracked files (ignored ones are fine: dist/, .venv/, .wheelwright/)."""
    result = run(["git", "status", "--porcelain"], cwd=repo, check=False)
    if result.returncode != 0:
        raise ToolError(f"cannot read the git status of {repo}: {result.stderr.strip()}")
    return [line[3:] for line in result.stdout.splitlines() if line.strip()]


def buildable_here(row: Row, host: str, env: Mapping[str, str], cache_dir: Path) -> str | None:
    """None when this machine can build the row, else the reason it cannot (said, not hidden)."""
    from release.build.toolchain import resolve_toolchain

    if row.platform != host:
        return f"this machine is {host}; {row.platform} rows build on {row.platform} runners"
    from release.build.python import find_python

    try:
        find_python(row.python, env=env)
        if row.is_cuda:
            resolve_toolchain(row, env=env, cache_dir=cache_dir, install=False)
    except ToolError as exc:
        return str(exc)
    return None


def _say(message: str) -> None:
    print(f"==> {message}", file=sys.stderr, flush=True)


def _guard(report: RowReport, step: str, action: Callable[[], str]) -> bool:
    try:
        report.status[step] = action()
        return True
    except WheelwrightError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        report.status[step] = f"FAIL: {first}"
        _say(f"[{report.row.id}] {step} FAILED: {exc}")
        return False
    except Exception as exc:  # a bug or an unexpected environment: fail the row, keep the report
        report.status[step] = f"FAIL: internal error {type(exc).__name__}: {exc}"
        _say(f"[{report.row.id}] {step} FAILED with an unexpected {type(exc).__name__}: {exc}")
        return False


def run_release(
    policy: Policy,
    rows: Sequence[Row],
    *,
    rehearsal: bool,
    target_name: str,
    dist: Path,
    cache_dir: Path,
    host: str,
    backend: Literal["auto", "host", "container"] = "auto",
    env: Mapping[str, str] | None = None,
    publish: bool = True,
) -> tuple[list[RowReport], list[str], bool]:
    """Run every step for every row; publish only when every row passed every step.

    Returns the per-row reports, the install lines for the published variants, and whether
    anything was published.
    """
    from release.audit.model import Expectation
    from release.audit.record import write_record as write_audit
    from release.audit.run import audit_wheel
    from release.build.python import find_python
    from release.build.run import build_row
    from release.publish.rows import policy_sha256, publish_rows
    from release.smoke.run import smoke_wheel
    from release.smoke.run import write_record as write_smoke

    env = dict(os.environ if env is None else env)
    psha = policy_sha256(policy)
    target = policy.target(target_name)
    reports = [RowReport(r) for r in rows]
    todo: list[RowReport] = []
    for rep in reports:
        reason = buildable_here(rep.row, host, env, cache_dir) if rehearsal else None
        if reason:
            rep.status = {s: "-" for s in STEPS}
            rep.status["build"] = "not built here"
            rep.reason = reason
        else:
            todo.append(rep)
    if not todo:
        raise CheckFailed("no row of the selection can be built here; nothing to release")
    _say(f"release: {len(todo)} row(s) to build, audit and smoke-test; {len(reports) - len(todo)} left out")
    if policy.dependencies:
        from release.publish.channels import check_rows

        _say("checking dependency channels before building")
        check_rows(policy, [r.row for r in todo])  # CheckFailed names the dependency and the arch

    for n, rep in enumerate(todo, 1):
        row = rep.row
        start = time.monotonic()
        _say(f"[{n}/{len(todo)}] {row.id}")

        def build(row: Row = row, rep: RowReport = rep) -> str:
            records = build_row(
                row, policy_path=policy.path, dist_dir=dist, cache_dir=cache_dir, backend=backend, env=env
            )
            rep.wheel = records[0].wheel
            return "ok"

        def audit(row: Row = row, rep: RowReport = rep) -> str:
            assert rep.wheel is not None
            limit = None if target.local_server else target.indexes[row.variant].max_wheel_mib
            exp = dataclasses.replace(Expectation.from_row(row, max_wheel_mib=limit), policy_sha256=psha)
            result = audit_wheel(rep.wheel, exp, cache_dir=cache_dir)
            write_audit(result)
            if not result.passed:
                raise CheckFailed("; ".join(f.message for f in result.failures[:3]))
            return "ok"

        def smoke(row: Row = row, rep: RowReport = rep) -> str:
            assert rep.wheel is not None
            python = find_python(row.python, env=env).path
            from release.publish.channels import rules_for

            channels = sorted({r.index_url for r in rules_for(policy, row) if r.index_url != "pypi"})
            outcome = smoke_wheel(row, policy.project, rep.wheel, python, extra_index_urls=channels, env=env)
            write_smoke(rep.wheel, row, outcome)
            if not outcome.passed:
                raise CheckFailed(next(line for line in outcome.lines if line.startswith("✗")))
            return "ok (no GPU: run skipped)" if not outcome.executed and row.is_cuda else "ok"

        for step, action in (("build", build), ("audit", audit), ("smoke", smoke)):
            if not _guard(rep, step, action):
                for later in STEPS[STEPS.index(step) + 1 :]:
                    rep.status.setdefault(later, "-")
                break
        rep.seconds = time.monotonic() - start

    failed = [r for r in todo if r.failed]
    install: list[str] = []
    if failed:
        for rep in todo:
            rep.status["publish"] = "not published"
        _say(f"{len(failed)} row(s) failed: nothing was published")
        return reports, install, False
    if not publish:
        for rep in todo:
            rep.status["publish"] = "skipped (--no-publish)"
        return reports, install, False
    built_rows = [r.row for r in todo]
    try:
        published = publish_rows(
            policy, built_rows, target_name=target_name, dist=dist, env=env, fresh_local_index=rehearsal
        )  # on failure it names the variants already published and how to complete
    except WheelwrightError as exc:
        for rep in todo:
            rep.status["publish"] = f"FAIL: {str(exc).splitlines()[0]}"
        _say(f"publish FAILED: {exc}")
        return reports, install, False
    by_variant = {p.variant: p for p in published}
    for rep in todo:
        p = by_variant.get(rep.row.variant)
        name = rep.wheel.name if rep.wheel else ""
        rep.status["publish"] = (
            "uploaded"
            if p and name in p.uploaded
            else "already there"
            if p and name in p.skipped
            else "FAIL: not on the index"
        )
    from release.publish.rows import install_line
    from release.smoke.evaluate import check_resolution
    from release.smoke.run import resolved_wheel

    default = by_variant.get("cpu")
    for variant, p in sorted(by_variant.items()):
        install.append(f"{variant}: " + install_line(policy.project.name, p.index, cuda=variant != "cpu"))
        if variant == "cpu" or default is None:
            continue
        # What would a user get? The CUDA index plus the default index, in both orders.
        rep = max((r for r in todo if r.row.variant == variant), key=lambda r: r.row.python_tag)
        python = find_python(rep.row.python, env=env).path
        for index_url, extra in ((p.index, default.index), (default.index, p.index)):
            chosen = resolved_wheel(
                python, policy.project.name, index_url=index_url, extra_index_urls=[extra]
            )
            problem = check_resolution(rep.row, chosen)
            if problem:
                rep.status["publish"] = f"FAIL: {problem}"
                install.append(f"   ✗ --index-url {index_url} --extra-index-url {extra}: {problem}")
            else:
                install.append(f"   ✓ --index-url {index_url} --extra-index-url {extra}: pip picks {chosen}")
    return reports, install, True


def render_summary(reports: Sequence[RowReport]) -> str:
    header = ["row", "wheel", "size", *STEPS, "time"]
    lines = []
    for rep in reports:
        size = f"{rep.wheel.stat().st_size / 1024:.0f} KiB" if rep.wheel and rep.wheel.exists() else "-"
        lines.append(
            [
                rep.row.id,
                rep.wheel.name if rep.wheel else "-",
                size,
                *(rep.status.get(s, "-") for s in STEPS),
                f"{rep.seconds:.1f} s" if rep.seconds else "-",
            ]
        )
    clip = 60
    cells = [[c if len(c) <= clip else c[: clip - 3] + "..." for c in line] for line in [header, *lines]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(header))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def left_out_lines(reports: Sequence[RowReport]) -> list[str]:
    """One entry per distinct reason, naming every row it applies to."""
    groups: dict[str, list[RowReport]] = {}
    for r in reports:
        if r.reason is not None:
            groups.setdefault(r.reason.replace(r.row.id, "{row}"), []).append(r)
    lines: list[str] = []
    for members in groups.values():
        lines.append(f"  {', '.join(m.row.id for m in members)}:")
        lines += [f"      {line}" for line in (members[0].reason or "").splitlines()]
    return lines


__all__ = ["InputError", "RowReport", "git_dirty", "render_summary", "run_release"]
