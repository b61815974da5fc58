"""The audit record: ``<wheel filename>.audit.json`` beside the wheel, through :mod:`release.records`.

::

    {"version": 1, "wheel": "pkg-1.0+cu130-...whl", "sha256": "<hex of the wheel>",
     "row": "cu130-py312-x86_64" | null, "variant": "cu130",
     "policy_sha256": "<hex of the policy file bytes>" | null,
     "passed": true, "findings": [{"check", "ok", "message", "library", "details"}, ...]}

Written atomically, for failing audits too, so a stale passing record never survives a
failing re-audit. The smoke and publish steps read it back through
:func:`release.records.require`.
"""

from __future__ import annotations

from pathlib import Path

from release import records
from release.audit.model import AuditResult

__all__ = ["audit_record", "write_record"]


def audit_record(result: AuditResult) -> records.AuditRecord:
    exp = result.expectation
    return records.AuditRecord(
        wheel=result.wheel,
        sha256=result.sha256,
        policy_sha256=exp.policy_sha256,
        row=exp.row_id,
        variant=exp.variant,
        passed=result.passed,
        findings=tuple(f.to_json() for f in result.findings),
    )


def write_record(result: AuditResult) -> Path:
    """Write the record beside the wheel; StepFailed (exit 4) if the folder is not writable."""
    return records.write(result.wheel_path, audit_record(result))
