"""Where a row's arch list is resolved, once: rows whose ``[[dependency]]`` says ``gpu_coverage = "take"``
get that dependency's list (the seed's method), read from its wheel for the row with the audit's reader.

The build command, the release pipeline, ``plan`` and the audit of a row call :func:`take_lists` after
expanding rows and before anything is built or judged, and pass the rows it returns down: the build
compiles for the taken list, its record names the wheel it came from (:attr:`Row.gpu_archs_source`), and
the audit holds the wheel to the same list. A ``take`` dependency whose wheel is not found, cannot be read
or carries no SASS fails closed (InputError naming the policy, the row, the dependency and the key).
Rows without a ``take`` dependency come back as they are, with nothing read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from release.policy.matrix import Row
    from release.policy.model import Policy

__all__ = ["needs_taking", "take_lists"]


def needs_taking(policy: Policy, row: Row) -> bool:
    """Whether a dependency of the row says ``gpu_coverage = "take"`` (pure; CPU rows never do)."""
    return row.is_cuda and any(
        d.gpu_coverage == "take" for d in policy.dependencies_for(row.variant, row.platform)
    )


def take_lists(
    policy: Policy,
    rows: Sequence[Row],
    *,
    env: Mapping[str, str],
    wheelhouses: Sequence[Path] = (),
) -> tuple[Row, ...]:
    """``rows`` with each ``take`` row's list taken from its dependency's wheel (from ``wheelhouses`` or
    wheelwright's dependency-wheels cache, which ``python -m release coverage --download`` fills)."""
    todo = [r for r in rows if needs_taking(policy, r)]
    if not todo:
        return tuple(rows)
    from release.coverage.run import cover, with_taken_lists

    report = cover(policy, todo, wheelhouses=wheelhouses, env=env, modes=frozenset({"take"}))
    return with_taken_lists(rows, report)
