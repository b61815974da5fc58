"""Resolve an ELF file's libraries as ``auditwheel show`` does, reading them with wheelwright's reader.

A port of the resolution rules of auditwheel 6.8's ``lddtree`` (itself from pax-utils):
the search order (the first file's RPATH, the file's own RPATH and RUNPATH, the
environment's ``LD_LIBRARY_PATH``, the first file's RUNPATH, ``/etc/ld.so.conf`` and the
trusted directories, the interpreter's directory), ``$ORIGIN`` expansion, the excluded
sonames, libpython left unresolved, and a found library accepted only when its ELF
class, byte order, machine and OS ABI match. Nothing is executed; every file is read with
:func:`release.binary.elf.read_elf` (bounded preads), once per analysis (:class:`Resolver`).

Also here: each file's platform as auditwheel names it (``x86_64``, with the x86-64-v2/v3/v4
level its GNU property note requires, or an error for an unknown machine or a soft-float ARM).
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from release.binary.elf import EM_ARM, EM_X86_64, ElfError, ElfInfo, read_elf
from release.resources.cpus import cpus

__all__ = ["Dependency", "ElfPlatform", "Resolver", "Tree", "platform_of"]

_ORIGIN = re.compile(r"\$(ORIGIN|\{ORIGIN\})")
_LIBPYTHON = re.compile(r"^libpython\d+\.\d+m?.so(\.\d)*$")
# (e_machine, class, little endian) -> auditwheel's baseline architecture: release/resources/cpus.toml
_ARCH = {(c.elf_machine, c.elf_class, c.little_endian): c.name for c in cpus().by_name.values()}
_X86 = cpus().by_elf(EM_X86_64, 64, True)
_ARMV7 = cpus().by_elf(EM_ARM, 32, True)
# auditwheel's x86-64 microarchitecture levels: the baseline's name, then _v2, _v3, _v4
_X86_LEVELS = () if _X86 is None else (_X86.name, *(f"{_X86.name}_v{n}" for n in (2, 3, 4)))
_LINUX_ABIS = frozenset({0, 3})  # ELFOSABI_NONE/SYSV and ELFOSABI_GNU/LINUX load alike
_EF_ARM_EABIMASK, _EF_ARM_EABI_VER5, _EF_ARM_ABI_FLOAT_HARD = 0xFF000000, 0x05000000, 0x00000400


@dataclass(frozen=True)
class ElfPlatform:
    osabi: int
    elf_class: int
    little: bool
    machine: int
    base: str | None  # "x86_64"; None: unknown
    extended: str | None  # "x86_64_v3" when the file needs more than the baseline
    error: str | None

    def compatible(self, other: ElfPlatform) -> bool:
        abis = {self.osabi, other.osabi}
        return (len(abis) == 1 or abis <= _LINUX_ABIS) and (self.elf_class, self.little, self.machine) == (
            other.elf_class,
            other.little,
            other.machine,
        )


def platform_of(info: ElfInfo) -> ElfPlatform:
    little = info.byte_order == "little"
    base = _ARCH.get((info.machine, info.elf_class, little))
    extended: str | None = None
    error: str | None = None
    if base is None:
        error = "Unknown architecture"
    elif _X86 is not None and base == _X86.name and info.x86_isa_needed is not None:
        data = info.x86_isa_needed & ~1
        if data & 8:
            extended = _X86_LEVELS[3]
        elif data & 4:
            extended = _X86_LEVELS[2]
        elif data & 2:
            extended = _X86_LEVELS[1]
        elif data:
            error = f"unknown {base} ISA"
    elif _ARMV7 is not None and base == _ARMV7.name:
        if info.flags & _EF_ARM_EABIMASK != _EF_ARM_EABI_VER5:
            error, base = f"Invalid ARM EABI version for {base}", None
        elif info.flags & _EF_ARM_ABI_FLOAT_HARD != _EF_ARM_ABI_FLOAT_HARD:
            error, base = f"{base} shall use hard-float", None
    return ElfPlatform(info.osabi, info.elf_class, little, info.machine, base, extended, error)


def is_superset(base: str, extended: str) -> bool:
    """``x86_64`` (the policies' baseline) covers ``extended``? Only the x86-64 levels differ."""
    if base in _X86_LEVELS and extended in _X86_LEVELS:
        return _X86_LEVELS.index(base) >= _X86_LEVELS.index(extended)
    return base == extended


@dataclass(frozen=True)
class Dependency:
    soname: str
    path: str | None  # where it was found (the search path joined with the soname)
    realpath: Path | None  # that path with links resolved; None: not found
    platform: ElfPlatform | None = None
    needed: tuple[str, ...] = ()


@dataclass(frozen=True)
class Tree:
    """One ELF file of the wheel and every library it loads, resolved on this machine."""

    interpreter: str | None
    libc: str | None  # "glibc" | "musl" | None
    realpath: Path
    platform: ElfPlatform
    needed: tuple[str, ...]  # DT_NEEDED less the excluded sonames
    libraries: dict[str, Dependency] = field(default_factory=dict)


def _normpath(path: str) -> str:
    return os.path.normpath(path).replace("//", "/")


def _readlink(path: str) -> str:
    """The path with every link resolved, the way auditwheel resolves it (no loop guard needed:
    the kernel refuses to create a loop that never ends; a long one ends at 40 hops here)."""
    p = Path(path)
    for _ in range(40):
        if not p.is_symlink():
            break
        p = p.parent / p.readlink()
    return _normpath(str(p))


def _dedupe(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def parse_ld_paths(text: str, origin: str = "") -> list[str]:
    """A colon-separated search path, as the loader reads it: "" is the working directory."""
    if not text:
        return []
    out = []
    for entry in text.split(":"):
        if entry == "":
            entry = str(Path.cwd())
        elif _ORIGIN.search(entry):
            if not origin:
                raise ValueError("can't expand $ORIGIN without a path")
            entry = _ORIGIN.sub(str(Path(origin).absolute().parent).replace("\\", "\\\\"), entry)
        out.append(_normpath(entry))
    return [p for p in _dedupe(out) if Path(p).is_dir()]


def _ld_so_conf(conf: str, seen: frozenset[str] = frozenset()) -> list[str]:
    paths: list[str] = []
    if conf in seen:
        return paths
    try:
        lines = Path(conf).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return paths
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("include "):
            pattern = line[8:]
            pattern = pattern if pattern.startswith("/") else f"{Path(conf).parent}/{pattern}"
            for included in sorted(glob.glob(pattern)):  # noqa: PTH207 - an absolute pattern, as ld.so reads it
                paths += _ld_so_conf(included, seen | {conf})
        else:
            paths.append(_normpath(line))
    return paths


@functools.cache
def system_paths(libc: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(environment, configured) search directories of this machine, read once."""
    env_text = ":".join(
        filter(None, (os.environ.get("AUDITWHEEL_LD_LIBRARY_PATH"), os.environ.get("LD_LIBRARY_PATH")))
    )
    env = tuple(parse_ld_paths(env_text)) if env_text else ()
    if libc == "musl":
        found = sorted(Path("/etc").glob("ld-musl-*.path"))
        if found:
            conf = [p.strip() for p in found[0].read_text(encoding="utf-8").split(":") if p.strip()]
        else:
            conf = ["/lib", "/usr/local/lib", "/usr/lib"]
    else:
        conf = [p for p in _dedupe(_ld_so_conf("/etc/ld.so.conf")) if Path(p).is_dir()]
        conf += ["/lib", "/lib64/", "/usr/lib", "/usr/lib64"]
    return env, tuple(conf)


class Resolver:
    """Resolves ELF files' libraries, reading each file at most once."""

    def __init__(self, exclude: Iterable[str] = ()) -> None:
        self.exclude = tuple(exclude)
        self._infos: dict[str, ElfInfo | None] = {}

    def info(self, path: str | Path) -> ElfInfo | None:
        """The file's ELF facts, None when it is not a readable ELF file."""
        key = str(path)
        if key not in self._infos:
            try:
                self._infos[key] = read_elf(key)
            except ElfError:
                self._infos[key] = None
        return self._infos[key]

    def _find(self, platform: ElfPlatform, soname: str, dirs: list[str]) -> tuple[Path | None, str | None]:
        for directory in dirs:
            path = os.path.join(directory, soname)
            target = _readlink(path)
            if Path(target).exists():
                info = self.info(target)
                if info is not None and platform.compatible(platform_of(info)):
                    return Path(target), path
        return None, None

    def tree(self, path: Path) -> Tree:
        """The file's libraries, resolved; ElfError when the file itself is not readable ELF."""
        info = read_elf(path)
        self._infos.setdefault(str(path), info)
        platform = platform_of(info)
        libc: str | None = None
        interp_dirs: list[str] = []
        libraries: dict[str, Dependency] = {}
        if info.interpreter is not None:
            interpreter = _normpath("/" + info.interpreter)
            name = os.path.basename(interpreter)
            libraries[name] = Dependency(name, interpreter, Path(_readlink(interpreter)), platform)
            libc = "musl" if name.startswith("ld-musl-") else "glibc"
            directory = str(Path(info.interpreter).parent)
            interp_dirs = [_normpath("/" + directory), _normpath("/usr" + directory)]
        for soname in info.needed:
            wants = (
                "musl"
                if soname.startswith(("libc.musl-", "ld-musl-"))
                else "glibc"
                if soname == "libc.so.6" or soname.startswith(("ld-linux-", "ld64.so."))
                else None
            )
            if wants is not None and libc is not None and wants != libc:
                raise ValueError(
                    f"{path.name}: found a dependency on {wants} but the libc is already set to {libc}"
                )
            libc = libc or wants
        if libc is None and path.name.endswith(("-arm-linux-musleabihf.so", "-linux-musl.so")):
            libc = "musl"
        elif libc is None and path.name.endswith(("-arm-linux-gnueabihf.so", "-linux-gnu.so")):
            soabi = path.stem.split(".")[-1].split("-")
            if soabi[0] == "cpython" and soabi[1].startswith(tuple(f"3{m}" for m in range(11, 100))):
                libc = "glibc"
        rpaths, runpaths = self._own_paths(info, path)
        env, conf = system_paths(libc)
        top = (rpaths, runpaths, list(env), list(conf), interp_dirs)
        needed = self._resolve(path, info, platform, top, libraries)
        return Tree(info.interpreter, libc, path, platform, needed, libraries)

    @staticmethod
    def _own_paths(info: ElfInfo, path: Path) -> tuple[list[str], list[str]]:
        rpaths = parse_ld_paths(":".join(info.rpath), str(path)) if info.rpath else []
        runpaths = parse_ld_paths(":".join(info.runpath), str(path)) if info.runpath else []
        return ([] if runpaths else rpaths), runpaths

    def _resolve(
        self,
        path: Path,
        info: ElfInfo,
        platform: ElfPlatform,
        top: tuple[list[str], list[str], list[str], list[str], list[str]],
        libraries: dict[str, Dependency],
    ) -> tuple[str, ...]:
        top_rpath, top_runpath, env, conf, interp = top
        rpaths, runpaths = self._own_paths(info, path)
        dirs = top_rpath + rpaths + runpaths + env + top_runpath + conf + interp
        excluded: set[str] = set()
        for soname in info.needed:
            if soname in libraries or soname in excluded:
                continue
            if any(fnmatch.fnmatch(soname, e) for e in self.exclude):
                excluded.add(soname)
                continue
            if _LIBPYTHON.match(soname):
                libraries[soname] = Dependency(soname, None, None)
                continue
            realpath, fullpath = self._find(platform, soname, dirs)
            if realpath is not None and any(fnmatch.fnmatch(str(realpath), e) for e in self.exclude):
                excluded.add(soname)
                continue
            libraries[soname] = Dependency(soname, fullpath, realpath)
            if realpath is None or fullpath is None:
                continue
            dep_info = self.info(realpath)
            assert dep_info is not None  # _find accepted it as ELF
            dep_needed = self._resolve(realpath, dep_info, platform_of(dep_info), top, libraries)
            libraries[soname] = Dependency(soname, fullpath, realpath, platform_of(dep_info), dep_needed)
        return tuple(s for s in info.needed if s not in excluded)
