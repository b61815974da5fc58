"""The audit step, once: what ``python -m release audit`` and the release pipeline both run for a wheel.

1. the record chain: the wheel's build record must be there, bound to its sha256, its row and the
   policy (:func:`require_built`; the command checks every row's first, the pipeline per row);
2. the old record and page go first, so a failed rerun never leaves a stale pass beside the wheel;
3. the audit (:func:`release.audit.run.audit_wheel`);
4. the record ``<wheel>.audit.json`` and the page ``<wheel>.audit.html`` beside the wheel, unless the
   audit may not write one (:func:`record_allowed`: partial, or loosened by the command line);
5. under GitHub Actions, an ``::error`` annotation per failing finding (title: the check).

What the caller does with the result (print it, fail the row) stays with the caller.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from release.audit import registry
from release.audit.model import AuditResult, Expectation
from release.audit.run import audit_wheel
from release.core import log

__all__ = ["Audited", "audit_step", "page_path", "record_allowed", "require_built"]


@dataclass(frozen=True)
class Audited:
    """One wheel's audit: the result, and the record and page written beside it (None: not written)."""

    result: AuditResult
    record: Path | None
    page: Path | None


def require_built(wheel: Path, *, row_id: str, policy_sha256: str | None) -> None:
    """The build record must be beside the wheel, bound to it, its row and the policy (CheckFailed)."""
    from release import records  # the record store: only for a row's wheel

    records.require(wheel, records.BuildRecord, step="audit", row_id=row_id, policy_sha256=policy_sha256)


def page_path(wheel: Path) -> Path:
    """``<wheel>.audit.html``, beside the wheel."""
    from release.audit.report.page import HTML_SUFFIX  # the page's modules: only when one is written

    return wheel.with_name(wheel.name + HTML_SUFFIX)


def record_allowed(result: AuditResult) -> bool:
    """A partial audit (``--checks``) or one the command line loosened (``--allow``) writes no record:
    publish must never trust it. ``--runs-on`` and ``--driver`` only add checks, so they may."""
    return not result.partial and not result.expectation.overrides


def _may_record(expectation: Expectation) -> bool:
    """Whether an audit held to ``expectation`` can be recorded (:func:`record_allowed`, told before it runs)."""
    partial = not all(expectation.runs(name) for name in registry.CHECKS)
    return not partial and not expectation.overrides


def audit_step(
    wheel: str | os.PathLike[str],
    expectation: Expectation,
    *,
    built: tuple[str, str | None] | None = None,
    record: bool = True,
    cross_check: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    remember: bool | None = None,
) -> Audited:
    """Audit one wheel as a step: ``built`` (row id, policy sha256) requires its build record first;
    ``record`` False writes nothing (``--no-record``). InputError when the wheel cannot be read."""
    path = Path(wheel)
    if built is not None:
        require_built(path, row_id=built[0], policy_sha256=built[1])
    keep = record and _may_record(expectation)
    page = page_path(path)
    if keep:  # a page never stands beside a wheel it was not made from, nor a record
        from release import records
        from release.audit.report.page import render_html
        from release.audit.report.record import write_record

        records.remove(path, "audit")
        page.unlink(missing_ok=True)
    result = audit_wheel(
        path, expectation, cross_check_cuobjdump=cross_check, cache_dir=cache_dir, remember=remember
    )
    written: Path | None = None
    if keep and record_allowed(result):
        written = write_record(result)
        page.write_text(render_html(result), encoding="utf-8")
    for f in result.failures:
        log.annotate(f.check, f"{result.wheel}: {f.message}")
    return Audited(result, written, page if written is not None else None)
