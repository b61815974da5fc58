"""Device code a library carries as plain data: cubins and fatbins embedded in ``.rodata`` or ``.data``.

Some libraries load part of their device code themselves (``cuModuleLoadData`` on an image
compiled into the library as a byte array) instead of letting the CUDA runtime register it from
``.nv_fatbin``: cuFFT 12.0 keeps 23,983 fatbinaries in ``.ldata``, cuSPARSE 12.6 34 in
``.rodata``. The audit finds them by their magic (a cubin: an ELF header for EM_CUDA; a
fatbinary: 0xBA55ED50, version 1, a 16-byte header and a payload that parses) and reads their
targets, but cannot tie them to a kernel or a GPU: which image a library loads on which GPU is
its own code's decision. They are reported as such (:mod:`release.audit.checks.device_code`: a finding
the row can allow).

The file is memory-mapped and searched section by section with the C library's ``memmem``
(through ctypes: three times ``mmap.find``'s speed, and without the GIL, so the platform analysis
runs beside it; ``mmap.find`` where no ``memmem`` is found); nothing is copied but the headers of
what is found. Fatbinary and cubin entries inside an image are skipped.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import mmap
import os
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from release.binary.cubin import PREFIX, cubin_target
from release.binary.elf import SHT_NOBITS, ElfInfo
from release.binary.fatbin import (
    FATBIN_MAGIC,
    FLAG_ARCH_SPECIFIC,
    FLAG_FAMILY,
    KIND_LTOIR,
    KIND_PTX,
    KIND_SASS,
    Kind,
    Variant,
    target_name,
)

__all__ = ["DATA_SECTIONS", "EmbeddedImage", "find_embedded"]

DATA_SECTIONS = (".rodata", ".data", ".lrodata", ".ldata")  # and their .rodata.* / .data.rel.ro kin
# What is searched: a cubin's magic with ELFCLASS64 and a fatbinary's magic with version 1 and its
# 16-byte header size; any other hit of the bare magics is refused by _cubin/_fatbin anyway, and the
# longer needles let the search skip further (15 % less time on cuRAND's 41 MB of data sections).
_ELF = b"\x7fELF\x02"
_FATBIN = struct.pack("<IHH", FATBIN_MAGIC, 1, 16)
MAX_IMAGES = 100_000  # a hostile library cannot make the report unbounded
_KINDS: dict[int, Kind] = {KIND_SASS: "sass", KIND_PTX: "ptx", KIND_LTOIR: "ltoir"}


@dataclass(frozen=True)
class EmbeddedImage:
    """One device code image found as data in a host library."""

    section: str
    offset: int  # file offset
    kind: Literal["cubin", "fatbin"]
    size: int
    targets: tuple[str, ...]  # sm_80, compute_90, sm_100f, ... (a cubin: one)


def _sections(info: ElfInfo) -> Iterator[tuple[str, int, int]]:
    for s in info.sections:
        if s.type == SHT_NOBITS or s.size == 0:
            continue
        if s.name.startswith(DATA_SECTIONS):
            yield s.name, s.offset, s.size


Find = Callable[[bytes, int, int], int]  # (needle, start, end) -> offset of the first hit, or -1


class _Libc:
    def __init__(self, lib: ctypes.CDLL) -> None:
        self.memmem = lib.memmem
        self.memmem.restype = ctypes.c_void_p
        self.memmem.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        self.mmap = lib.mmap
        self.mmap.restype = ctypes.c_void_p
        self.mmap.argtypes = [
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_int,
            ctypes.c_long,
        ]
        self.munmap = lib.munmap
        self.munmap.restype = ctypes.c_int
        self.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


@functools.cache
def _libc() -> _Libc | None:
    try:
        return _Libc(ctypes.CDLL(None))
    except (OSError, AttributeError):
        return None


Buffer = mmap.mmap | ctypes.Array[ctypes.c_char]  # the file's bytes, mapped once


@contextlib.contextmanager
def _mapped(fd: int, size: int, *, native: bool = True) -> Iterator[tuple[Buffer, Find]]:
    """The file mapped read-only, and a search over it: ``memmem`` on a map made through ctypes
    (the GIL released while it searches), else a Python :class:`mmap.mmap` and its ``find``. One
    map only: a second one would count each page twice in the audit's RSS."""
    libc = _libc() if native else None
    base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0) if libc is not None else None
    if libc is None or base is None or base == ctypes.c_void_p(-1).value:
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
            yield mm, mm.find
        return
    memmem = libc.memmem

    def find(needle: bytes, start: int, end: int) -> int:
        if end - start < len(needle):
            return -1
        hit = memmem(base + start, end - start, needle, len(needle))
        return -1 if hit is None else int(hit) - base

    try:
        yield (ctypes.c_char * size).from_address(base), find  # read only: never written through
    finally:
        libc.munmap(base, size)


def find_embedded(
    path: str | os.PathLike[str], info: ElfInfo, *, native: bool = True
) -> tuple[EmbeddedImage, ...]:
    """Every cubin or fatbinary image inside the data sections of the ELF file ``path``
    (``native=False``: searched with ``mmap.find``, not ``memmem``; the same images)."""
    ranges = list(_sections(info))
    if not ranges:
        return ()
    with open(path, "rb") as f:  # noqa: PTH123 - a descriptor for mmap
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return ()
        with _mapped(f.fileno(), size, native=native) as (mm, find):
            out: list[EmbeddedImage] = []
            for name, start, length in ranges:
                end = min(start + length, size)
                out.extend(_scan(mm, find, name, start, end, MAX_IMAGES - len(out)))
                if len(out) >= MAX_IMAGES:
                    break
            return tuple(out)


def _scan(mm: Buffer, find: Find, section: str, start: int, end: int, room: int) -> list[EmbeddedImage]:
    out: list[EmbeddedImage] = []
    at = start
    # the next hit of each magic at or after ``at`` (-1: none left), searched again once passed; the
    # first search is made here, whatever ``start`` is (a section at file offset 0 included)
    elf, fat = find(_ELF, start, end), find(_FATBIN, start, end)
    while at < end and len(out) < room:
        if elf != -1 and elf < at:
            elf = find(_ELF, at, end)
        if fat != -1 and fat < at:
            fat = find(_FATBIN, at, end)
        hits = [h for h in (elf, fat) if h != -1]
        if not hits:
            break
        hit = min(hits)
        image = _fatbin(mm, section, hit, end) if hit == fat else _cubin(mm, section, hit, end)
        if image is None:
            at = hit + 4
            continue
        out.append(image)
        at = hit + max(image.size, 4)
    return out


def _fatbin(mm: Buffer, section: str, at: int, end: int) -> EmbeddedImage | None:
    """One fatbinary at ``at``: its entries' targets, read straight from the map (cuFFT has 23,983)."""
    if at % 8 or at + 16 > end:
        return None
    _magic, version, header_size, payload = struct.unpack_from("<IHHQ", mm, at)
    stop = at + header_size + payload
    if version != 1 or header_size != 16 or payload == 0 or stop > end:
        return None
    targets: list[str] = []
    rel = at + header_size
    while rel + 0x30 <= stop:
        kind_code, _v, entry_size, size = struct.unpack_from("<HHIQ", mm, rel)
        if kind_code == 0 and entry_size == 0:
            break  # zero padding to the end
        kind = _KINDS.get(kind_code)
        if kind is None or entry_size < 0x30 or rel + entry_size + size > stop:
            return None
        (arch,) = struct.unpack_from("<I", mm, rel + 0x1C)
        (flags,) = struct.unpack_from("<Q", mm, rel + 0x28)
        if arch == 0 or (flags & FLAG_ARCH_SPECIFIC and flags & FLAG_FAMILY):
            return None
        variant: Variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
        targets.append(target_name(kind, arch, variant))
        rel += entry_size + size
    return EmbeddedImage(section, at, "fatbin", header_size + payload, tuple(targets)) if targets else None


def _read(mm: Buffer, at: int, size: int) -> bytes:
    """``size`` bytes at ``at``, never past the map's end (a slice of either kind of map)."""
    if isinstance(mm, mmap.mmap):
        return mm[at : at + size]
    return ctypes.string_at(ctypes.addressof(mm) + at, max(0, min(size, len(mm) - at)))


_SHDR = struct.Struct("<IIQQQQIIQQ")  # an ELF64 section header: name, type, flags, addr, offset, size, ...


def _cubin_extent(mm: Buffer, head: bytes, at: int, end: int) -> int | None:
    """The bytes of the cubin at ``at``: to the end of its header tables and of every section with file
    bytes (ptxas writes the section table first in many cubins: CUPTI 13.0's, 92 of 94); None when a
    table or section lies outside ``end`` or the tables are not ELF64's."""
    phoff, shoff = struct.unpack_from("<QQ", head, 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", head, 0x36)
    if shoff == 0 or shentsize != _SHDR.size or (phnum and phentsize != 56):
        return None
    size = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    if size <= 0x40 or at + size > end:
        return None
    table = _read(mm, at + shoff, shentsize * shnum)
    for i in range(shnum):
        _name, kind, _flags, _addr, offset, length, *_rest = _SHDR.unpack_from(table, i * _SHDR.size)
        if kind != SHT_NOBITS:
            size = max(size, offset + length)
    return size if at + size <= end else None


def _cubin(mm: Buffer, section: str, at: int, end: int) -> EmbeddedImage | None:
    if at + 0x40 > end:
        return None
    head = _read(mm, at, 0x40)
    if struct.unpack_from("<H", head, 0x12)[0] != 190 or head[4] != 2:
        return None
    size = _cubin_extent(mm, head, at, end)
    if size is None:
        return None
    target = cubin_target(head, _read(mm, at, min(size, PREFIX)))
    if target is None:
        return None
    variant: Variant = "a" if target.variant == "a" else "f" if target.variant == "f" else ""
    return EmbeddedImage(section, at, "cubin", size, (target_name("sass", target.arch, variant),))
