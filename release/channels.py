"""Dependency channels: before any build, ask each channel whether it publishes for the row's arch.

The policy routes a dependency to a channel per arch (torchao from the CUDA channel where it
publishes for that arch, else the plain channel: it publishes nothing for aarch64). A row that
would depend on a channel with nothing for it fails here, naming the dependency, not at a
user's `pip install`.
"""

from __future__ import annotations

from collections.abc import Sequence

from release.index_client import ChannelFinding, ChannelRule, check_channels, resolve_simple_url
from release.matrix import Row
from release.policy import Policy


def rules_for(policy: Policy, row: Row) -> list[ChannelRule]:
    """The channel rules that apply to one row (pure)."""
    out: list[ChannelRule] = []
    for dep in policy.dependencies:
        if not row.is_cuda:
            continue
        if dep.variants and row.variant not in dep.variants:
            continue
        if dep.platforms and row.platform not in dep.platforms:
            continue
        out.append(ChannelRule(dep.package, dep.index, dep.platforms))
    return out


def check_rows(policy: Policy, rows: Sequence[Row]) -> list[ChannelFinding]:
    """Raise CheckFailed for the first row whose channels have nothing for it; findings otherwise."""
    findings: list[ChannelFinding] = []
    for row in rows:
        rules = [
            ChannelRule(r.package, resolve_simple_url(r.index_url), r.platforms)
            for r in rules_for(policy, row)
        ]
        if rules:
            findings.extend(check_channels(rules, row.platform, python_tag=row.python_tag))
    return findings
