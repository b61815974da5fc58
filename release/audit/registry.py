"""The audit's checks, in report order: the one table of them.

Each check module declares itself (``SPEC``: a :class:`~release.audit.model.Check` with its name,
title and function); this module puts them in order. The runner (:mod:`release.audit.run`), the
reports (:mod:`release.audit.report.render`, :mod:`release.audit.report.page`) and the ``--checks``
parser (:mod:`release.audit.claim`) read it; tests/unit/test_audit_registry.py fails when a second
table of check names appears in release/.
"""

from __future__ import annotations

from release.audit.checks import cross_check, device_code, gpus, hygiene, libraries, loader, packages
from release.audit.cpp import consumer
from release.audit.model import Check

__all__ = ["CHECKS", "NO_CLAIM_CHECKS", "OPTIONAL_CHECKS", "REGISTERED", "by_name", "title"]

# Every check, in report order. The optional ones run only when asked for (--cross-check).
REGISTERED: tuple[Check, ...] = (
    libraries.SPEC,
    device_code.SPEC,
    gpus.SPEC,
    packages.SPEC,
    loader.SPEC,
    hygiene.SPEC,
    consumer.SPEC,
)
OPTIONAL: tuple[Check, ...] = (cross_check.SPEC,)

CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTERED)
OPTIONAL_CHECKS: tuple[str, ...] = tuple(c.name for c in OPTIONAL)
# what a wheel can be held to with no claim: whether it carries device code, and for which GPUs, is the claim
NO_CLAIM_CHECKS: tuple[str, ...] = tuple(c.name for c in REGISTERED if not c.needs_claim)


def by_name(name: str) -> Check:
    """The check called ``name`` (KeyError for none)."""
    for check in (*REGISTERED, *OPTIONAL):
        if check.name == name:
            return check
    raise KeyError(name)


def title(name: str) -> str:
    """A check's heading in the reports; the name itself for a check the registry does not know."""
    try:
        return by_name(name).title
    except KeyError:
        return name
