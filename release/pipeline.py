"""``python -m release release``: plan -> build -> audit -> smoke -> publish, all or nothing.

Every row runs every step it can; a row that fails any step stops the publish (nothing is
uploaded) but the other rows still run, so one report shows every problem. A rehearsal
releases the rows this machine can build (host CPU arch; trains with a toolchain here) to
a local index it starts, and says for every other row why it was left out, one line per reason.

Rows run in parallel, ``jobs`` at a time (``--jobs``, default the machine's cores); one row's
steps run in order. The shared caches the builds write without a lock (PyPI toolchains,
patchelf) are made first, one at a time (:mod:`release.schedule`), and the first row of each variant builds before the
others of its variant start building, so they reuse its kernels instead of compiling the same
ones at once. What a step says is captured (:func:`release.core.log.capture`): one line when it
finishes, the whole log when it fails, and under GitHub Actions each row's log folded in a group,
each failing finding an ``::error`` annotation, and the summary in the job summary.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from release.core import log
from release.core.errors import CheckFailed, InputError, StepFailed, ToolError, WheelwrightError
from release.core.proc import run
from release.policy.matrix import Row
from release.policy.model import Policy
from release.policy.versions import version_key
from release.resources.cpus import is_foreign
from release.schedule import prepare_shared, run_rows
from release.summary import STEPS, failure_block, first_line, left_out_lines, row_title, step_line

if TYPE_CHECKING:
    from release.audit.model import AuditResult
    from release.smoke.resolve import InstallCase
    from release.smoke.run import Timeouts
    from release.wheelbuild.backends import BackendChoice

RELEASE_HTML = "audit.html"  # the release-wide audit page, in dist/


@dataclasses.dataclass
class RowReport:
    row: Row
    wheel: Path | None = None
    status: dict[str, str] = dataclasses.field(default_factory=dict)  # step -> ok | FAIL: ... | skipped: ...
    codes: dict[str, int] = dataclasses.field(default_factory=dict)  # step -> exit code of its failure
    seconds: float = 0.0
    reason: str | None = None  # why this machine cannot build the row
    times: dict[str, float] = dataclasses.field(default_factory=dict)  # step -> seconds
    audit: AuditResult | None = None
    log: list[str] = dataclasses.field(default_factory=list)  # what the row's steps said

    @property
    def failed(self) -> bool:
        return any(v.startswith("FAIL") for v in self.status.values())

    @property
    def left_out(self) -> bool:
        return self.reason is not None


@dataclasses.dataclass(frozen=True)
class ReleaseOutcome:
    reports: list[RowReport]
    install: list[str]  # the install lines of each published variant, with their checks
    published: bool
    html: Path | None  # the release-wide audit page


def git_dirty(repo: Path) -> list[str]:
    """Changed or untracked files (ignored ones are fine: dist/, .venv/, .wheelwright/)."""
    result = run(["git", "status", "--porcelain"], cwd=repo, check=False, timeout=60)
    if result.returncode != 0:
        said = result.stderr.strip()
        if "not a git repository" in said:  # not a tool missing: a release is built from committed sources
            raise InputError(
                f"{repo} is not in a git repository: a release is built from committed sources, so that what "
                "was released can be named and rebuilt. Commit the project to git, or pass --allow-dirty for "
                "a local experiment"
            )
        raise ToolError(
            f"cannot read the git status of {repo}: {said}; or pass --allow-dirty for a local experiment"
        )
    return [line[3:] for line in result.stdout.splitlines() if line.strip()]


def buildable_here(row: Row, host: str, env: Mapping[str, str], cache_dir: Path) -> str | None:
    """None when this machine can build the row, else the reason it cannot (said, not hidden)."""
    from release.core.machine import find_python
    from release.route import gather_facts, route
    from release.smoke.run import smoke_pythons
    from release.wheelbuild.host.cross import cross_problem
    from release.wheelbuild.toolchain import resolve_toolchain

    facts = gather_facts([(row.platform, v) for v in row.pythons], host=host)
    here = route(row.platform, "host", facts, row.pythons)
    if here.cross:
        problem = cross_problem(row, env)
        if problem is not None:
            return (
                f"this machine is {host}; {problem}; or build {row.platform} rows on {row.platform} runners"
            )
    if here.smoke == "cannot":
        # the build cross-compiles here, the audit judges with the row's arch's tools, and the
        # smoke step runs the row's Pythons under emulation: each must have a recipe here
        return f"this machine is {host}; {row.platform} rows build here, but cannot be smoke-tested: {here.smoke_reason}"
    try:
        find_python(row.python, env=env)  # the build's (a cross build's too: it runs on this machine)
        if here.smoke == "native":
            smoke_pythons(row, env)  # each the smoke step tests the wheel with (emulated: checked above)
        if row.is_cuda:
            resolve_toolchain(row, env=env, cache_dir=cache_dir, install=False)
    except ToolError as exc:
        return str(exc)
    return None


def emulation_notes(rows: Sequence[Row], host: str) -> list[str]:
    """One line per foreign CPU arch among ``rows``: how its rows are built and tested on this
    machine, and what that costs (said once, never hidden). Pure."""
    lines = []
    for arch in sorted({r.platform for r in rows if is_foreign(r.platform, host)}):
        count = sum(r.platform == arch for r in rows)
        lines.append(
            f"==> {count} {arch} row(s) on this {host} machine: cross-compiled ({host} compilers for {arch}), "
            f"audited with {arch} tools, smoke-tested in a fresh venv of an emulated {arch} CPython (qemu-user: "
            f"a smoke takes about 2-3x a native one); an {arch} runner needs none of this"
        )
    return lines


def _fail(report: RowReport, step: str, why: str, code: int) -> None:
    report.status[step] = f"FAIL: {why}"
    report.codes[step] = code


def _run_step(rep: RowReport, step: str, action: Callable[[], str]) -> bool:
    """Run one step with its output captured: a line when it passes, the whole log when it fails."""
    start = time.monotonic()
    error: str | None = None
    code = StepFailed.return_code
    with log.capture() as cap:
        try:
            status = action()
        except WheelwrightError as exc:
            error, code = str(exc) or type(exc).__name__, exc.return_code
        except Exception as exc:  # a bug or an unexpected environment: fail the row, keep the report
            error = f"internal error {type(exc).__name__}: {exc}\n{traceback.format_exc().rstrip()}"
    seconds = time.monotonic() - start
    rep.times[step] = seconds
    rep.log += cap.lines
    if error is None:
        rep.status[step] = status
        log.say(rep.row.id, step_line(step, status, seconds))
        return True
    _fail(rep, step, first_line(error), code)
    log.warn(failure_block(rep.row.id, step, seconds, error, cap.lines))
    if not (step == "audit" and rep.audit is not None):  # an audit's findings are annotated one by one
        log.annotate(f"{step} failed: {rep.row.id}", error)
    return False


def exit_code(reports: Sequence[RowReport]) -> int:
    """The exit code of the first failure (rows in order, steps in order), kept from the layer
    that raised it: a build that failed is 4, an audit finding 1, a missing tool 3; 0 when none."""
    for rep in reports:
        for step in STEPS:
            if step in rep.codes:
                return rep.codes[step]
    return 0


def run_release(
    policy: Policy,
    rows: Sequence[Row],
    *,
    rehearsal: bool,
    target_name: str,
    dist: Path,
    cache_dir: Path,
    host: str,
    backend: BackendChoice = "auto",
    env: Mapping[str, str] | None = None,
    publish: bool = True,
    smoke_timeouts: Timeouts | None = None,
    jobs: int = 1,
) -> ReleaseOutcome:
    """Run every step for every row, ``jobs`` rows at a time; publish only when every row
    passed every step; then check what pip and uv pick from the published indexes."""
    from release import records
    from release.audit.claim import row_expectation
    from release.audit.report.release_page import render_release_html, run_summary
    from release.audit.step import audit_step
    from release.coverage.take import take_lists
    from release.policy.targets import DEFAULT_INDEX
    from release.publish.channels import rules_for
    from release.publish.index.client import resolve_simple_url
    from release.publish.manifest import source_commit
    from release.smoke.run import smoke_pythons, smoke_step
    from release.smoke.wheelhouse import wheelhouse_for
    from release.wheelbuild.run import build_row

    if jobs < 1:
        raise InputError(f"--jobs {jobs}: give at least 1")
    env = dict(os.environ if env is None else env)
    rows = take_lists(policy, rows, env=env)  # a "take" row's list, once: built, audited and recorded
    psha = records.policy_sha256(policy)
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
        why = "\n".join(left_out_lines(reports))
        raise CheckFailed(f"no row of the selection can be built here; nothing to release:\n{why}")
    if policy.dependencies:
        from release.publish.channels import check_rows

        log.info("==> checking dependency channels before building")
        check_rows(policy, [r.row for r in todo])  # CheckFailed names the dependency and the arch
    for line in emulation_notes([r.row for r in todo], host):
        log.info(line)
    jobs = min(jobs, len(todo))
    if jobs > 1 and not prepare_shared(
        [r.row for r in todo], policy, backend=backend, cache_dir=cache_dir, env=env
    ):
        log.info("==> a row builds in a container: rows run one at a time")
        jobs = 1
    log.info(
        f"==> release: {len(todo)} row(s) to build, audit and smoke-test, {jobs} at a time; "
        f"{len(reports) - len(todo)} left out"
    )
    built = {rep.row.variant: threading.Event() for rep in todo}

    def work(rep: RowReport, leader: bool) -> None:
        row = rep.row
        if not leader:
            built[row.variant].wait()  # its leader has built: the variant's kernels are in the cache
        start = time.monotonic()

        def build() -> str:
            made = build_row(row, policy=policy, dist_dir=dist, cache_dir=cache_dir, backend=backend, env=env)
            rep.wheel = made[0].wheel
            return "ok"

        def audit() -> str:
            assert rep.wheel is not None
            limit = None if target.local_server else target.indexes[row.variant].max_wheel_mib
            exp = row_expectation(row, policy_sha256=psha, max_wheel_mib=limit)
            audited = audit_step(rep.wheel, exp, built=(row.id, psha), cache_dir=cache_dir)
            result = rep.audit = audited.result
            if not result.passed:
                page = audited.page
                n = len(result.failures)
                raise CheckFailed(
                    f"{n} failing finding{'s' if n != 1 else ''} ({', '.join(result.failed_checks())}); "
                    f"report: {page}\n" + "\n".join(f"✗ {f.message}" for f in result.failures)
                )
            return "ok"

        def smoke() -> str:
            assert rep.wheel is not None
            pythons = smoke_pythons(row, env)
            channels = sorted(
                {
                    resolve_simple_url(r.index_url)
                    for r in rules_for(policy, row)
                    if r.index_url != DEFAULT_INDEX
                }
            )
            house = wheelhouse_for(cache_dir, row.variant, index_url=None, extra_index_urls=channels)
            outcome, _record = smoke_step(
                row, policy.project, rep.wheel, pythons, policy_sha256=psha, extra_index_urls=channels,
                env=env, timeouts=smoke_timeouts, wheelhouse=house if rehearsal else None, policy_path=policy.path,
            )  # fmt: skip
            if not outcome.passed:
                failing = [line for line in outcome.lines if not line.startswith(("✓", "- "))]
                raise CheckFailed("\n".join(failing))
            if policy.project.check is None:
                return "ok (no check: import and load only)"
            return "ok (no GPU: run skipped)" if not outcome.executed and row.is_cuda else "ok"

        try:
            for step, action in (("build", build), ("audit", audit), ("smoke", smoke)):
                ok = _run_step(rep, step, action)
                if leader and step == "build":
                    built[row.variant].set()
                if not ok:
                    for later in STEPS[STEPS.index(step) + 1 :]:
                        rep.status.setdefault(later, "-")
                    break
        finally:
            if leader:
                built[row.variant].set()  # also when the build raised: nobody waits for ever
            rep.seconds = time.monotonic() - start
        if log.github():
            log.folded(row_title(row.id, rep.status, rep.times), rep.log)

    run_rows(todo, jobs, work)

    def render(results: Sequence[AuditResult]) -> str:  # the run's summary as the terminal prints it now
        return render_release_html(
            results, title=f"Audit of the {policy.project.name} release ({target_name})", summary=run_summary(reports),
            commit=source_commit(policy.source.parent / policy.project.path, env),  # the manifest's commit
            date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        )  # fmt: skip

    html = _release_page(todo, dist, render)  # before publish too: a publish that stops leaves the page
    published, install = _publish(policy, todo, target_name=target_name, dist=dist, env=env, rehearsal=rehearsal,
                                  publish=publish, cache_dir=cache_dir, jobs=jobs)  # fmt: skip
    html = _release_page(todo, dist, render)  # again with each row's publish
    return ReleaseOutcome(reports, install, published, html)


def _release_page(
    todo: Sequence[RowReport], dist: Path, render: Callable[[Sequence[AuditResult]], str]
) -> Path | None:
    results = [r.audit for r in todo if r.audit is not None]
    if not results:
        return None
    page = dist / RELEASE_HTML
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(results), encoding="utf-8")
    return page


def _publish(
    policy: Policy,
    todo: Sequence[RowReport],
    *,
    target_name: str,
    dist: Path,
    env: Mapping[str, str],
    rehearsal: bool,
    publish: bool,
    cache_dir: Path,
    jobs: int,
) -> tuple[bool, list[str]]:
    """Publish when every row passed; then print and check each variant's install lines."""
    from release.publish.step import publish_rows

    failed = [r for r in todo if r.failed]
    if failed:
        for rep in todo:
            rep.status["publish"] = "not published"
        log.warn(f"==> {len(failed)} row(s) failed: nothing was published")
        return False, []
    if not publish:
        for rep in todo:
            rep.status["publish"] = "skipped (--no-publish)"
        return False, []
    try:
        published = publish_rows(
            policy,
            [r.row for r in todo],
            target_name=target_name,
            dist=dist,
            env=env,
            fresh_local_index=rehearsal,
        )  # on failure it names the variants already published and how to complete
    except WheelwrightError as exc:
        for rep in todo:
            _fail(rep, "publish", first_line(str(exc)), exc.return_code)
        log.warn(f"FAIL publish: {exc}")
        log.annotate("publish failed", str(exc))
        return False, []
    by_variant = {p.variant: p for p in published}
    for rep in todo:
        p = by_variant.get(rep.row.variant)
        name = rep.wheel.name if rep.wheel else ""
        if p and name in p.uploaded:
            rep.status["publish"] = "uploaded"
        elif p and name in p.skipped:
            rep.status["publish"] = "already there"
        else:
            _fail(rep, "publish", "not on the index", CheckFailed.return_code)
    install = check_installs(
        policy, todo, {v: p.index for v, p in by_variant.items()}, env=env, cache_dir=cache_dir, jobs=jobs
    )
    return True, install


def check_installs(
    policy: Policy,
    todo: Sequence[RowReport],
    indexes: Mapping[str, str],
    *,
    env: Mapping[str, str],
    cache_dir: Path,
    jobs: int,
) -> list[str]:
    """Each variant's pip and uv install lines, and, for a CUDA variant, what pip and uv pick with
    its index and the default index in both orders (the release's CPU index standing in for the
    default index). A wrong pick fails the newest-Python row of the variant (step publish)."""
    from release.policy.targets import DEFAULT_INDEX
    from release.publish.index.client import resolve_simple_url
    from release.smoke.resolve import install_cases

    default = resolve_simple_url(DEFAULT_INDEX)
    stand_in = indexes.get("cpu")
    project = policy.project.name
    blocks: dict[str, list[str]] = {}
    checked: dict[tuple[str, str], list[str]] = {}  # (variant, arch): its header line, then each result
    checks: list[tuple[RowReport, InstallCase, str]] = []  # row, case as checked, how the line names it
    for variant, index in sorted(indexes.items()):
        cases = install_cases(index, default, cuda=variant != "cpu")
        block = blocks[variant] = [f"{variant}:", *(f"  {c.line(project)}" for c in cases[:2])]
        rows = [r for r in todo if r.row.variant == variant]
        if variant == "cpu" or not rows:
            continue
        if stand_in is None:  # said, not skipped silently: the header promises a check
            block.append(
                "  not checked: no cpu wheel of this run stands in for the default index "
                "(select the cpu rows too to check these lines)"
            )
            continue
        for arch in sorted({r.row.platform for r in rows}, key=lambda a: (is_foreign(a), a)):
            rep = max((r for r in rows if r.row.platform == arch), key=lambda r: version_key(_newest(r.row)))
            where = f" for an {arch} machine ({rep.row.platform_tag})" if is_foreign(arch) else ""
            checked[(variant, arch)] = [
                f"  checked with Python {_newest(rep.row)}{where} against the published indexes"
                + (f", {stand_in} standing in for {default}:" if stand_in != default else ":")
            ]
            for case in cases:
                first = f"--index-url {variant if case.index_url == index else 'the default index'}"
                label = f"{case.tool}, {first}" + (f", {arch}" if where else "")
                checks.append((rep, case.replaced({default: stand_in}), label))
    results = _run_checks(checks, project, env=env, cache_dir=cache_dir, jobs=jobs)
    for (rep, _, _), result in zip(checks, results, strict=True):
        checked[(rep.row.variant, rep.row.platform)].append(f"    {result}")
    return [
        line
        for variant, block in blocks.items()
        for line in [*block, *(x for (v, _), lines in checked.items() if v == variant for x in lines)]
    ]


def _newest(row: Row) -> str:
    """The newest Python a row's wheel serves (:attr:`Row.pythons` is oldest first): the one the
    install checks resolve for."""
    return row.pythons[-1]


def _run_checks(
    checks: Sequence[tuple[RowReport, InstallCase, str]],
    project: str,
    *,
    env: Mapping[str, str],
    cache_dir: Path,
    jobs: int,
) -> list[str]:
    """Ask pip and uv (in parallel) which wheel each case picks; a ✓ or ✗ line for each."""
    from release.core.machine import find_python
    from release.smoke.resolve import Target, find_uv, picked, resolution_problem

    uv: Path | None = None
    uv_error: WheelwrightError | None = None
    if any(case.tool == "uv" for _, case, _ in checks):
        try:
            uv = find_uv(cache_dir, env)
        except WheelwrightError as exc:
            uv_error = exc

    def check(item: tuple[RowReport, InstallCase, str]) -> str:
        rep, case, label = item
        try:
            if case.tool == "uv" and uv_error is not None:
                raise uv_error
            row = rep.row
            target = Target(row.platform_tag, _newest(row)) if is_foreign(row.platform) else None
            chosen = picked(case, find_python(_newest(row), env=env).path, project, uv=uv, target=target)
        except WheelwrightError as exc:
            _fail(rep, "publish", f"{case.tool} check: {first_line(str(exc))}", exc.return_code)
            return f"✗ {label}: {first_line(str(exc))}"
        problem = resolution_problem(rep.row, chosen, case.tool)
        if problem:
            _fail(rep, "publish", problem, CheckFailed.return_code)
            return f"✗ {label}: {problem}"
        return f"✓ {label}: {case.tool} picks {chosen}"

    if not checks:
        return []
    with ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="install-check") as pool:
        return list(pool.map(check, checks))


__all__ = ["InputError", "ReleaseOutcome", "RowReport", "exit_code", "git_dirty", "run_release"]
