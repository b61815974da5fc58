"""The bounded reading underneath :mod:`release.binary.elf`: a file read with preads, the ELF
header, the section table and string tables.

Every read is a bounded ``pread`` of the bytes asked for; anything outside the file
(a table, a section, a string) raises :class:`ElfError`, an
:class:`~release.core.errors.InputError` whose message names the file and the fault.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, NamedTuple, Self

from release.core.errors import InputError

ELF_MAGIC = b"\x7fELF"

# Section types used here (the rest are kept as numbers).
SHT_NULL = 0
SHT_STRTAB = 3
SHT_HASH = 5
SHT_DYNAMIC = 6
SHT_NOBITS = 8
SHT_DYNSYM = 11
SHT_GNU_HASH = 0x6FFFFFF6
SHT_GNU_VERDEF = 0x6FFFFFFD
SHT_GNU_VERNEED = 0x6FFFFFFE

SHN_UNDEF = 0
SHN_XINDEX = 0xFFFF

PT_LOAD = 1
PT_DYNAMIC = 2

# Longest string read from a string table (a DT_NEEDED name, a runpath, a symbol name).
MAX_STRING = 1 << 16


class ElfError(InputError):
    """A file is not a readable ELF file. The message names the file and the fault."""


class Section(NamedTuple):
    """One entry of the section header table."""

    name: str
    offset: int
    size: int
    type: int


@dataclass(frozen=True)
class Layout:
    """Struct formats for one (class, byte order)."""

    elf_class: Literal[32, 64]
    endian: str
    ehdr: struct.Struct
    shdr: struct.Struct
    phdr: struct.Struct
    dyn: struct.Struct


# Struct formats per ELF class: the file header, a section header, a program header and a
# dynamic entry (the byte order is prefixed).
_FORMATS: dict[int, tuple[str, str, str, str]] = {
    64: (
        # e_type e_machine e_version e_entry e_phoff e_shoff e_flags
        # e_ehsize e_phentsize e_phnum e_shentsize e_shnum e_shstrndx
        "HHIQQQIHHHHHH",
        # name type flags addr offset size link info addralign entsize
        "IIQQQQIIQQ",
        # type flags offset vaddr paddr filesz memsz align
        "IIQQQQQQ",
        "qQ",
    ),
    32: (
        "HHIIIIIHHHHHH",
        "IIIIIIIIII",
        # type offset vaddr paddr filesz memsz flags align
        "IIIIIIII",
        "iI",
    ),
}


def layout_for(elf_class: Literal[32, 64], endian: str) -> Layout:
    ehdr, shdr, phdr, dyn = (struct.Struct(endian + fmt) for fmt in _FORMATS[elf_class])
    return Layout(elf_class, endian, ehdr, shdr, phdr, dyn)


class Closing:
    """``with`` support for a reader: leaving the block calls :meth:`close`."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ElfFile(Closing):
    """An open file read with bounded preads; every short read is an ElfError."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = os.fspath(path)
        try:
            if Path(self.path).is_dir():
                raise ElfError(f"{self.path}: is a directory, not an ELF file")
            self._fd = os.open(self.path, os.O_RDONLY)
        except OSError as exc:
            raise ElfError(f"{self.path}: cannot open: {exc.strerror or exc}") from exc
        try:
            self.size = os.fstat(self._fd).st_size
        except OSError as exc:
            os.close(self._fd)
            raise ElfError(f"{self.path}: cannot stat: {exc.strerror or exc}") from exc

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def read(self, offset: int, size: int, what: str) -> bytes:
        """Exactly ``size`` bytes at ``offset`` or ElfError naming ``what``."""
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ElfError(
                f"{self.path}: truncated or corrupt: {what} at offset {offset:#x} "
                f"({size} bytes) lies outside the file ({self.size} bytes)"
            )
        try:
            data = os.pread(self._fd, size, offset)
        except OSError as exc:
            raise ElfError(f"{self.path}: cannot read {what}: {exc.strerror or exc}") from exc
        if len(data) != size:
            raise ElfError(
                f"{self.path}: truncated: {what} at offset {offset:#x} needs {size} bytes, got {len(data)}"
            )
        return data


def is_elf(path: str | os.PathLike[str]) -> bool:
    """True when the file starts with the ELF magic. ElfError if it cannot be read."""
    with ElfFile(path) as f:
        if f.size < len(ELF_MAGIC):
            return False
        return f.read(0, len(ELF_MAGIC), "ELF magic") == ELF_MAGIC


def describe_start(head: bytes) -> str:
    text = head[:32]
    if text and all(32 <= b < 127 or b in (9, 10, 13) for b in text):
        first = text.decode("ascii").strip().splitlines()[0] if text.strip() else ""
        return f"it starts with text {first!r} (a linker script or other text file?)"
    return f"it starts with bytes {text[:8].hex(' ')}" if text else "it is empty"


@dataclass(frozen=True)
class Header:
    layout: Layout
    elf_type: int
    machine: int
    osabi: int
    flags: int
    phoff: int
    shoff: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int


def read_header(f: ElfFile) -> Header:
    head = f.read(0, min(f.size, 64), "ELF header") if f.size else b""
    if len(head) < 16 or head[:4] != ELF_MAGIC:
        raise ElfError(f"{f.path}: not an ELF file: {describe_start(head)}")
    ei_class, ei_data, ei_version = head[4], head[5], head[6]
    if ei_class not in (1, 2):
        raise ElfError(f"{f.path}: corrupt ELF header: unknown class {ei_class} (EI_CLASS)")
    if ei_data not in (1, 2):
        raise ElfError(f"{f.path}: corrupt ELF header: unknown byte order {ei_data} (EI_DATA)")
    if ei_version != 1:
        raise ElfError(f"{f.path}: corrupt ELF header: unknown ELF version {ei_version}")
    layout = layout_for(64 if ei_class == 2 else 32, "<" if ei_data == 1 else ">")
    need = 16 + layout.ehdr.size
    if f.size < need:
        raise ElfError(
            f"{f.path}: truncated: the ELF{layout.elf_class} header needs {need} bytes, the file has {f.size}"
        )
    (
        e_type,
        e_machine,
        _e_version,
        _e_entry,
        e_phoff,
        e_shoff,
        e_flags,
        _e_ehsize,
        e_phentsize,
        e_phnum,
        e_shentsize,
        e_shnum,
        e_shstrndx,
    ) = layout.ehdr.unpack_from(head, 16)
    return Header(
        layout,
        e_type,
        e_machine,
        head[7],
        e_flags,
        e_phoff,
        e_shoff,
        e_phentsize,
        e_phnum,
        e_shentsize,
        e_shnum,
        e_shstrndx,
    )


class RawSection(NamedTuple):
    name_offset: int
    type: int
    addr: int
    offset: int
    size: int
    link: int
    info: int = 0
    entsize: int = 0
    addralign: int = 0


def _check_entry_size(f: ElfFile, table: str, entsize: int, entry: struct.Struct) -> None:
    """ElfError when the header says a ``table`` header entry is smaller than its struct."""
    if entsize < entry.size:
        raise ElfError(
            f"{f.path}: corrupt ELF header: {table} header entry size {entsize} is smaller than {entry.size}"
        )


def read_section_table(f: ElfFile, h: Header) -> list[RawSection]:
    if h.shoff == 0:
        return []
    lay = h.layout
    _check_entry_size(f, "section", h.shentsize, lay.shdr)

    def entry(index: int) -> RawSection:
        raw = f.read(h.shoff + index * h.shentsize, lay.shdr.size, f"section header {index}")
        name, typ, _flags, addr, offset, size, link, info, align, entsize = lay.shdr.unpack(raw)
        return RawSection(name, typ, addr, offset, size, link, info, entsize, align)

    count = h.shnum
    if count == 0:
        # More than 0xff00 sections: the real count is in section 0's sh_size.
        count = entry(0).size
    table_end = h.shoff + count * h.shentsize
    if table_end > f.size:
        raise ElfError(
            f"{f.path}: truncated or corrupt: the section header table at offset {h.shoff:#x} "
            f"({count} entries of {h.shentsize} bytes) runs past the end of the file "
            f"({f.size} bytes)"
        )
    blob = f.read(h.shoff, count * h.shentsize, "section header table")
    out = []
    for index in range(count):
        name, typ, _flags, addr, offset, size, link, info, align, entsize = lay.shdr.unpack_from(
            blob, index * h.shentsize
        )
        out.append(RawSection(name, typ, addr, offset, size, link, info, entsize, align))
    return out


def read_string(f: ElfFile, table_offset: int, table_size: int, index: int, what: str) -> str:
    """The NUL-terminated string at ``index`` of a string table, bounds-checked."""
    if index >= table_size:
        raise ElfError(
            f"{f.path}: corrupt: {what} name offset {index} lies outside its string table "
            f"({table_size} bytes)"
        )
    start = table_offset + index
    limit = min(table_size - index, MAX_STRING)
    chunks: list[bytes] = []
    read = 0
    while read < limit:
        n = min(256, limit - read)
        chunk = f.read(start + read, n, what)
        nul = chunk.find(b"\0")
        if nul >= 0:
            chunks.append(chunk[:nul])
            return b"".join(chunks).decode("utf-8", errors="surrogateescape")
        chunks.append(chunk)
        read += n
    raise ElfError(f"{f.path}: corrupt: {what} is not NUL-terminated inside its string table")


def read_sections(f: ElfFile, h: Header, raw: list[RawSection]) -> tuple[Section, ...]:
    if not raw:
        return ()
    strndx = h.shstrndx
    if strndx == SHN_XINDEX:
        strndx = raw[0].link
    if strndx == 0:
        names_off, names_size = 0, 0
    else:
        if strndx >= len(raw):
            raise ElfError(
                f"{f.path}: corrupt: section name table index {strndx} is out of range ({len(raw)} sections)"
            )
        names = raw[strndx]
        if names.type == SHT_NOBITS or names.offset + names.size > f.size:
            raise ElfError(
                f"{f.path}: truncated or corrupt: the section name table at offset "
                f"{names.offset:#x} ({names.size} bytes) lies outside the file ({f.size} bytes)"
            )
        names_off, names_size = names.offset, names.size
    out = []
    for index, s in enumerate(raw):
        if (index == 0 and s.type == SHT_NULL) or names_size == 0:
            name = ""
        else:
            name = read_string(f, names_off, names_size, s.name_offset, f"section {index}")
        if s.type not in (SHT_NOBITS, SHT_NULL) and s.offset + s.size > f.size:
            raise ElfError(
                f"{f.path}: truncated or corrupt: section {name or index!s} at offset "
                f"{s.offset:#x} ({s.size} bytes) runs past the end of the file ({f.size} bytes)"
            )
        out.append(Section(name, s.offset, s.size, s.type))
    return tuple(out)


class Segment(NamedTuple):
    """One entry of the program header table."""

    type: int
    offset: int
    vaddr: int
    filesz: int


def read_segments(f: ElfFile, h: Header) -> list[Segment]:
    """The program header table (empty when the file has none)."""
    if h.phoff == 0 or h.phnum == 0:
        return []
    lay = h.layout
    _check_entry_size(f, "program", h.phentsize, lay.phdr)
    blob = f.read(h.phoff, h.phnum * h.phentsize, "program header table")
    out = []
    for index in range(h.phnum):
        fields = lay.phdr.unpack_from(blob, index * h.phentsize)
        if lay.elf_class == 64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = fields
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _flags, _align = fields
        out.append(Segment(p_type, p_offset, p_vaddr, p_filesz))
    return out
