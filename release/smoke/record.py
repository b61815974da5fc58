"""Write the smoke record: ``<wheel>.smoke.json`` beside the wheel, the verdict of one smoke step
bound to the wheel's bytes, its row and its policy (:mod:`release.records`)."""

from __future__ import annotations

import time
from pathlib import Path

from release import records
from release.core.hashing import sha256_file
from release.policy.matrix import Row
from release.smoke.evaluate import Outcome


def write_record(
    wheel: Path, row: Row, outcome: Outcome, *, policy_sha256: str, sha256: str | None = None
) -> Path:
    """``<wheel>.smoke.json`` beside the wheel, bound to its sha256 (``sha256``: the one its
    audit record was checked against, so the record names the bytes that were audited), with
    the probe's whole report as its evidence (:func:`release.records.smoke_evidence`): what a
    production publish judges again before it trusts a GPU run."""
    sha = sha256 or sha256_file(wheel)
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    record = records.SmokeRecord(
        wheel=wheel.name,
        sha256=sha,
        policy_sha256=policy_sha256,
        row=row.id,
        variant=row.variant,
        passed=outcome.passed,
        executed=outcome.executed,
        skipped_reason=None if outcome.executed else (outcome.skipped_reason or "not executed"),
        libcudart=outcome.libcudart,
        lines=tuple(outcome.lines),
        check=outcome.details.get("check"),
        at=at,
        evidence=records.smoke_evidence(outcome.details, sha256=sha, at=at),
    )
    return records.write(wheel, record)
