"""Dependency channels: before any build, ask each channel whether it publishes for the row's arch.

The policy routes a dependency to a channel per arch (torchao from the CUDA channel where it
publishes for that arch, else the plain channel: it publishes nothing for aarch64). A row that
would depend on a channel with nothing for it fails here, naming the dependency, not at a
user's `pip install`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from packaging.tags import Tag
from packaging.utils import (
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)

from release.core.errors import CheckFailed, InputError
from release.hints import a_or_an
from release.policy.matrix import Row
from release.policy.model import Policy
from release.publish.index.client import Fetch, read_project, redact_url, resolve_simple_url

# ---------------------------------------------------------------------------
# Dependency channels


@dataclass(frozen=True)
class ChannelRule:
    """A dependency and the channel (simple index root) a row installs it from.

    ``platforms`` limits the rule to some CPU arches (empty: every arch). Write one
    rule per (package, arch set): e.g. torchao from the CUDA channel for x86_64
    and from the plain channel for aarch64, where the CUDA channel has nothing.
    """

    package: str
    index_url: str
    platforms: tuple[str, ...] = ()

    def applies_to(self, platform: str) -> bool:
        return not self.platforms or platform in self.platforms


@dataclass(frozen=True)
class ChannelFinding:
    """What one channel offers one package for one arch."""

    package: str
    index_url: str
    platform: str
    usable: tuple[str, ...]  # files installable on the arch
    arches_seen: tuple[str, ...]  # every arch the channel has wheels for ("any" for pure wheels)

    @property
    def ok(self) -> bool:
        return bool(self.usable)


_LINUX_PREFIX_RE = re.compile(
    r"^(?:manylinux_\d+_\d+|musllinux_\d+_\d+|manylinux1|manylinux2010|manylinux2014|linux)_(?P<arch>.+)$"
)


def tag_arch(platform_tag: str) -> str | None:
    """The CPU arch of a Linux platform tag (``manylinux_2_28_x86_64`` -> ``x86_64``);
    ``any`` for pure wheels; None for a non-Linux tag."""
    if platform_tag == "any":
        return "any"
    m = _LINUX_PREFIX_RE.match(platform_tag)
    return m["arch"] if m else None


def _python_ok(tag: Tag, python_tag: str | None) -> bool:
    if python_tag is None:
        return True
    m = re.fullmatch(r"cp3(\d+)", python_tag)
    if m is None:
        raise InputError(f"{python_tag!r} is not a CPython tag like 'cp312'")
    minor = int(m[1])
    if tag.interpreter in (python_tag, "py3", f"py3{minor}"):
        return True
    im = re.fullmatch(r"cp3(\d+)", tag.interpreter)
    return tag.abi == "abi3" and im is not None and int(im[1]) <= minor


def _describe(finding: ChannelFinding) -> str:
    seen = ", ".join(finding.arches_seen) or "no wheels at all"
    return (
        f"{finding.package}: channel {redact_url(finding.index_url)} publishes no wheel usable on "
        f"{finding.platform} (it has: {seen}); {a_or_an(finding.platform)} row depending on it would fail "
        f"to install. Declare another channel for {finding.platform} for {finding.package}"
    )


def _default_fetch(index_url: str, package: str) -> Iterable[str]:
    return [f.filename for f in read_project(index_url, package)]


def check_channels(
    deps: Sequence[ChannelRule],
    platform: str,
    fetch: Fetch | None = None,
    *,
    python_tag: str | None = None,
) -> tuple[ChannelFinding, ...]:
    """Ask each channel a ``platform`` row depends on whether it has wheels for that arch.

    ``fetch(index_url, package)`` returns the filenames a channel lists (default:
    read its simple index). Raises CheckFailed naming every dependency whose
    channel has nothing for ``platform`` (and ``python_tag``, when given), before
    anything is built. Returns the findings for a report.
    """
    fetcher = fetch or _default_fetch
    findings: list[ChannelFinding] = []
    for rule in deps:
        if not rule.applies_to(platform):
            continue
        usable: list[str] = []
        arches: set[str] = set()
        for filename in fetcher(rule.index_url, rule.package):
            try:
                name, _, _, tags = parse_wheel_filename(filename)
            except InvalidWheelFilename:
                continue  # sdists and other files: a row installs wheels
            if name != canonicalize_name(rule.package):
                continue
            file_arches = {a for t in tags if (a := tag_arch(t.platform)) is not None}
            arches.update(file_arches)
            if any(tag_arch(t.platform) in (platform, "any") and _python_ok(t, python_tag) for t in tags):
                usable.append(filename)
        findings.append(
            ChannelFinding(
                rule.package, rule.index_url, platform, tuple(sorted(usable)), tuple(sorted(arches))
            )
        )
    bad = [f for f in findings if not f.ok]
    if bad:
        raise CheckFailed(
            f"{len(bad)} dependency channel(s) have nothing for {platform}"
            + (f" / {python_tag}" if python_tag else "")
            + ":\n"
            + "\n".join(f"  - {_describe(f)}" for f in bad)
        )
    return tuple(findings)


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
