"""Test helpers for the rows of a policy: by default this repository's rows.toml."""

from __future__ import annotations

from pathlib import Path

from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Policy

POLICY = Path(__file__).resolve().parents[2] / "rows.toml"


def rows_by_id(policy: Policy | Path = POLICY) -> dict[str, Row]:
    """The rows of ``policy`` (loaded, or a file to load) by id."""
    loaded = policy if isinstance(policy, Policy) else load_policy(policy)
    return {r.id: r for r in expand(loaded)}
