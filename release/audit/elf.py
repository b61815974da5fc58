"""A small ELF reader: headers, section table and the dynamic section.

Pure Python (``struct`` and ``os.pread``), ELF32 and ELF64, little and big
endian. It never loads a whole file: every read is a bounded ``pread`` of the
bytes it needs, so a 500 MB ``libtorch_cuda.so`` costs a few kilobytes of I/O.

Everything that is wrong with a file (not ELF, truncated, a table or section
outside the file, a string outside its table) raises :class:`ElfError`, an
:class:`~release.core.errors.InputError` whose message names the file and the fault.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, NamedTuple, Self

from release.core.errors import InputError

ELF_MAGIC = b"\x7fELF"

# Section types used here (the rest are kept as numbers).
SHT_NULL = 0
SHT_STRTAB = 3
SHT_DYNAMIC = 6
SHT_NOBITS = 8

SHN_XINDEX = 0xFFFF

PT_LOAD = 1
PT_DYNAMIC = 2

DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29

MACHINE_NAMES: dict[int, str] = {
    3: "x86",
    8: "mips",
    20: "ppc",
    21: "ppc64",
    22: "s390",
    40: "arm",
    62: "x86_64",
    183: "aarch64",
    190: "cuda",
    243: "riscv",
    258: "loongarch",
}

_TAG_NAMES = {
    DT_NEEDED: "DT_NEEDED",
    DT_SONAME: "DT_SONAME",
    DT_RPATH: "DT_RPATH",
    DT_RUNPATH: "DT_RUNPATH",
}

# Longest string read from a string table (a DT_NEEDED name, a runpath).
_MAX_STRING = 1 << 16


class ElfError(InputError):
    """A file is not a readable ELF file. The message names the file and the fault."""


class Section(NamedTuple):
    """One entry of the section header table."""

    name: str
    offset: int
    size: int
    type: int


@dataclass(frozen=True)
class ElfInfo:
    """What wheelwright needs from an ELF file's headers."""

    path: str
    elf_class: Literal[32, 64]
    byte_order: Literal["little", "big"]
    elf_type: int
    machine: int
    sections: tuple[Section, ...]
    needed: tuple[str, ...]
    rpath: tuple[str, ...]
    runpath: tuple[str, ...]
    soname: str | None

    @property
    def machine_name(self) -> str:
        return MACHINE_NAMES.get(self.machine, f"machine-{self.machine}")

    def section(self, name: str) -> Section | None:
        """The first section called ``name``, or None."""
        for section in self.sections:
            if section.name == name:
                return section
        return None

    def sections_named(self, name: str) -> tuple[Section, ...]:
        return tuple(s for s in self.sections if s.name == name)


@dataclass(frozen=True)
class _Layout:
    """Struct formats for one (class, byte order)."""

    elf_class: Literal[32, 64]
    endian: str
    ehdr: struct.Struct
    shdr: struct.Struct
    phdr: struct.Struct
    dyn: struct.Struct


def _layout(elf_class: Literal[32, 64], endian: str) -> _Layout:
    if elf_class == 64:
        return _Layout(
            elf_class,
            endian,
            # e_type e_machine e_version e_entry e_phoff e_shoff e_flags
            # e_ehsize e_phentsize e_phnum e_shentsize e_shnum e_shstrndx
            struct.Struct(endian + "HHIQQQIHHHHHH"),
            # name type flags addr offset size link info addralign entsize
            struct.Struct(endian + "IIQQQQIIQQ"),
            # type flags offset vaddr paddr filesz memsz align
            struct.Struct(endian + "IIQQQQQQ"),
            struct.Struct(endian + "qQ"),
        )
    return _Layout(
        elf_class,
        endian,
        struct.Struct(endian + "HHIIIIIHHHHHH"),
        struct.Struct(endian + "IIIIIIIIII"),
        # type offset vaddr paddr filesz memsz flags align
        struct.Struct(endian + "IIIIIIII"),
        struct.Struct(endian + "iI"),
    )


class _File:
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

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

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
    with _File(path) as f:
        if f.size < len(ELF_MAGIC):
            return False
        return f.read(0, len(ELF_MAGIC), "ELF magic") == ELF_MAGIC


def _describe_start(head: bytes) -> str:
    text = head[:32]
    if text and all(32 <= b < 127 or b in (9, 10, 13) for b in text):
        first = text.decode("ascii").strip().splitlines()[0] if text.strip() else ""
        return f"it starts with text {first!r} (a linker script or other text file?)"
    return f"it starts with bytes {text[:8].hex(' ')}" if text else "it is empty"


@dataclass(frozen=True)
class _Header:
    layout: _Layout
    elf_type: int
    machine: int
    phoff: int
    shoff: int
    phentsize: int
    phnum: int
    shentsize: int
    shnum: int
    shstrndx: int


def _read_header(f: _File) -> _Header:
    head = f.read(0, min(f.size, 64), "ELF header") if f.size else b""
    if len(head) < 16 or head[:4] != ELF_MAGIC:
        raise ElfError(f"{f.path}: not an ELF file: {_describe_start(head)}")
    ei_class, ei_data, ei_version = head[4], head[5], head[6]
    if ei_class not in (1, 2):
        raise ElfError(f"{f.path}: corrupt ELF header: unknown class {ei_class} (EI_CLASS)")
    if ei_data not in (1, 2):
        raise ElfError(f"{f.path}: corrupt ELF header: unknown byte order {ei_data} (EI_DATA)")
    if ei_version != 1:
        raise ElfError(f"{f.path}: corrupt ELF header: unknown ELF version {ei_version}")
    layout = _layout(64 if ei_class == 2 else 32, "<" if ei_data == 1 else ">")
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
        _e_flags,
        _e_ehsize,
        e_phentsize,
        e_phnum,
        e_shentsize,
        e_shnum,
        e_shstrndx,
    ) = layout.ehdr.unpack_from(head, 16)
    return _Header(
        layout,
        e_type,
        e_machine,
        e_phoff,
        e_shoff,
        e_phentsize,
        e_phnum,
        e_shentsize,
        e_shnum,
        e_shstrndx,
    )


class _RawSection(NamedTuple):
    name_offset: int
    type: int
    addr: int
    offset: int
    size: int
    link: int


def _read_section_table(f: _File, h: _Header) -> list[_RawSection]:
    if h.shoff == 0:
        return []
    lay = h.layout
    if h.shentsize < lay.shdr.size:
        raise ElfError(
            f"{f.path}: corrupt ELF header: section header entry size {h.shentsize} "
            f"is smaller than {lay.shdr.size}"
        )

    def entry(index: int) -> _RawSection:
        raw = f.read(h.shoff + index * h.shentsize, lay.shdr.size, f"section header {index}")
        name, typ, _flags, addr, offset, size, link, _info, _align, _entsize = lay.shdr.unpack(raw)
        return _RawSection(name, typ, addr, offset, size, link)

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
        name, typ, _flags, addr, offset, size, link, _info, _align, _entsize = lay.shdr.unpack_from(
            blob, index * h.shentsize
        )
        out.append(_RawSection(name, typ, addr, offset, size, link))
    return out


def _read_string(f: _File, table_offset: int, table_size: int, index: int, what: str) -> str:
    """The NUL-terminated string at ``index`` of a string table, bounds-checked."""
    if index >= table_size:
        raise ElfError(
            f"{f.path}: corrupt: {what} name offset {index} lies outside its string table "
            f"({table_size} bytes)"
        )
    start = table_offset + index
    limit = min(table_size - index, _MAX_STRING)
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


def _sections(f: _File, h: _Header, raw: list[_RawSection]) -> tuple[Section, ...]:
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
            name = _read_string(f, names_off, names_size, s.name_offset, f"section {index}")
        if s.type not in (SHT_NOBITS, SHT_NULL) and s.offset + s.size > f.size:
            raise ElfError(
                f"{f.path}: truncated or corrupt: section {name or index!s} at offset "
                f"{s.offset:#x} ({s.size} bytes) runs past the end of the file ({f.size} bytes)"
            )
        out.append(Section(name, s.offset, s.size, s.type))
    return tuple(out)


class _Dynamic(NamedTuple):
    entries: list[tuple[int, int]]
    strtab_offset: int
    strtab_size: int


def _dynamic_entries(f: _File, lay: _Layout, offset: int, size: int) -> list[tuple[int, int]]:
    data = f.read(offset, size - size % lay.dyn.size, "dynamic section")
    out = []
    for tag, val in lay.dyn.iter_unpack(data):
        if tag == DT_NULL:
            break
        out.append((tag, val))
    return out


def _dynamic_from_sections(f: _File, h: _Header, raw: list[_RawSection]) -> _Dynamic | None:
    for s in raw:
        if s.type != SHT_DYNAMIC:
            continue
        if s.link == 0 or s.link >= len(raw):
            raise ElfError(
                f"{f.path}: corrupt: the dynamic section links to string table {s.link}, "
                f"which does not exist ({len(raw)} sections)"
            )
        strtab = raw[s.link]
        if strtab.type == SHT_NOBITS or strtab.offset + strtab.size > f.size:
            raise ElfError(
                f"{f.path}: truncated or corrupt: the dynamic string table at offset "
                f"{strtab.offset:#x} ({strtab.size} bytes) lies outside the file"
            )
        entries = _dynamic_entries(f, h.layout, s.offset, s.size)
        return _Dynamic(entries, strtab.offset, strtab.size)
    return None


def _dynamic_from_segments(f: _File, h: _Header) -> _Dynamic | None:
    """The dynamic section found through program headers (no section table)."""
    if h.phoff == 0 or h.phnum == 0:
        return None
    lay = h.layout
    if h.phentsize < lay.phdr.size:
        raise ElfError(
            f"{f.path}: corrupt ELF header: program header entry size {h.phentsize} "
            f"is smaller than {lay.phdr.size}"
        )
    blob = f.read(h.phoff, h.phnum * h.phentsize, "program header table")
    loads: list[tuple[int, int, int]] = []  # (vaddr, offset, filesz)
    dynamic: tuple[int, int] | None = None
    for index in range(h.phnum):
        fields = lay.phdr.unpack_from(blob, index * h.phentsize)
        if lay.elf_class == 64:
            p_type, _flags, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _align = fields
        else:
            p_type, p_offset, p_vaddr, _paddr, p_filesz, _memsz, _flags, _align = fields
        if p_type == PT_LOAD:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == PT_DYNAMIC and dynamic is None:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return None
    entries = _dynamic_entries(f, lay, dynamic[0], dynamic[1])
    tags = dict(entries)
    if DT_STRTAB not in tags:
        if any(tag in (DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH) for tag, _ in entries):
            raise ElfError(f"{f.path}: corrupt: the dynamic segment names strings but no DT_STRTAB")
        return _Dynamic(entries, 0, 0)
    addr = tags[DT_STRTAB]
    strsz = tags.get(DT_STRSZ, 0)
    for vaddr, offset, filesz in loads:
        if vaddr <= addr < vaddr + filesz:
            file_offset = offset + (addr - vaddr)
            size = min(strsz, offset + filesz - file_offset) if strsz else offset + filesz
            size = min(size, f.size - file_offset)
            return _Dynamic(entries, file_offset, max(size, 0))
    raise ElfError(f"{f.path}: corrupt: DT_STRTAB address {addr:#x} is not inside any loaded segment")


def _split_paths(values: list[str]) -> tuple[str, ...]:
    out: list[str] = []
    for value in values:
        out.extend(p for p in value.split(":") if p)
    return tuple(out)


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """Read an ELF file's headers, section table and dynamic section.

    Raises ElfError (an InputError) for a non-ELF file, a truncated file, or any
    table, section or string that lies outside the file.
    """
    with _File(path) as f:
        h = _read_header(f)
        raw = _read_section_table(f, h)
        sections = _sections(f, h, raw)
        dyn = _dynamic_from_sections(f, h, raw) if raw else None
        if dyn is None and not raw:
            dyn = _dynamic_from_segments(f, h)
        needed: list[str] = []
        rpath: list[str] = []
        runpath: list[str] = []
        soname: str | None = None
        if dyn is not None:
            for tag, val in dyn.entries:
                if tag not in _TAG_NAMES:
                    continue
                text = _read_string(f, dyn.strtab_offset, dyn.strtab_size, val, _TAG_NAMES[tag])
                if tag == DT_NEEDED:
                    needed.append(text)
                elif tag == DT_SONAME:
                    soname = text
                elif tag == DT_RPATH:
                    rpath.append(text)
                else:
                    runpath.append(text)
        return ElfInfo(
            path=f.path,
            elf_class=h.layout.elf_class,
            byte_order="little" if h.layout.endian == "<" else "big",
            elf_type=h.elf_type,
            machine=h.machine,
            sections=sections,
            needed=tuple(needed),
            rpath=_split_paths(rpath),
            runpath=_split_paths(runpath),
            soname=soname,
        )


class SectionReader:
    """Random access to one section's bytes, read lazily with bounded preads.

    Offsets are relative to the start of the section. ``read`` raises ElfError
    when asked for bytes outside the section.
    """

    def __init__(self, path: str | os.PathLike[str], section: Section) -> None:
        self._file = _File(path)
        self.path = self._file.path
        self.section = section
        if section.type == SHT_NOBITS:
            self._file.close()
            raise ElfError(f"{self.path}: section {section.name} has no bytes in the file")
        if section.offset + section.size > self._file.size:
            self._file.close()
            raise ElfError(
                f"{self.path}: truncated: section {section.name} at offset {section.offset:#x} "
                f"({section.size} bytes) runs past the end of the file ({self._file.size} bytes)"
            )

    @property
    def size(self) -> int:
        return self.section.size

    def read(self, offset: int, size: int) -> bytes:
        if offset < 0 or size < 0 or offset + size > self.section.size:
            raise ElfError(
                f"{self.path}: read of {size} bytes at offset {offset:#x} of section "
                f"{self.section.name} lies outside the section ({self.section.size} bytes)"
            )
        return self._file.read(self.section.offset + offset, size, f"section {self.section.name}")

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_section(path: str | os.PathLike[str], name: str) -> SectionReader:
    """Open the first section called ``name`` for lazy reads. ElfError if absent."""
    info = read_elf(path)
    section = info.section(name)
    if section is None:
        raise ElfError(f"{info.path}: has no section {name}")
    return SectionReader(path, section)


def iter_section(path: str | os.PathLike[str], name: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
    """Yield the bytes of section ``name`` in chunks of at most ``chunk_size``."""
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    with open_section(path, name) as reader:
        offset = 0
        while offset < reader.size:
            n = min(chunk_size, reader.size - offset)
            yield reader.read(offset, n)
            offset += n


def section_bytes(path: str | os.PathLike[str], name: str) -> bytes:
    """All bytes of section ``name`` (use iter_section or open_section for big ones)."""
    with open_section(path, name) as reader:
        return reader.read(0, reader.size)
