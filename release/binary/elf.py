"""A small ELF reader: headers, section table, the dynamic section and symbol versions.

Pure Python (``struct`` and ``os.pread``), ELF32 and ELF64, little and big
endian. It never loads a whole file: every read is a bounded ``pread`` of the
bytes it needs, so a 500 MB ``libtorch_cuda.so`` costs a few kilobytes of I/O.
The bounded file, header and table reading live in :mod:`release.binary.elf_core`;
the dynamic symbol table (lookups, undefined symbols) in :mod:`release.binary.elf_symbols`.

Everything that is wrong with a file (not ELF, truncated, a table or section
outside the file, a string outside its table) raises :class:`ElfError`, an
:class:`~release.core.errors.InputError` whose message names the file and the fault.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal, NamedTuple

from release.binary.elf_core import (
    ELF_MAGIC,
    MAX_STRING,
    PT_DYNAMIC,
    PT_LOAD,
    SHT_DYNAMIC,
    SHT_GNU_VERDEF,
    SHT_GNU_VERNEED,
    SHT_NOBITS,
    Closing,
    ElfError,
    ElfFile,
    Header,
    Layout,
    RawSection,
    Section,
    Segment,
    is_elf,
    read_header,
    read_section_table,
    read_sections,
    read_segments,
    read_string,
)
from release.resources.cpus import cpus

__all__ = [
    "ELF_MAGIC",
    "SHT_NOBITS",
    "ElfError",
    "ElfInfo",
    "Section",
    "SectionReader",
    "is_elf",
    "iter_section",
    "open_section",
    "read_elf",
    "section_bytes",
]

DT_NULL = 0
DT_NEEDED = 1
DT_STRTAB = 5
DT_STRSZ = 10
DT_SONAME = 14
DT_RPATH = 15
DT_RUNPATH = 29
DT_VERNEED = 0x6FFFFFFE
PT_INTERP = 3
SHT_NOTE = 7
EM_ARM = 40
EM_X86_64 = 62
NT_GNU_PROPERTY_TYPE_0 = 5
GNU_PROPERTY_X86_ISA_1_NEEDED = 0xC0008002
MAX_NOTES = 1 << 20  # note sections read whole only up to this size

MACHINE_NAMES: Mapping[int, str] = cpus().elf_machine_names  # release/resources/cpus.toml

_TAG_NAMES = {
    DT_NEEDED: "DT_NEEDED",
    DT_SONAME: "DT_SONAME",
    DT_RPATH: "DT_RPATH",
    DT_RUNPATH: "DT_RUNPATH",
}

# Verneed/Vernaux and Verdef/Verdaux records (the same layout in ELF32 and ELF64).
_VERNEED = "HHIII"  # vn_version vn_cnt vn_file vn_aux vn_next
_VERNAUX = "IHHII"  # vna_hash vna_flags vna_other vna_name vna_next
_VERDEF = "HHHHIII"  # vd_version vd_flags vd_ndx vd_cnt vd_hash vd_aux vd_next
_VERDAUX = "II"  # vda_name vda_next


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
    # symbol versions the file needs, per library: (("libc.so.6", ("GLIBC_2.2.5", "GLIBC_2.34")), ...)
    version_needs: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # version nodes the file defines: a real libcudart.so.13 defines "libcudart.so.13"
    version_definitions: tuple[str, ...] = ()
    osabi: int = 0  # EI_OSABI: 0 System V, 3 GNU/Linux
    flags: int = 0  # e_flags (ARM: EABI version, hard float)
    interpreter: str | None = None  # PT_INTERP of an executable
    x86_isa_needed: int | None = None  # GNU_PROPERTY_X86_ISA_1_NEEDED bits (x86-64-v2: 2, v3: 4, v4: 8)

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


class _Dynamic(NamedTuple):
    entries: list[tuple[int, int]]
    strtab_offset: int
    strtab_size: int


def _dynamic_entries(f: ElfFile, lay: Layout, offset: int, size: int) -> list[tuple[int, int]]:
    data = f.read(offset, size - size % lay.dyn.size, "dynamic section")
    out = []
    for tag, val in lay.dyn.iter_unpack(data):
        if tag == DT_NULL:
            break
        out.append((tag, val))
    return out


def _dynamic_from_sections(f: ElfFile, h: Header, raw: list[RawSection]) -> _Dynamic | None:
    for s in raw:
        if s.type != SHT_DYNAMIC:
            continue
        strtab = _linked_strtab(f, raw, s, "dynamic")
        entries = _dynamic_entries(f, h.layout, s.offset, s.size)
        return _Dynamic(entries, strtab.offset, strtab.size)
    return None


def _dynamic_from_segments(f: ElfFile, h: Header, segments: list[Segment]) -> _Dynamic | None:
    """The dynamic section found through program headers (no section table)."""
    loads = [(s.vaddr, s.offset, s.filesz) for s in segments if s.type == PT_LOAD]
    dynamic = next(((s.offset, s.filesz) for s in segments if s.type == PT_DYNAMIC), None)
    if dynamic is None:
        return None
    entries = _dynamic_entries(f, h.layout, dynamic[0], dynamic[1])
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
    """DT_RPATH/DT_RUNPATH values as the loader reads them: an empty element of a value (``/x:``,
    ``:``) is the working directory and is kept as ``""``; a value that is wholly empty names nothing
    (glibc 2.36 here: ``/x:`` loads a library from the working directory, an empty RUNPATH does not)."""
    out: list[str] = []
    for value in values:
        if value:
            out.extend(value.split(":"))
    return tuple(out)


def _version_needs(f: ElfFile, h: Header, raw: list[RawSection]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out: list[tuple[str, tuple[str, ...]]] = []
    for s, strtab, data in _linked_sections(f, raw, SHT_GNU_VERNEED, "version needs"):
        need, aux = struct.Struct(h.layout.endian + _VERNEED), struct.Struct(h.layout.endian + _VERNAUX)
        offset, seen = 0, 0
        while seen < max(s.info, 1) and offset + need.size <= len(data) and seen <= len(data) // need.size:
            _version, count, file_name, aux_off, next_off = need.unpack_from(data, offset)
            names: list[str] = []
            at = offset + aux_off
            for _ in range(min(count, len(data) // aux.size)):
                if at + aux.size > len(data):
                    raise ElfError(f"{f.path}: corrupt: a version need entry lies outside its section")
                _hash, _flags, _other, name, aux_next = aux.unpack_from(data, at)
                names.append(read_string(f, strtab.offset, strtab.size, name, "symbol version"))
                if aux_next == 0:
                    break
                at += aux_next
            out.append(
                (read_string(f, strtab.offset, strtab.size, file_name, "version need file"), tuple(names))
            )
            seen += 1
            if next_off == 0:
                break
            offset += next_off
    return tuple(out)


def _version_definitions(f: ElfFile, h: Header, raw: list[RawSection]) -> tuple[str, ...]:
    out: list[str] = []
    for _s, strtab, data in _linked_sections(f, raw, SHT_GNU_VERDEF, "version definitions"):
        vdef, vaux = struct.Struct(h.layout.endian + _VERDEF), struct.Struct(h.layout.endian + _VERDAUX)
        offset, seen = 0, 0
        while offset + vdef.size <= len(data) and seen <= len(data) // vdef.size:
            _version, _flags, _ndx, count, _hash, aux_off, next_off = vdef.unpack_from(data, offset)
            at = offset + aux_off
            if count and at + vaux.size <= len(data):
                name, _next = vaux.unpack_from(data, at)
                text = read_string(f, strtab.offset, strtab.size, name, "version definition")
                if text not in out:
                    out.append(text)
            seen += 1
            if next_off == 0:
                break
            offset += next_off
    return tuple(out)


def _linked_sections(
    f: ElfFile, raw: list[RawSection], section_type: int, what: str
) -> Iterator[tuple[RawSection, RawSection, bytes]]:
    """Each section of ``section_type`` with the string table it links to and its bytes."""
    for s in raw:
        if s.type == section_type:
            strtab = _linked_strtab(f, raw, s, what)
            yield s, strtab, f.read(s.offset, s.size, f"{what} section")


def _linked_strtab(f: ElfFile, raw: list[RawSection], s: RawSection, what: str) -> RawSection:
    if s.link == 0 or s.link >= len(raw):
        raise ElfError(
            f"{f.path}: corrupt: the {what} section links to string table {s.link}, "
            f"which does not exist ({len(raw)} sections)"
        )
    strtab = raw[s.link]
    if strtab.type == SHT_NOBITS or strtab.offset + strtab.size > f.size:
        raise ElfError(
            f"{f.path}: truncated or corrupt: the {what} string table at offset "
            f"{strtab.offset:#x} ({strtab.size} bytes) lies outside the file"
        )
    return strtab


def read_elf(path: str | os.PathLike[str]) -> ElfInfo:
    """Read an ELF file's headers, section table, dynamic section and symbol versions.

    Raises ElfError (an InputError) for a non-ELF file, a truncated file, or any
    table, section or string that lies outside the file.
    """
    with ElfFile(path) as f:
        h = read_header(f)
        raw = read_section_table(f, h)
        sections = read_sections(f, h, raw)
        segments = read_segments(f, h)
        dyn = _dynamic_from_sections(f, h, raw) if raw else None
        if dyn is None and not raw:
            dyn = _dynamic_from_segments(f, h, segments)
        needed: list[str] = []
        rpath: list[str] = []
        runpath: list[str] = []
        soname: str | None = None
        if dyn is not None:
            for tag, val in dyn.entries:
                if tag not in _TAG_NAMES:
                    continue
                text = read_string(f, dyn.strtab_offset, dyn.strtab_size, val, _TAG_NAMES[tag])
                if tag == DT_NEEDED:
                    needed.append(text)
                elif tag == DT_SONAME:
                    soname = text
                elif tag == DT_RPATH:
                    rpath.append(text)
                else:
                    runpath.append(text)
        version_needs = _version_needs(f, h, raw)
        if not version_needs and dyn is not None and any(tag == DT_VERNEED for tag, _ in dyn.entries) and raw:
            raise ElfError(
                f"{f.path}: corrupt: the dynamic section names symbol version needs (DT_VERNEED) but no "
                "section holds them: the loader would check versions this audit cannot see"
            )
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
            version_needs=version_needs,
            version_definitions=_version_definitions(f, h, raw),
            osabi=h.osabi,
            flags=h.flags,
            interpreter=_interpreter(f, segments),
            x86_isa_needed=_x86_isa_needed(f, h, raw) if h.machine == EM_X86_64 else None,
        )


def _interpreter(f: ElfFile, segments: list[Segment]) -> str | None:
    """The program interpreter (PT_INTERP) an executable names, e.g. ``/lib64/ld-linux-x86-64.so.2``."""
    for s in segments:
        if s.type == PT_INTERP:
            data = f.read(s.offset, min(s.filesz, MAX_STRING), "program interpreter")
            return data.split(b"\0", 1)[0].decode("utf-8", errors="surrogateescape")
    return None


def _x86_isa_needed(f: ElfFile, h: Header, raw: list[RawSection]) -> int | None:
    """GNU_PROPERTY_X86_ISA_1_NEEDED of the first GNU property note of each note section (as auditwheel)."""
    found: int | None = None
    u32 = struct.Struct(h.layout.endian + "I")
    prop_align = 8 if h.layout.elf_class == 64 else 4
    for section in raw:
        if section.type != SHT_NOTE or section.size > MAX_NOTES:
            continue
        data = f.read(section.offset, section.size, "note section")
        offset = 0
        while offset + 12 < len(data):
            namesz, descsz, note_type = struct.unpack_from(h.layout.endian + "III", data, offset)
            offset += 12
            name = data[offset : offset + namesz].split(b"\0", 1)[0]
            offset += _round(namesz, 4)
            desc = data[offset : offset + descsz]
            offset += _round(descsz, 4)
            if note_type != NT_GNU_PROPERTY_TYPE_0 or name != b"GNU":
                continue
            at = 0
            while at + 8 <= len(desc):
                pr_type, pr_datasz = struct.unpack_from(h.layout.endian + "II", desc, at)
                if pr_type == GNU_PROPERTY_X86_ISA_1_NEEDED and pr_datasz == 4 and at + 12 <= len(desc):
                    (found,) = u32.unpack_from(desc, at + 8)
                    break
                at += _round(pr_datasz + 8, prop_align)
            break
    return found


def _round(n: int, to: int) -> int:
    return (n + to - 1) // to * to


class SectionReader(Closing):
    """Random access to one section's bytes, read lazily with bounded preads.

    Offsets are relative to the start of the section. ``read`` raises ElfError
    when asked for bytes outside the section.
    """

    def __init__(self, path: str | os.PathLike[str], section: Section) -> None:
        self._file = ElfFile(path)
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
