"""The manylinux/musllinux policies as frozen data, and the decisions made with them. Pure.

The policies themselves are auditwheel's: :mod:`release.audit.abi.manylinux_cache` (the effects) reads
them once through auditwheel's public ``auditwheel.policy.WheelPolicies`` (the only name that
module exports) and freezes them into the :class:`Policies` here, so that wheelwright's analysis
(:mod:`release.audit.abi.analysis`) grades a wheel against exactly the symbol versions, library
whitelists and blacklists that ``auditwheel show`` uses, without reaching into auditwheel's
internals. :func:`to_data` and :func:`from_data` are the cached file's contents and their check.

Everything else here is a decision on values: which policy a set of symbol versions
allows, which libraries a policy would have to graft, which policy a platform tag is
held to, and why a tag is dishonest.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ExternalReference",
    "PlatformPolicy",
    "Policies",
    "beyond",
    "glibc_ok",
    "policy_for_tag",
    "tag_between",
]

_PEP600 = re.compile(r"^(?P<kind>manylinux|musllinux)_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>.+)$")


@dataclass(frozen=True, eq=False)
class PlatformPolicy:
    """One platform policy: ``manylinux_2_28_x86_64`` and what it allows."""

    name: str
    aliases: tuple[str, ...]
    priority: int  # higher: more compatible (manylinux_2_5 100, manylinux_2_41 51); 0: plain linux
    symbol_versions: Mapping[str, frozenset[str]]  # "GLIBC" -> {"2.2.5", ...}
    whitelist: frozenset[str]  # sonames every system of the policy has
    blacklist: Mapping[str, frozenset[str]]  # soname -> symbols the policy forbids from it


@dataclass(frozen=True)
class Policies:
    """The policies of one libc and architecture, least compatible (plain linux) first."""

    ordered: tuple[PlatformPolicy, ...]

    def __iter__(self) -> Any:  # noqa: ANN401 - an iterator of PlatformPolicy
        return iter(self.ordered)

    @property
    def linux(self) -> PlatformPolicy:
        return self.ordered[0]

    @property
    def highest(self) -> PlatformPolicy:
        """The most compatible policy graded."""
        return self.ordered[-1]

    def named(self, name: str) -> PlatformPolicy | None:
        return next((p for p in self.ordered if p.name == name or name in p.aliases), None)

    def up_to(self, floor: PlatformPolicy) -> Policies:
        """Plain linux, ``floor`` and every newer policy: grading a claimed tag needs no older one."""
        return Policies(tuple(p for p in self.ordered if p.priority == 0 or p.priority <= floor.priority))

    def versioned_symbols_policy(self, versioned: Mapping[str, set[str]]) -> PlatformPolicy:
        """The most compatible policy that provides every symbol version needed (auditwheel's rule)."""
        required: dict[str, set[str]] = {}
        for symbols in versioned.values():
            for symbol in symbols:
                required.setdefault(symbol.partition("_")[0], set()).add(symbol)
        for policy in reversed(self.ordered):
            allowed = {k: {f"{k}_{v}" for v in vs} for k, vs in policy.symbol_versions.items()}
            if all(required[k] <= allowed[k] for k in set(required) & set(allowed)):
                return policy
        return self.linux  # plain linux allows everything


@dataclass
class ExternalReference:
    """What a policy would have to graft for one ELF file, and the blacklisted symbols it uses."""

    libs: dict[str, str | None]  # soname -> resolved path on this machine (None: not found)
    blacklist: dict[str, list[str]]  # soname -> symbols used that the policy forbids
    policy: PlatformPolicy


def to_data(policies: Policies) -> list[dict[str, Any]]:
    """The policies as JSON data, every set sorted (pure)."""
    return [
        {
            "name": p.name,
            "aliases": list(p.aliases),
            "priority": p.priority,
            "symbol_versions": {k: sorted(v) for k, v in sorted(p.symbol_versions.items())},
            "whitelist": sorted(p.whitelist),
            "blacklist": {k: sorted(v) for k, v in sorted(p.blacklist.items())},
        }
        for p in policies
    ]


def from_data(data: object) -> Policies:
    """:func:`to_data`'s output back (pure); ValueError for anything else."""

    def strings(value: object) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError("expected a list of strings")
        return value

    def table(value: object) -> dict[str, frozenset[str]]:
        if not isinstance(value, dict):
            raise ValueError("expected a table")
        return {str(k): frozenset(strings(v)) for k, v in value.items()}

    if not isinstance(data, list) or not data:
        raise ValueError("expected a list of policies")
    out = []
    for item in data:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise ValueError("a policy without a name")
        priority = item.get("priority")
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise ValueError("a policy without an integer priority")
        out.append(
            PlatformPolicy(
                name=item["name"],
                aliases=tuple(strings(item.get("aliases"))),
                priority=priority,
                symbol_versions=table(item.get("symbol_versions")),
                whitelist=frozenset(strings(item.get("whitelist"))),
                blacklist=table(item.get("blacklist")),
            )
        )
    return Policies(tuple(out))


def policy_for_tag(policies: Policies, tag: str) -> PlatformPolicy | None:
    """The policy a platform tag is held to.

    A tag auditwheel has a policy for (or an alias: ``manylinux2014``) is that policy. A
    PEP 600 tag between auditwheel's policies (``manylinux_2_25``) is held to the newest
    policy not newer than it (``manylinux_2_24``): the tag promises at least that much.
    None for a tag auditwheel cannot grade (another OS or architecture).
    """
    named = policies.named(tag)
    if named is not None:
        return named
    m = _PEP600.match(tag)
    if m is None:
        return None
    want = (int(m["major"]), int(m["minor"]))
    best: PlatformPolicy | None = None
    for policy in policies:
        pm = _PEP600.match(policy.name)
        if pm is None or pm["kind"] != m["kind"] or pm["arch"] != m["arch"]:
            continue
        if (int(pm["major"]), int(pm["minor"])) <= want and (best is None or policy.priority < best.priority):
            best = policy
    return best


def claimed_floor(policies: Policies, tags: Sequence[str]) -> PlatformPolicy | None:
    """The most compatible policy a wheel's platform tags claim (None: none auditwheel knows)."""
    graded = [p for p in (policy_for_tag(policies, t) for t in tags) if p is not None]
    return max(graded, key=lambda p: p.priority, default=None)


def tag_between(tag: str, policy: PlatformPolicy) -> tuple[int, int] | None:
    """The tag's glibc version when the tag is graded by an older policy, else None."""
    m = _PEP600.match(tag)
    if m is None or m["kind"] != "manylinux" or policy.name == tag or tag in policy.aliases:
        return None
    return int(m["major"]), int(m["minor"])


def glibc_ok(versioned: Mapping[str, set[str]], glibc: tuple[int, int], policy: PlatformPolicy) -> bool:
    """Every GLIBC version at most the tag's own; every other versioned symbol within ``policy``."""
    for symbols in versioned.values():
        for symbol in symbols:
            name, _, version = symbol.partition("_")
            if name == "GLIBC":
                if _version_key(symbol)[1][:2] > glibc:
                    return False
            elif name in policy.symbol_versions and version not in policy.symbol_versions[name]:
                return False
    return True


def beyond(policy: PlatformPolicy, versions: Mapping[str, set[str]]) -> list[str]:
    """Symbol versions a policy does not provide (the explanation, not the verdict)."""
    out: set[str] = set()
    for symbols in versions.values():
        for symbol in symbols:
            name, _, version = symbol.partition("_")
            allowed = policy.symbol_versions.get(name)
            if allowed is not None and version not in allowed:
                out.add(symbol)
    return sorted(out, key=_version_key)


def _version_key(symbol: str) -> tuple[str, tuple[int, ...]]:
    name, _, version = symbol.partition("_")
    return name, tuple(int(p) for p in version.split(".") if p.isdigit())
