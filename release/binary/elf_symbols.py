"""The dynamic symbol table of an ELF file: look names up, list what it leaves undefined.

* :func:`lookup` finds named symbols through the file's own hash table (``.gnu.hash``,
  else the SysV ``.hash``), as the dynamic loader does: a handful of small preads per
  name, whatever the size of the library (``libtorch_cpu.so`` has 75,000 symbols).
  A file without a hash table is scanned.
* :func:`undefined_symbols` lists the symbols the file needs from elsewhere, reading
  the table in bounded chunks and decoding only the undefined entries' names.

Errors are :class:`~release.binary.elf_core.ElfError` (bad input), naming file and fault.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from typing import NamedTuple

from release.binary.elf_core import (
    SHN_UNDEF,
    SHT_DYNSYM,
    SHT_GNU_HASH,
    SHT_HASH,
    SHT_NOBITS,
    ElfError,
    ElfFile,
    Header,
    RawSection,
    read_header,
    read_section_table,
    read_string,
)

__all__ = ["STB_WEAK", "STT_FUNC", "STT_NOTYPE", "Symbol", "lookup", "undefined_symbols"]

STB_WEAK = 2
STT_NOTYPE = 0
STT_FUNC = 2
_CHUNK = 1 << 22  # symbol table bytes read at a time


class Symbol(NamedTuple):
    """One dynamic symbol: its name, binding (STB_*), type (STT_*), and whether the file defines it."""

    name: str
    bind: int
    type: int
    defined: bool
    position: int  # index in the dynamic symbol table


class _Table(NamedTuple):
    file: ElfFile
    header: Header
    symtab: RawSection
    strtab: RawSection
    entry: struct.Struct
    raw: list[RawSection]


def _open(path: str | os.PathLike[str]) -> _Table | None:
    """The file's dynamic symbol table, or None when it has none. The caller closes ``file``."""
    f = ElfFile(path)
    try:
        h = read_header(f)
        raw = read_section_table(f, h)
        symtab = next((s for s in raw if s.type == SHT_DYNSYM), None)
        if symtab is None:
            f.close()
            return None
        if symtab.link == 0 or symtab.link >= len(raw):
            raise ElfError(f"{f.path}: corrupt: the dynamic symbol table links to a missing string table")
        strtab = raw[symtab.link]
        for what, s in (("dynamic symbol table", symtab), ("dynamic string table", strtab)):
            if s.type == SHT_NOBITS or s.offset + s.size > f.size:
                raise ElfError(f"{f.path}: truncated or corrupt: the {what} lies outside the file")
        fmt = "IBBHQQ" if h.layout.elf_class == 64 else "IIIBBH"
        entry = struct.Struct(h.layout.endian + fmt)
        return _Table(f, h, symtab, strtab, entry, raw)
    except BaseException:
        f.close()
        raise


def _unpack(t: _Table, data: bytes, at: int) -> tuple[int, int, int, int]:
    """(name offset, bind, type, section index) of the entry at ``at``."""
    if t.header.layout.elf_class == 64:
        name, info, _other, shndx, _value, _size = t.entry.unpack_from(data, at)
    else:
        name, _value, _size, info, _other, shndx = t.entry.unpack_from(data, at)
    return name, info >> 4, info & 0xF, shndx


def _count(t: _Table) -> int:
    return t.symtab.size // t.entry.size


def _entry(t: _Table, index: int) -> tuple[int, int, int, int]:
    if index >= _count(t):
        raise ElfError(f"{t.file.path}: corrupt: the hash table names symbol {index}, past the symbol table")
    raw = t.file.read(t.symtab.offset + index * t.entry.size, t.entry.size, "dynamic symbol")
    return _unpack(t, raw, 0)


def _name(t: _Table, offset: int) -> str:
    return read_string(t.file, t.strtab.offset, t.strtab.size, offset, "symbol")


def _entries(t: _Table) -> Iterator[tuple[int, tuple[int, int, int, int]]]:
    """Every entry of the table after the null one, read in bounded chunks."""
    per_chunk = max(1, _CHUNK // t.entry.size)
    total = _count(t)
    for first in range(0, total, per_chunk):
        n = min(per_chunk, total - first)
        data = t.file.read(t.symtab.offset + first * t.entry.size, n * t.entry.size, "dynamic symbol table")
        for k in range(n):
            if first + k:
                yield first + k, _unpack(t, data, k * t.entry.size)


def _gnu_hash(name: bytes) -> int:
    h = 5381
    for b in name:
        h = (h * 33 + b) & 0xFFFFFFFF
    return h


def _sysv_hash(name: bytes) -> int:
    h = 0
    for b in name:
        h = (h << 4) + b
        g = h & 0xF0000000
        if g:
            h ^= g >> 24
        h &= ~g & 0xFFFFFFFF
    return h


def _candidates_gnu(t: _Table, section: RawSection, name: str) -> Iterator[int]:
    f, e = t.file, t.header.layout.endian
    word = 8 if t.header.layout.elf_class == 64 else 4
    nbuckets, symoffset, bloom_size, _shift = struct.unpack(e + "4I", f.read(section.offset, 16, "GNU hash"))
    if nbuckets == 0:
        return
    h = _gnu_hash(name.encode("utf-8", "surrogateescape"))
    buckets_at = section.offset + 16 + bloom_size * word
    chain_at = buckets_at + 4 * nbuckets
    (index,) = struct.unpack(e + "I", f.read(buckets_at + 4 * (h % nbuckets), 4, "GNU hash bucket"))
    if index < symoffset:
        return
    end = section.offset + section.size
    for i in range(index, _count(t)):
        at = chain_at + 4 * (i - symoffset)
        if at + 4 > end:
            raise ElfError(f"{f.path}: corrupt: a GNU hash chain runs past its section")
        (value,) = struct.unpack(e + "I", f.read(at, 4, "GNU hash chain"))
        if (value | 1) == (h | 1):
            yield i
        if value & 1:
            return
    raise ElfError(f"{f.path}: corrupt: a GNU hash chain never ends")


def _candidates_sysv(t: _Table, section: RawSection, name: str) -> Iterator[int]:
    f, e = t.file, t.header.layout.endian
    nbucket, nchain = struct.unpack(e + "2I", f.read(section.offset, 8, "hash table"))
    if nbucket == 0:
        return
    h = _sysv_hash(name.encode("utf-8", "surrogateescape"))
    (index,) = struct.unpack(e + "I", f.read(section.offset + 8 + 4 * (h % nbucket), 4, "hash bucket"))
    seen = 0
    while index != 0:
        if index >= nchain or seen > nchain:
            raise ElfError(f"{f.path}: corrupt: a hash chain leaves its table")
        yield index
        (index,) = struct.unpack(
            e + "I", f.read(section.offset + 8 + 4 * nbucket + 4 * index, 4, "hash chain")
        )
        seen += 1


def lookup(path: str | os.PathLike[str], names: Iterable[str]) -> dict[str, Symbol]:
    """The dynamic symbols called one of ``names`` (defined ones first), found as the loader finds them.

    Hash tables index only the symbols a file defines; a name the file needs but does not
    define is found only when the file has no hash table (then every entry is read).
    """
    wanted = set(names)
    t = _open(path)
    if t is None or not wanted:
        if t is not None:
            t.file.close()
        return {}
    try:
        out: dict[str, Symbol] = {}
        table = next((s for s in t.raw if s.type == SHT_GNU_HASH), None)
        walk = _candidates_gnu
        if table is None:
            table = next((s for s in t.raw if s.type == SHT_HASH), None)
            walk = _candidates_sysv
        if table is not None and table.offset + table.size <= t.file.size:
            for name in sorted(wanted):
                for index in walk(t, table, name):
                    offset, bind, typ, shndx = _entry(t, index)
                    if _name(t, offset) == name:
                        out[name] = Symbol(name, bind, typ, shndx != SHN_UNDEF, index)
                        break
            return out
        for index, (offset, bind, typ, shndx) in _entries(t):
            if offset and (name := _name(t, offset)) in wanted and name not in out:
                out[name] = Symbol(name, bind, typ, shndx != SHN_UNDEF, index)
        return out
    finally:
        t.file.close()


def undefined_symbols(path: str | os.PathLike[str]) -> tuple[Symbol, ...]:
    """Every symbol the file needs from another object (section index SHN_UNDEF), in table order."""
    t = _open(path)
    if t is None:
        return ()
    try:
        return tuple(
            Symbol(_name(t, offset), bind, typ, False, index)
            for index, (offset, bind, typ, shndx) in _entries(t)
            if shndx == SHN_UNDEF and offset
        )
    finally:
        t.file.close()
