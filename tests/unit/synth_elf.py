"""Build small synthetic ELF files and fatbinaries, byte by byte, for the reader tests."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from release.binary.elf import DT_NEEDED, DT_NULL, DT_RPATH, DT_RUNPATH, DT_SONAME, DT_STRSZ, DT_STRTAB
from release.binary.elf_core import SHT_DYNAMIC, SHT_NOBITS, SHT_STRTAB
from release.binary.fatbin import FATBIN_MAGIC

__all__ = [
    "DT_NEEDED",
    "DT_RPATH",
    "DT_RUNPATH",
    "DT_SONAME",
    "SHT_NOBITS",
    "SHT_PROGBITS",
    "Built",
    "build_elf",
    "fatbin_entry",
    "fatbinary",
]

SHT_PROGBITS = 1  # the reader never needs it


@dataclass
class Built:
    data: bytes
    offsets: dict[str, int] = field(default_factory=dict)  # section name -> file offset
    shoff: int = 0


def _align(n: int, a: int = 8) -> int:
    return (n + a - 1) // a * a


def build_elf(
    sections: list[tuple[str, int, bytes]] | None = None,
    *,
    elf_class: int = 64,
    endian: str = "<",
    machine: int = 62,
    dynamic: list[tuple[int, str]] | None = None,
    section_table: bool = True,
    program_headers: bool = False,
    extended_numbering: bool = False,
    nobits_size: int = 0,
) -> Built:
    """An ELF file with the given (name, type, bytes) sections.

    ``dynamic`` adds .dynstr and .dynamic with (tag, string) entries.
    ``program_headers`` adds a PT_LOAD covering the file (vaddr == offset) and a
    PT_DYNAMIC. ``section_table=False`` leaves the section header table out.
    A section of type SHT_NOBITS gets size ``nobits_size`` and no file bytes.
    """
    sections = list(sections or [])
    is64 = elf_class == 64
    ehsize = 64 if is64 else 52
    phentsize = 56 if is64 else 32
    shentsize = 64 if is64 else 40
    dynsize = 16 if is64 else 8
    nph = 2 if program_headers else 0

    blobs: list[tuple[str, int, bytes, int]] = []  # name, type, data, link
    for name, typ, data in sections:
        blobs.append((name, typ, data, 0))

    strtab_index = 0
    dyn_entries: list[tuple[int, int]] = []
    if dynamic is not None:
        dynstr = bytearray(b"\0")
        for tag, text in dynamic:
            dyn_entries.append((tag, len(dynstr)))
            dynstr += text.encode() + b"\0"
        strtab_index = len(blobs) + 1  # section 0 is the null section
        blobs.append((".dynstr", SHT_STRTAB, bytes(dynstr), 0))
        # .dynamic is filled in once .dynstr's offset is known.
        dyn_len = (len(dyn_entries) + 3) * dynsize
        blobs.append((".dynamic", SHT_DYNAMIC, b"\0" * dyn_len, strtab_index))

    shstrtab = bytearray(b"\0")
    name_offsets = []
    for name, *_ in blobs:
        name_offsets.append(len(shstrtab))
        shstrtab += name.encode() + b"\0"
    name_offsets.append(len(shstrtab))
    shstrtab += b".shstrtab\0"
    blobs.append((".shstrtab", SHT_STRTAB, bytes(shstrtab), 0))

    pos = _align(ehsize + nph * phentsize)
    layout: list[tuple[int, int]] = []  # offset, size per blob
    for _name, typ, data, _link in blobs:
        if typ == SHT_NOBITS:
            layout.append((pos, nobits_size))
            continue
        layout.append((pos, len(data)))
        pos = _align(pos + len(data))
    shoff = pos
    nsect = len(blobs) + 1

    out = bytearray(shoff)
    offsets: dict[str, int] = {}
    for (name, typ, data, _link), (off, _size) in zip(blobs, layout, strict=True):
        offsets[name] = off
        if typ != SHT_NOBITS:
            out[off : off + len(data)] = data

    if dynamic is not None:
        dynstr_off = offsets[".dynstr"]
        dynstr_len = len(blobs[strtab_index - 1][2])
        fmt = struct.Struct(endian + ("qQ" if is64 else "iI"))
        entries = [*dyn_entries, (DT_STRTAB, dynstr_off), (DT_STRSZ, dynstr_len), (DT_NULL, 0)]
        raw = b"".join(fmt.pack(t, v) for t, v in entries)
        off = offsets[".dynamic"]
        out[off : off + len(raw)] = raw

    if section_table:
        table = bytearray(shentsize * nsect)
        shdr = struct.Struct(endian + ("IIQQQQIIQQ" if is64 else "IIIIIIIIII"))
        if extended_numbering:
            shdr.pack_into(table, 0, 0, 0, 0, 0, 0, nsect, nsect - 1, 0, 0, 0)
        for i, ((_name, typ, _data, link), (off, size)) in enumerate(
            zip(blobs, layout, strict=True), start=1
        ):
            entsize = dynsize if typ == SHT_DYNAMIC else 0
            shdr.pack_into(
                table, i * shentsize, name_offsets[i - 1], typ, 0, off, off, size, link, 0, 8, entsize
            )
        out += table
    else:
        shoff = 0

    ehdr = struct.Struct(endian + ("HHIQQQIHHHHHH" if is64 else "HHIIIIIHHHHHH"))
    ident = b"\x7fELF" + bytes([2 if is64 else 1, 1 if endian == "<" else 2, 1]) + b"\0" * 9
    if section_table and extended_numbering:
        shnum, shstrndx = 0, 0xFFFF
    elif section_table:
        shnum, shstrndx = nsect, nsect - 1
    else:
        shnum, shstrndx = 0, 0
    header = ident + ehdr.pack(
        3,  # ET_DYN
        machine,
        1,
        0,
        ehsize if program_headers else 0,
        shoff,
        0,
        ehsize,
        phentsize,
        nph,
        shentsize,
        shnum,
        shstrndx,
    )
    out[: len(header)] = header

    if program_headers:
        phdr = struct.Struct(endian + ("IIQQQQQQ" if is64 else "IIIIIIII"))
        dyn_off = offsets.get(".dynamic", 0)
        dyn_len = len(blobs[strtab_index][2]) if dynamic is not None else 0
        if is64:
            load = phdr.pack(1, 5, 0, 0, 0, len(out), len(out), 0x1000)
            dyn = phdr.pack(2, 6, dyn_off, dyn_off, dyn_off, dyn_len, dyn_len, 8)
        else:
            load = phdr.pack(1, 0, 0, 0, len(out), len(out), 5, 0x1000)
            dyn = phdr.pack(2, dyn_off, dyn_off, dyn_off, dyn_len, dyn_len, 6, 8)
        out[ehsize : ehsize + 2 * phentsize] = load + dyn
    return Built(bytes(out), offsets, shoff)


def fatbin_entry(
    kind: int,
    arch: int,
    *,
    flags: int = 0x11,
    payload: bytes = b"\x01" * 24,
    header_size: int = 64,
    payload_size: int | None = None,
) -> bytes:
    """One fatbin entry: header (kind, header size, payload size, arch, flags) then payload."""
    head = bytearray(header_size)
    struct.pack_into(
        "<HHIQ", head, 0, kind, 0x0101, header_size, len(payload) if payload_size is None else payload_size
    )
    if header_size >= 0x20:
        struct.pack_into("<I", head, 0x1C, arch)
    if header_size >= 0x30:
        struct.pack_into("<Q", head, 0x28, flags)
    return bytes(head) + payload


def fatbinary(
    *entries: bytes,
    version: int = 1,
    header_size: int = 16,
    payload_size: int | None = None,
    magic: int = FATBIN_MAGIC,
) -> bytes:
    body = b"".join(entries)
    size = len(body) if payload_size is None else payload_size
    head = struct.pack("<IHHQ", magic, version, header_size, size)
    head += b"\0" * (header_size - len(head)) if header_size > len(head) else b""
    return head[: max(header_size, 16)] + body
