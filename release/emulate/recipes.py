"""The emulated interpreters wheelwright can make (``sysroots.toml``), loaded once, validated on
load, frozen: per Python version the Debian suite and the exact package set of its sysroot, and
for the Pythons no reachable source has, why. Pure apart from reading the one file."""

from __future__ import annotations

import functools
import hashlib
import json
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.core.errors import ToolError
from release.resources.cpus import Cpu, cpus

RECIPES_FILE = Path(__file__).with_name("sysroots.toml")
SCHEMA_VERSION = 1
LAYOUT_VERSION = 1  # how a sysroot is laid out and checked (release.emulate.sysroot); in the key
_PACKAGE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")


def sysroot_arches() -> tuple[str, ...]:
    """The CPUs Debian CPython sysroots are made for (``sysroot = true`` in release/resources/cpus.toml)."""
    return tuple(c.name for c in cpus().by_name.values() if c.sysroot)


@dataclass(frozen=True)
class Recipe:
    """One emulated interpreter: CPython ``python`` for ``arch`` from Debian ``suite``'s ``packages``."""

    python: str  # "3.11"
    arch: str  # "aarch64"
    suite: str  # "bookworm"
    packages: tuple[str, ...]

    @property
    def cpu(self) -> Cpu:
        return cpus().by_name[self.arch]  # validated on load: an arch with sysroots

    @property
    def debian_arch(self) -> str:
        return self.cpu.debian

    @property
    def triplet(self) -> str:
        return self.cpu.triplet

    def to_json(self) -> dict[str, Any]:
        return {
            "layout": LAYOUT_VERSION,
            "python": self.python,
            "arch": self.arch,
            "suite": self.suite,
            "packages": sorted(self.packages),
        }

    def key(self) -> str:
        """What names the sysroot in the cache: everything that decides its content (pure)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:12]

    @property
    def name(self) -> str:
        """``python3.11-aarch64-bookworm-<key>``: the cache folder's name."""
        return f"python{self.python}-{self.arch}-{self.suite}-{self.key()}"


@dataclass(frozen=True)
class Recipes:
    by_python: dict[tuple[str, str], Recipe]  # (python, arch) -> recipe
    unavailable: dict[str, str]  # python -> why no interpreter can be had

    def for_python(self, python: str, arch: str) -> Recipe:
        """The recipe of CPython ``python`` on ``arch``, or ToolError saying why there is none."""
        found = self.by_python.get((python, arch))
        if found is not None:
            return found
        if python in self.unavailable:
            raise ToolError(f"no {arch} CPython {python} reachable here: {self.unavailable[python]}")
        have = ", ".join(sorted(p for p, a in self.by_python if a == arch)) or "none"
        raise ToolError(
            f"no {arch} CPython {python} reachable here: {RECIPES_FILE.name} has no recipe for it "
            f"(emulated {arch} Pythons: {have})"
        )


def _bad(where: str, message: str) -> ToolError:
    return ToolError(f"{RECIPES_FILE}: {where}: {message}")


def _strings(value: object, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value) or not value:
        raise _bad(where, f"expected a non-empty list of strings, got {value!r}")
    return tuple(value)


def parse(data: dict[str, Any]) -> Recipes:
    """Validate the loaded TOML (pure): unknown keys, types, names, duplicates."""
    if data.get("schema_version") != SCHEMA_VERSION:
        raise _bad(
            "schema_version", f"{data.get('schema_version')!r}, this wheelwright reads {SCHEMA_VERSION}"
        )
    extra = sorted(set(data) - {"schema_version", "python", "unavailable"})
    if extra:
        raise _bad(", ".join(extra), "unknown key")
    by_python: dict[tuple[str, str], Recipe] = {}
    for python, table in dict(data.get("python", {})).items():
        where = f"[python.{python!r}]"
        if not re.fullmatch(r"3\.\d+", python) or not isinstance(table, dict):
            raise _bad(where, 'expected [python."3.X"] tables')
        unknown = sorted(set(table) - {"suite", "arch", "packages"})
        if unknown:
            raise _bad(where, f"unknown key {unknown[0]!r} (known: arch, packages, suite)")
        arch, suite = table.get("arch"), table.get("suite")
        if arch not in sysroot_arches():
            raise _bad(f"{where}.arch", f"{arch!r} is not one of {sorted(sysroot_arches())}")
        if not isinstance(suite, str) or not suite.isalpha():
            raise _bad(f"{where}.suite", f"{suite!r} is not a Debian suite name")
        packages = _strings(table.get("packages"), f"{where}.packages")
        bad = [p for p in packages if not _PACKAGE.match(p)]
        if bad:
            raise _bad(f"{where}.packages", f"{bad[0]!r} is not a Debian package name")
        if len(set(packages)) != len(packages):
            raise _bad(f"{where}.packages", "a package is listed twice")
        if f"python{python}" not in packages:
            raise _bad(f"{where}.packages", f"python{python} itself is not in the set")
        by_python[(python, str(arch))] = Recipe(python, str(arch), suite, packages)
    unavailable: dict[str, str] = {}
    table = data.get("unavailable", {})
    if table:
        unknown = sorted(set(table) - {"pythons", "debian", "pypi"})
        if unknown:
            raise _bad("[unavailable]", f"unknown key {unknown[0]!r} (known: debian, pypi, pythons)")
        for python in _strings(table.get("pythons"), "[unavailable].pythons"):
            if any(p == python for p, _ in by_python):
                raise _bad("[unavailable].pythons", f"{python} also has a recipe")
            texts = [str(table.get(k, "")).replace("{python}", python) for k in ("debian", "pypi")]
            unavailable[python] = "; ".join(t for t in texts if t)
    return Recipes(by_python, unavailable)


@functools.cache
def load() -> Recipes:
    """The recipes of :data:`RECIPES_FILE`, read and validated once."""
    try:
        data = tomllib.loads(RECIPES_FILE.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ToolError(f"{RECIPES_FILE}: cannot read the emulated interpreters' recipes: {exc}") from None
    return parse(data)
