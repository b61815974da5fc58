"""The reader of ``cpus.toml``: each CPU architecture's names (GNU triplet, ELF machine, platform tag,
OCI platform, Debian arch, qemu-user, cross compilers, CMake and meson names, a CUDA home's target
folder) as frozen values, read once.

``cpus()`` loads and validates the packaged file on first use (``functools.cache``);
``parse(text, source)`` does the same for any text, so a test can prove that a broken table is
refused. :func:`arch` answers "what is this arch called by X?"; :func:`host_arch` is this machine's
(``platform.machine()`` through the aliases: ``amd64`` is x86_64). No other module of wheelwright
spells an arch's names (tests/unit/test_route_guard.py). Imports only ``release.core``, so
``release.binary`` may read it. A broken table is wheelwright's own bug: :class:`CpuTableError`
(a :class:`~release.core.errors.ToolError`, exit 3) names the file, the key and the fix.
"""

from __future__ import annotations

import functools
import importlib.resources
import platform as _platform
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from release.core.errors import ToolError

__all__ = ["Cpu", "CpuTable", "CpuTableError", "arch", "cpus", "host_arch", "is_foreign", "parse"]

SOURCE = "release/resources/cpus.toml"
_KEYS = {
    "triplet",
    "elf",
    "manylinux",
    "tag",
    "aliases",
    "oci",
    "debian",
    "qemu",
    "sysroot",
    "cross_packages",
    "cmake_processor",
    "meson_cpu_family",
    "meson_cpu",
    "cuda_target",
}
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class CpuTableError(ToolError):
    """wheelwright's own CPU table is malformed: a bug to report, not the user's input."""


@dataclass(frozen=True)
class Cpu:
    """One CPU architecture, by its manylinux/auditwheel name (a row's ``platform``)."""

    name: str  # "aarch64"
    triplet: str  # "aarch64-linux-gnu"
    elf_machine: int  # 183 (EM_AARCH64)
    elf_class: Literal[32, 64]
    little_endian: bool
    manylinux: bool  # a manylinux platform rows.toml may name
    tag: str  # platform tag suffix: manylinux_2_28_<tag>
    aliases: tuple[str, ...]  # platform.machine() spellings besides the name ("arm64")
    oci: str  # "linux/arm64"
    debian: str  # "arm64"
    qemu: str | None  # "qemu-aarch64"; None: not emulated here
    sysroot: bool  # Debian CPython sysroots are made for it
    cross_packages: tuple[str, ...]  # Debian packages of its cross compilers and libc
    cmake_processor: str  # CMAKE_SYSTEM_PROCESSOR
    meson_cpu_family: str
    meson_cpu: str
    cuda_target: str | None  # "sbsa-linux": a CUDA home's targets/<x> folder; None: CUDA has none

    @property
    def cross_gcc(self) -> str:
        return f"{self.triplet}-gcc"

    @property
    def cross_gxx(self) -> str:
        return f"{self.triplet}-g++"

    def platform_tag(self, policy: str) -> str:
        """``manylinux_2_28_aarch64`` for ``policy`` ``manylinux_2_28``."""
        return f"{policy}_{self.tag}"


@dataclass(frozen=True)
class CpuTable:
    by_name: Mapping[str, Cpu]
    elf_machine_names: Mapping[int, str]  # e_machine -> the name wheelwright prints

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.by_name)

    @property
    def manylinux(self) -> tuple[str, ...]:
        """The manylinux platforms, in the file's order."""
        return tuple(c.name for c in self.by_name.values() if c.manylinux)

    def get(self, name: str) -> Cpu | None:
        return self.by_name.get(name)

    def normalize(self, machine: str) -> str:
        """An arch's name for a ``platform.machine()`` answer (``AMD64`` -> x86_64); unknown ones as given."""
        low = machine.lower()
        for cpu in self.by_name.values():
            if low == cpu.name or low in cpu.aliases:
                return cpu.name
        return low

    def by_elf(self, machine: int, elf_class: int, little_endian: bool) -> Cpu | None:
        """The arch whose shared objects have this ELF machine, class and byte order."""
        return next(
            (
                c
                for c in self.by_name.values()
                if (c.elf_machine, c.elf_class, c.little_endian) == (machine, elf_class, little_endian)
            ),
            None,
        )

    def of_platform_tag(self, tag: str) -> Cpu | None:
        """The arch a platform tag names (``manylinux_2_28_aarch64``, ``linux_x86_64``); None: none."""
        return next(
            (
                c
                for c in sorted(self.by_name.values(), key=lambda c: -len(c.tag))
                if tag.endswith("_" + c.tag)
            ),
            None,
        )


def _fail(source: str, key: str, problem: str) -> CpuTableError:
    return CpuTableError(f"{source}: {key}: {problem}; fix the table (it is wheelwright's own data)")


def _str(raw: Mapping[str, Any], key: str, where: str, source: str, *, empty: bool = False) -> str:
    value = raw.get(key)
    if not isinstance(value, str) or (not value and not empty):
        raise _fail(
            source, f"{where}.{key}", f"must be a{'' if empty else ' non-empty'} string, not {value!r}"
        )
    return value


def _bool(raw: Mapping[str, Any], key: str, where: str, source: str) -> bool:
    value = raw.get(key)
    if not isinstance(value, bool):
        raise _fail(source, f"{where}.{key}", f"must be true or false, not {value!r}")
    return value


def _strs(raw: Mapping[str, Any], key: str, where: str, source: str) -> tuple[str, ...]:
    value = raw.get(key)
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise _fail(source, f"{where}.{key}", f"must be a list of non-empty strings, not {value!r}")
    return tuple(value)


def _cpu(name: str, raw: object, source: str) -> Cpu:
    where = f"arch.{name}"
    if not _NAME.match(name):
        raise _fail(source, where, "an arch's name is lower-case letters, digits and _")
    if not isinstance(raw, dict):
        raise _fail(source, where, "must be a table")
    if missing := sorted(_KEYS - set(raw)):
        raise _fail(source, where, f"missing {', '.join(missing)}")
    if unknown := sorted(set(raw) - _KEYS):
        raise _fail(source, where, f"unknown key {', '.join(unknown)}")
    elf = raw["elf"]
    if (
        not isinstance(elf, dict)
        or set(elf) != {"machine", "class", "byteorder"}
        or not isinstance(elf["machine"], int)
        or isinstance(elf["machine"], bool)
        or elf["class"] not in (32, 64)
        or elf["byteorder"] not in ("little", "big")
    ):
        raise _fail(
            source, f"{where}.elf", "must be { machine = <int>, class = 32|64, byteorder = 'little'|'big' }"
        )
    qemu = _str(raw, "qemu", where, source, empty=True)
    cuda_target = _str(raw, "cuda_target", where, source, empty=True)
    return Cpu(
        name=name,
        triplet=_str(raw, "triplet", where, source),
        elf_machine=elf["machine"],
        elf_class=64 if elf["class"] == 64 else 32,
        little_endian=elf["byteorder"] == "little",
        manylinux=_bool(raw, "manylinux", where, source),
        tag=_str(raw, "tag", where, source),
        aliases=_strs(raw, "aliases", where, source),
        oci=_str(raw, "oci", where, source),
        debian=_str(raw, "debian", where, source),
        qemu=qemu or None,
        sysroot=_bool(raw, "sysroot", where, source),
        cross_packages=_strs(raw, "cross_packages", where, source),
        cmake_processor=_str(raw, "cmake_processor", where, source),
        meson_cpu_family=_str(raw, "meson_cpu_family", where, source),
        meson_cpu=_str(raw, "meson_cpu", where, source),
        cuda_target=cuda_target or None,
    )


def parse(text: str, source: str = SOURCE) -> CpuTable:
    """The table in ``text``, validated: every key of every arch, no two arches alike to the ELF
    reader or to ``platform.machine()``."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(source, "(file)", f"not TOML: {exc}") from None
    if raw.get("schema_version") != 1:
        raise _fail(source, "schema_version", f"must be 1, not {raw.get('schema_version')!r}")
    arches = raw.get("arch")
    if not isinstance(arches, dict) or not arches:
        raise _fail(source, "arch", "must hold at least one [arch.<name>] table")
    by_name = {name: _cpu(name, value, source) for name, value in arches.items()}
    seen_elf: dict[tuple[int, int, bool], str] = {}
    seen_alias: dict[str, str] = {}
    for cpu in by_name.values():
        key = (cpu.elf_machine, cpu.elf_class, cpu.little_endian)
        if key in seen_elf:
            raise _fail(
                source,
                f"arch.{cpu.name}.elf",
                f"the same ELF machine, class and byte order as {seen_elf[key]}",
            )
        seen_elf[key] = cpu.name
        for alias in cpu.aliases:
            if alias in by_name or alias in seen_alias:
                raise _fail(
                    source,
                    f"arch.{cpu.name}.aliases",
                    f"{alias!r} already names {seen_alias.get(alias, alias)}",
                )
            seen_alias[alias] = cpu.name
    names = raw.get("elf_machine_names")
    if not isinstance(names, dict) or not names:
        raise _fail(source, "elf_machine_names", "must be a table of e_machine number = name")
    elf_names: dict[int, str] = {}
    for number, name in names.items():
        if not number.isdigit() or not isinstance(name, str) or not name:
            raise _fail(source, f"elf_machine_names.{number}", f"must be <number> = <name>, not {name!r}")
        elf_names[int(number)] = name
    return CpuTable(by_name, elf_names)


@functools.cache
def cpus() -> CpuTable:
    """The packaged table, read and validated once."""
    text = importlib.resources.files("release.resources").joinpath("cpus.toml").read_text(encoding="utf-8")
    return parse(text)


def arch(name: str) -> Cpu | None:
    """The arch called ``name`` (a row's ``platform``); None when wheelwright does not know it."""
    return cpus().get(name)


def host_arch() -> str:
    """This machine's CPU, by the table's name (``platform.machine()`` through its aliases)."""
    return cpus().normalize(_platform.machine())


def is_foreign(arch: str | None, host: str | None = None) -> bool:
    """Whether ``arch``'s programs are another CPU's than ``host`` (default: this machine's): the one
    comparison of CPU names for callers that hold only an arch (an interpreter's, a wheel's); a row's
    whole route is :func:`release.route.route`'s. None (an interpreter of this machine) is not foreign."""
    return arch is not None and arch != (host or host_arch())
