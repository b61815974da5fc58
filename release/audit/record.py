"""The audit record: ``<wheel filename>.audit.json`` beside the wheel.

The publish step trusts only this file, and only for the exact bytes it names::

    {"version": 1, "wheel": "pkg-1.0+cu130-...whl", "sha256": "<hex of the wheel>",
     "row": "cu130-py312-x86_64" | null, "variant": "cu130",
     "policy_sha256": "<hex of the policy file bytes>" | null,
     "passed": true, "findings": [{"check", "ok", "message", "library", "details"}, ...]}

Written atomically (a temporary file renamed into place), for failing audits too, so
a stale passing record never survives a failing re-audit.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from release.audit.model import AuditResult
from release.core.errors import CheckFailed, InputError, StepFailed
from release.core.hashing import sha256_file

__all__ = [
    "RECORD_SUFFIX",
    "RECORD_VERSION",
    "load_record",
    "record_json",
    "record_path",
    "require_passing",
    "write_record",
]

RECORD_VERSION = 1
RECORD_SUFFIX = ".audit.json"
_KEYS = {"version", "wheel", "sha256", "row", "variant", "policy_sha256", "passed", "findings"}


def record_path(wheel: str | os.PathLike[str]) -> Path:
    p = Path(wheel)
    return p.with_name(p.name + RECORD_SUFFIX)


def record_json(result: AuditResult) -> dict[str, Any]:
    exp = result.expectation
    return {
        "version": RECORD_VERSION,
        "wheel": result.wheel,
        "sha256": result.sha256,
        "row": exp.row_id,
        "variant": exp.variant,
        "policy_sha256": exp.policy_sha256,
        "passed": result.passed,
        "findings": [f.to_json() for f in result.findings],
    }


def write_record(result: AuditResult) -> Path:
    """Write the record beside the wheel; StepFailed (exit 4) if the folder is not writable."""
    target = record_path(result.wheel_path)
    text = json.dumps(record_json(result), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        Path(tmp).replace(target)
    except OSError as exc:
        raise StepFailed(f"cannot write the audit record {target}: {exc.strerror or exc}") from exc
    return target


def load_record(wheel: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and validate the record of ``wheel``; InputError when missing or malformed."""
    target = record_path(wheel)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(
            f"{target.name}: no audit record; run `python -m release audit {Path(wheel).name}`"
        ) from None
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"{target}: unreadable audit record: {exc}") from None
    if not isinstance(data, dict) or set(data) != _KEYS or data.get("version") != RECORD_VERSION:
        raise InputError(f"{target}: not a version {RECORD_VERSION} audit record")
    return data


def require_passing(wheel: str | os.PathLike[str], *, policy_sha256: str | None = None) -> dict[str, Any]:
    """The record of a wheel that may be published, or CheckFailed saying why not.

    The record must name this file, its sha256 must be the file's (the wheel did not
    change after the audit), it must have passed, and, when given, it must have been
    audited under this policy.
    """
    path = Path(wheel)
    data = load_record(path)
    if data["wheel"] != path.name:
        raise CheckFailed(f"{path.name}: its audit record is for {data['wheel']}")
    if data["sha256"] != sha256_file(path):
        raise CheckFailed(
            f"{path.name}: the wheel changed after it was audited (sha256 differs); audit it again"
        )
    if not data["passed"]:
        failed = [f["message"] for f in data["findings"] if not f["ok"]]
        raise CheckFailed(f"{path.name}: its audit failed ({len(failed)} findings), e.g. {failed[:1]}")
    if policy_sha256 is not None and data["policy_sha256"] != policy_sha256:
        raise CheckFailed(f"{path.name}: it was audited under another policy file; audit it again")
    return data
