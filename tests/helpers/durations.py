"""Where a pytest run's time went, by test module: tests/conftest.py adds each test's setup, call and
teardown seconds to its module and prints the costliest modules after pytest's slowest tests, so a CI
log says which modules (their fixtures included) a tier spends its minutes on (docs/ci.md)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["ModuleTime", "add", "summary_lines"]


@dataclass
class ModuleTime:
    seconds: float = 0.0
    tests: int = 0  # tests whose call phase ran (a test skipped or failing in setup counts its seconds only)


def add(totals: dict[str, ModuleTime], nodeid: str, when: str, seconds: float) -> None:
    """Add one phase (``setup``, ``call``, ``teardown``) of test ``nodeid`` to its module's total."""
    entry = totals.setdefault(nodeid.split("::", 1)[0], ModuleTime())
    entry.seconds += seconds
    if when == "call":
        entry.tests += 1


def summary_lines(totals: Mapping[str, ModuleTime], top: int) -> list[str]:
    """The ``top`` costliest modules, then each test folder's total (``tests/unit``, ``tests/integration``)."""
    ranked = sorted(totals.items(), key=lambda item: (-item[1].seconds, item[0]))
    lines = [f"{t.seconds:8.1f} s {t.tests:5d} tests  {module}" for module, t in ranked[:top]]
    folders: dict[str, ModuleTime] = {}
    for module, t in totals.items():
        folder = folders.setdefault(module.rsplit("/", 1)[0] if "/" in module else ".", ModuleTime())
        folder.seconds += t.seconds
        folder.tests += t.tests
    every = sum(t.seconds for t in totals.values()) or 1.0
    lines += [
        f"{name}: {t.seconds:.1f} s in {t.tests} tests ({100 * t.seconds / every:.0f} %)"
        for name, t in sorted(folders.items(), key=lambda item: (-item[1].seconds, item[0]))
    ]
    return lines
