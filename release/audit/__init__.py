"""The audit: a wheel ships only if it matches the row it claims.

``audit_wheel(path, expectation) -> AuditResult`` runs every check; see docs/audit.md.
Imports are lazy, so importing one check module does not import the whole audit.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from release.audit.model import AuditResult, Expectation, Finding
    from release.audit.registry import CHECKS
    from release.audit.run import audit_wheel, expectation_for_wheel

__all__ = ["CHECKS", "AuditResult", "Expectation", "Finding", "audit_wheel", "expectation_for_wheel"]

_WHERE = {
    "CHECKS": "release.audit.registry",
    "AuditResult": "release.audit.model",
    "Expectation": "release.audit.model",
    "Finding": "release.audit.model",
    "audit_wheel": "release.audit.run",
    "expectation_for_wheel": "release.audit.run",
}


def __getattr__(name: str) -> Any:  # noqa: ANN401 - PEP 562 lazy attributes
    if name not in _WHERE:
        raise AttributeError(f"module 'release.audit' has no attribute {name!r}")
    return getattr(importlib.import_module(_WHERE[name]), name)
