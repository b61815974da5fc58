"""Relocatable device code and the loader: is a library's ``__cudaRegisterLinkedBinary_*`` reachable?

A library built with ``-rdc=true`` and never device-linked calls ``__cudaRegisterLinkedBinary_<id>``,
which only the device-link step of its objects defines. The loader resolves that call from the
library itself and the libraries of its own NEEDED closure (found through each one's RPATH/RUNPATH
and the system's paths, as :class:`release.binary.ldd.Resolver` resolves them); a Python extension
is loaded with ``RTLD_LOCAL``, so a definition in another file of the wheel that is not in the
closure does not count. :func:`relink` sets each such library's ``link_needs`` to the symbols
nothing in its closure defines (the inspector's first answer credited any file of the wheel).

Fails closed: a closure that cannot be resolved (an unreadable ELF file) credits only the library
itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from release.audit.model import Library
from release.audit.reading.inspector import LINKED_BINARY
from release.binary.cubin import DecodeError
from release.binary.elf import ElfError
from release.binary.elf_symbols import lookup, undefined_symbols
from release.binary.ldd import Resolver

__all__ = ["closure", "relink"]


def closure(lib: Library, root: Path, resolver: Resolver) -> list[Path]:
    """The library and every file of the wheel (under ``root``) its NEEDED closure loads."""
    try:
        tree = resolver.tree(lib.file)
    except (ElfError, ValueError, OSError):
        return [lib.file]
    found = {d.realpath for d in tree.libraries.values() if d.realpath is not None}
    inside = sorted(p for p in found if p.resolve().is_relative_to(root.resolve()))
    return [lib.file, *inside]


def relink(libs: Sequence[Library], root: Path) -> tuple[Library, ...]:
    """Each library with relocatable device code, its ``link_needs`` those ``__cudaRegisterLinkedBinary_*``
    that neither it nor a file of its NEEDED closure defines; the other libraries as they are."""
    resolver = Resolver()
    out: list[Library] = []
    for lib in libs:
        if not lib.relocatable or lib.elf is None or lib.device_file is not None:
            out.append(lib)
            continue
        try:
            needs = sorted({s.name for s in undefined_symbols(lib.file) if s.name.startswith(LINKED_BINARY)})
        except (ElfError, DecodeError, OSError):
            out.append(lib)  # the inspector's answer stands
            continue
        defined: set[str] = set()
        for path in closure(lib, root, resolver) if needs else []:
            try:
                defined |= {name for name, sym in lookup(path, needs).items() if sym.defined}
            except (ElfError, DecodeError, OSError, ValueError):
                continue
        out.append(replace(lib, link_needs=tuple(n for n in needs if n not in defined)))
    return tuple(out)
