"""Coverage for the selected rows of a policy: each row's prediction, and each row against the device code
of its GPU dependencies (``[[dependency]]`` entries that apply to it), reading each dependency wheel once.

:func:`cover` is what ``python -m release coverage`` and ``plan`` call. A dependency whose entry says
``gpu_coverage = "fail"`` or ``"take"`` and whose wheel is not found fails closed (InputError naming the
row, the package and where it looked); with ``"report"`` the row says it was not read, and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from release.core.errors import CheckFailed, InputError
from release.coverage.compare import DependencyCoverage, GpuCoverageMode, compare
from release.coverage.dependency import DependencyCode, Wanted, cache_folder, download, find_wheel, read
from release.coverage.jetson import JetsonDecision, decide
from release.coverage.predict import RowCoverage, row_coverage
from release.policy.archs import Arch

if TYPE_CHECKING:
    from release.policy.matrix import Row
    from release.policy.model import Dependency, Policy

__all__ = ["COVERAGE_JSON_VERSION", "CoverageReport", "RowReport", "cover", "with_taken_lists"]

COVERAGE_JSON_VERSION = 1


@dataclass(frozen=True)
class RowReport:
    row: RowCoverage
    dependencies: tuple[DependencyCoverage, ...] = ()
    not_read: tuple[
        tuple[str, str], ...
    ] = ()  # (package, why) for a "report" entry whose wheel was not found

    def to_json(self) -> dict[str, Any]:
        return {
            **self.row.to_json(),
            "dependencies": [d.to_json() for d in self.dependencies],
            "not_read": [{"package": p, "why": why} for p, why in self.not_read],
        }


@dataclass(frozen=True)
class CoverageReport:
    rows: tuple[RowReport, ...]
    seconds: Mapping[str, float] = field(default_factory=dict)  # per dependency wheel read
    jetsons: tuple[JetsonDecision, ...] = ()  # the policy's [[jetson]] rows, filled in or refused

    @property
    def failed(self) -> tuple[tuple[str, DependencyCoverage], ...]:
        return tuple((r.row.row_id, d) for r in self.rows for d in r.dependencies if d.failed)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": COVERAGE_JSON_VERSION,
            "rows": [r.to_json() for r in self.rows],
            "jetson_rows": [j.to_json() for j in self.jetsons],
            "read_seconds": {k: round(v, 2) for k, v in self.seconds.items()},
        }

    def raise_if_failed(self, policy_path: str) -> None:
        """CheckFailed naming each row whose ``gpu_coverage = "fail"`` dependency it loses GPUs against."""
        if not self.failed:
            return
        lines = []
        for row_id, d in self.failed:
            lost = ", ".join(f"{g.name} ({g.cc})" for g in d.lost)
            what = (
                f"omits GPUs {d.package} runs on: {lost}" if d.lost else f"serves no GPU {d.package} serves"
            )
            lines.append(
                f"{policy_path}: row {row_id}: its gpu_archs {what} ({d.wheel} carries {d.taken_text}); users of "
                f"those GPUs get a wheel that installs and then fails; add them to [train].gpu_archs, or set "
                f'[[dependency]] package = "{d.package}" gpu_coverage = "take" or "report"'
            )
        raise CheckFailed("\n".join(lines))


def _sources(wheelhouses: Sequence[Path], env: Mapping[str, str]) -> list[Path]:
    return [*wheelhouses, cache_folder(env)]


def cover(
    policy: Policy,
    rows: Sequence[Row],
    *,
    wheelhouses: Sequence[Path] = (),
    env: Mapping[str, str],
    download_missing: bool = False,
    read_reported: bool = True,
    modes: frozenset[str] = frozenset({"report", "fail", "take"}),
) -> CoverageReport:
    """Coverage of every CUDA row of ``rows``; ``read_reported=False`` reads the wheels of ``fail`` and
    ``take`` entries only (``plan`` without ``--wheelhouse``); ``modes`` the entries read at all (a build
    reads its ``take`` entries only: :mod:`release.coverage.take`)."""
    codes: dict[Path, DependencyCode] = {}
    seconds: dict[str, float] = {}
    out: list[RowReport] = []

    def code_for(dep: Dependency, wanted: Wanted, who: str) -> DependencyCode | str:
        return _dependency_code(policy, dep, wanted, who, wheelhouses=wheelhouses, env=env,
                                download_missing=download_missing, codes=codes, seconds=seconds)  # fmt: skip

    for row in rows:
        if not row.is_cuda:
            continue
        cov = row_coverage(row.id, row.platform, row.train, row.gpu_archs)
        deps: list[DependencyCoverage] = []
        not_read: list[tuple[str, str]] = []
        for dep in policy.dependencies_for(row.variant, row.platform):
            mode = cast(GpuCoverageMode, dep.gpu_coverage)
            if (mode == "report" and not read_reported) or mode not in modes:
                continue
            wanted = Wanted(dep.package, row.platform, row.python, row.variant, row.manylinux)
            code = code_for(dep, wanted, f"row {row.id}")
            if isinstance(code, str):
                not_read.append((dep.package, code))
                continue
            deps.append(compare(cov, row.gpu_archs, code, mode))
        out.append(RowReport(cov, tuple(deps), tuple(not_read)))
    jetsons: list[JetsonDecision] = []
    for jet in policy.jetsons if modes != {"take"} else ():  # a build never builds a Jetson row
        got: list[DependencyCode] = []
        why: list[str] = []
        for dep in policy.dependencies_for(jet.variant, jet.platform):
            if dep.gpu_coverage == "report" and not read_reported:
                why.append(
                    f"{dep.package}: its wheel was not read (plan --coverage, or python -m release coverage)"
                )
                continue
            wanted = Wanted(dep.package, jet.platform, jet.python, jet.variant, policy.manylinux)
            code = code_for(dep, wanted, f"[[jetson]] row {jet.id}")
            if isinstance(code, str):
                why.append(f"{dep.package}: {code}")
            else:
                got.append(code)
        jetsons.append(decide(jet, got, why))
    return CoverageReport(tuple(out), seconds, tuple(jetsons))


def _dependency_code(
    policy: Policy,
    dep: Dependency,
    wanted: Wanted,
    who: str,
    *,
    wheelhouses: Sequence[Path],
    env: Mapping[str, str],
    download_missing: bool,
    codes: dict[Path, DependencyCode],
    seconds: dict[str, float],
) -> DependencyCode | str:
    """The device code of ``dep``'s wheel for ``wanted`` (each wheel read once: ``codes``), or why it was not
    read under gpu_coverage "report"; InputError naming the policy, ``who``, the dependency and the key under
    "fail" and "take" (nothing to compare is not a pass)."""
    mode = dep.gpu_coverage
    folders = _sources(wheelhouses, env)
    wheel = find_wheel(wanted, folders)
    if wheel is None and download_missing:
        wheel = download(wanted, dep.index, cache_folder(env), env=env)
    if wheel is None:
        why = (
            f"no wheel of {dep.package} for {wanted.cpu}, Python {wanted.python}, {wanted.variant} in "
            f"{', '.join(str(f) for f in folders)}; pass --wheelhouse DIR, or --download"
        )
        if mode != "report":
            task = "cannot take its arch list" if mode == "take" else "cannot compare"
            raise InputError(
                f"{policy.path}: {who}: [[dependency]] {dep.package} gpu_coverage = {mode!r}: {task}: {why}"
            )
        return why
    if wheel not in codes:
        codes[wheel] = read(wheel, dep.package)
        seconds[wheel.name] = codes[wheel].seconds
    code = codes[wheel]
    unreadable = [f"{lib.path}: {lib.fatbin_error}" for lib in code.libraries if lib.fatbin_error]
    if not code.libraries or len(unreadable) == len(code.libraries):
        why = f"{wheel.name} carries no {'readable ' if unreadable else ''}device code" + (
            f" ({'; '.join(unreadable[:3])})" if unreadable else ""
        )
        if mode != "report":
            raise InputError(f"{policy.path}: {who}: [[dependency]] {dep.package}: {why}")
        return f"{why}: nothing to compare with"
    return code


def with_taken_lists(rows: Sequence[Row], report: CoverageReport) -> tuple[Row, ...]:
    """``rows`` with each row whose dependency says ``gpu_coverage = "take"`` given that dependency's list
    and its source (the wheel read, :attr:`Row.gpu_archs_source`) (pure): what a build of the row
    compiles for, what its audit holds the wheel to and what its build record names. Refused
    (InputError): a row with two ``take`` dependencies whose lists differ (which one to build is the
    policy's choice, not wheelwright's), and a ``take`` dependency that carries no SASS wheelwright knows
    (nothing to take is not the train's list)."""
    from dataclasses import replace

    taken: dict[str, tuple[tuple[Arch, ...], str]] = {}
    for r in report.rows:
        takes = [d for d in r.dependencies if d.mode == "take"]
        for d in takes:
            if not d.taken:
                raise InputError(
                    f"row {r.row.row_id}: [[dependency]] {d.package} gpu_coverage = 'take': {d.wheel} carries "
                    f"no SASS for a GPU wheelwright knows ({d.carried_text}): no arch list to take; set "
                    "gpu_coverage = 'report' and give the row's list in [train].gpu_archs"
                )
        lists = {d.taken for d in takes}
        if len(lists) > 1:
            shown = "; ".join(sorted(";".join(str(a) for a in t) for t in lists))
            raise InputError(
                f"row {r.row.row_id}: two gpu_coverage = 'take' dependencies give different lists: {shown}"
            )
        if takes:
            taken[r.row.row_id] = (takes[0].taken, "; ".join(sorted({d.source for d in takes})))
    return tuple(
        replace(row, gpu_archs=taken[row.id][0], gpu_archs_source=taken[row.id][1])
        if row.id in taken
        else row
        for row in rows
    )
