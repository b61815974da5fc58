"""Read the device code table of a CUDA binary: its fatbinaries, from the ELF sections NVIDIA's tools read.

Only headers are read; payloads (cubins, PTX, LTO-IR, often compressed) are skipped with a
seek, so a 500 MB library costs a few hundred kilobytes of I/O.

Two ELF sections hold fatbinaries, as cuobjdump reads them:

* ``.nv_fatbin``: the *executable* device code, what the CUDA runtime registers and a GPU runs;
* ``__nv_relfatbin``: *relocatable* device code (``nvcc -rdc=true``), input to a device link.
  A device-linked library has both (cuobjdump lists only the executable one unless ``-all``);
  a library that was never device-linked has only this one, and cannot be loaded (its host
  code calls ``__cudaRegisterLinkedBinary_*``, which only the device-link step defines).

Layout (little endian; checked against nvcc 13.0 and 13.2 output, cuobjdump's header dump
and the CUDA libraries in the nvidia-* and torch wheels):

A section holds a run of fatbinaries, each starting 8-byte aligned, with only zero bytes
between them. A fatbinary is a 16-byte header::

    +0x00 u32 magic 0xBA55ED50   +0x04 u16 version (1)   +0x06 u16 header size
    +0x08 u64 payload size (the entries that follow the header)

followed by entries laid end to end, each an entry header then its payload::

    +0x00 u16 kind (1 PTX, 2 ELF/SASS cubin, 8 LTO-IR)   +0x04 u32 entry header size
    +0x08 u64 payload size   +0x10 u32 compressed size   +0x18 u16 minor, +0x1a u16 major:
    the code version (a PTX entry's PTX ISA: [9,2] from CUDA 13.2, cuobjdump's ``code version``)
    +0x1c u32 arch (90 for sm_90)   +0x28 u64 flags   +0x38 u64 uncompressed size

Flags: 0x100000 marks an arch-specific target (``sm_90a``), 0x200000 a family target
(``sm_100f``); 0x2000 an LZ4-compressed payload (an LZ4 block), 0x8000 a zstd-compressed one
(a zstd frame; nvcc 13's default for PTX, and for every entry of the CUDA 13 libraries and
torch's). Bits seen besides: 0x1 and 0x10 always, 0x10000 on LTO-IR, 0x1000000 on cubins for
sm_100 and newer; none of them changes which GPU an entry runs on.

Anything that does not fit (bad magic, a size that runs past its container, an unknown kind,
both variant bits) raises :class:`FatbinError` naming the file and the file offset; a partial
table is never returned. :func:`parse_range` reads fatbinaries anywhere in a file (a ``.fatbin``
file of a wheel, an image embedded as data).
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass, field
from typing import Literal, Protocol

from release.binary.elf import SHT_NOBITS, ElfError, ElfInfo, SectionReader, read_elf
from release.binary.elf_core import ElfFile
from release.core.errors import InputError

FATBIN_SECTION = ".nv_fatbin"
RELFATBIN_SECTION = "__nv_relfatbin"
DEVICE_SECTIONS = (FATBIN_SECTION, RELFATBIN_SECTION)
FATBIN_MAGIC = 0xBA55ED50
FATBIN_VERSION = 1
ALIGN = 8

KIND_PTX = 1
KIND_SASS = 2
KIND_LTOIR = 8

FLAG_ARCH_SPECIFIC = 0x100000  # sm_90a
FLAG_FAMILY = 0x200000  # sm_100f
FLAG_LZ4 = 0x2000  # payload is one LZ4 block
FLAG_ZSTD = 0x8000  # payload is a zstd frame

Kind = Literal["sass", "ptx", "ltoir"]
Variant = Literal["", "a", "f"]
Compression = Literal["lz4", "zstd"]

_KINDS: dict[int, Kind] = {KIND_SASS: "sass", KIND_PTX: "ptx", KIND_LTOIR: "ltoir"}
_PREFIX: dict[Kind, str] = {"sass": "sm", "ptx": "compute", "ltoir": "lto"}

_HEADER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ")
_ENTRY_MIN = 0x30  # through the flags word
_VERSION_AT = 0x18
_ARCH_AT = 0x1C
_FLAGS_AT = 0x28
_UNCOMPRESSED_AT = 0x38
_SCAN_CHUNK = 1 << 16


class FatbinError(InputError):
    """Malformed or truncated fatbin data. The message names file and offset."""


def target_name(kind: Kind, arch: int, variant: Variant = "") -> str:
    """``sm_90a`` for SASS, ``compute_120`` for PTX, ``lto_90`` for LTO-IR."""
    return f"{_PREFIX[kind]}_{arch}{variant}"


@dataclass(frozen=True)
class FatbinEntry:
    """One device code entry. Equality and hashing use (kind, arch, variant) only."""

    kind: Kind
    arch: int
    variant: Variant = ""
    offset: int = field(default=0, compare=False)  # file offset of the entry header
    payload_size: int = field(default=0, compare=False)
    flags: int = field(default=0, compare=False)
    header_size: int = field(default=0, compare=False)
    code_version: tuple[int, int] = field(default=(0, 0), compare=False)  # (major, minor) at +0x1a/+0x18
    uncompressed_size: int = field(default=0, compare=False)  # 0: not recorded

    @property
    def name(self) -> str:
        return target_name(self.kind, self.arch, self.variant)

    @property
    def compression(self) -> Compression | None:
        if self.flags & FLAG_ZSTD:
            return "zstd"
        if self.flags & FLAG_LZ4:
            return "lz4"
        return None

    @property
    def compressed(self) -> bool:
        return self.compression is not None

    @property
    def ptx_isa(self) -> tuple[int, int] | None:
        """The PTX ISA version of a PTX entry (``(9, 2)``); None for other kinds or when unrecorded."""
        return self.code_version if self.kind == "ptx" and self.code_version != (0, 0) else None

    @property
    def payload_offset(self) -> int:
        return self.offset + self.header_size


@dataclass(frozen=True)
class Fatbinary:
    """One fatbinary (one translation unit, or the link step's own): its file offset and entries."""

    offset: int
    entries: tuple[FatbinEntry, ...]
    size: int = field(default=0, compare=False)  # header plus payload, in bytes
    relocatable: bool = field(default=False, compare=False)  # from __nv_relfatbin


def has_device_code(path: str | os.PathLike[str], info: ElfInfo | None = None) -> bool:
    """True when the ELF file has a non-empty ``.nv_fatbin`` or ``__nv_relfatbin`` section with file bytes.

    Decided from the section table only, never from a tool's output. A SHT_NOBITS
    section (a split debug file) has no device code. ElfError for a
    non-ELF file: callers choose what a non-ELF ``.so`` means.
    """
    info = info or read_elf(path)
    return any(
        s.size > 0 and s.type != SHT_NOBITS for name in DEVICE_SECTIONS for s in info.sections_named(name)
    )


def read_fatbins(
    path: str | os.PathLike[str], info: ElfInfo | None = None, *, relocatable: bool = False
) -> tuple[Fatbinary, ...]:
    """Every fatbinary in the file's ``.nv_fatbin`` section(s), in file order (``relocatable=True``:
    those of ``__nv_relfatbin``).

    An empty tuple when there is no such section, it is empty, or it is SHT_NOBITS.
    FatbinError for malformed or truncated data; ElfError for a bad ELF file.
    """
    info = info or read_elf(path)
    out: list[Fatbinary] = []
    for section in info.sections_named(RELFATBIN_SECTION if relocatable else FATBIN_SECTION):
        if section.size == 0 or section.type == SHT_NOBITS:
            continue
        with SectionReader(path, section) as reader:
            source = _Source(reader.path, section.offset, section.size, reader.read, section.name)
            out.extend(_Parser(source, relocatable=relocatable).parse())
    return tuple(out)


def all_entries(path: str | os.PathLike[str]) -> tuple[FatbinEntry, ...]:
    """Every entry of every executable fatbinary, flattened, in file order."""
    return tuple(e for fb in read_fatbins(path) for e in fb.entries)


def parse_range(
    path: str | os.PathLike[str], offset: int, size: int, *, what: str = "fatbin data"
) -> tuple[Fatbinary, ...]:
    """The fatbinaries in ``size`` bytes of any file at ``offset``: a ``.fatbin`` file, or a fatbin
    image embedded as data. FatbinError when the bytes are not a run of fatbinaries."""
    with ElfFile(path) as f:
        if offset < 0 or offset + size > f.size:
            raise FatbinError(f"{f.path}: {what} at {offset:#x} ({size} bytes) lies outside the file")

        def read(rel: int, n: int) -> bytes:
            if rel < 0 or n < 0 or rel + n > size:
                raise ElfError(f"{f.path}: read of {n} bytes at {rel:#x} lies outside the {what}")
            return f.read(offset + rel, n, what)

        return tuple(_Parser(_Source(f.path, offset, size, read, what)).parse())


class _Read(Protocol):
    def __call__(self, rel: int, n: int, /) -> bytes: ...


@dataclass(frozen=True)
class _Source:
    path: str
    base: int  # file offset of byte 0
    size: int
    read: _Read
    what: str  # ".nv_fatbin", "__nv_relfatbin", "a .fatbin file"


class _Parser:
    def __init__(self, source: _Source, *, relocatable: bool = False) -> None:
        self.source = source
        self.path = source.path
        self.base = source.base
        self.size = source.size
        self.relocatable = relocatable

    def fail(self, rel: int, message: str) -> FatbinError:
        return FatbinError(
            f"{self.path}: malformed {self.source.what} at file offset {self.base + rel:#x}: {message}"
        )

    def read(self, rel: int, size: int) -> bytes:
        try:
            return self.source.read(rel, size)
        except ElfError as exc:
            raise self.fail(rel, f"cannot read {size} bytes: {exc}") from exc

    def skip_zeros(self, rel: int, end: int) -> int:
        """First offset in [rel, end) holding a non-zero byte, or ``end``.

        Reads grow from 16 bytes, so the usual case (a header right here) is one
        small read and a long run of padding is still read in large chunks.
        """
        chunk_size = 16
        while rel < end:
            chunk = self.read(rel, min(chunk_size, end - rel))
            stripped = chunk.lstrip(b"\0")
            if stripped:
                return rel + len(chunk) - len(stripped)
            rel += len(chunk)
            chunk_size = min(chunk_size * 4, _SCAN_CHUNK)
        return end

    def parse(self) -> list[Fatbinary]:
        out: list[Fatbinary] = []
        rel = 0
        while True:
            rel = self.skip_zeros(rel, self.size)
            if rel >= self.size:
                break
            out.append(self.fatbinary(rel))
            rel += out[-1].size
        if not out:
            raise self.fail(0, f"the section holds {self.size} zero bytes and no fatbinary")
        return out

    def fatbinary(self, rel: int) -> Fatbinary:
        if rel % ALIGN:
            found = self.read(rel, min(8, self.size - rel))
            raise self.fail(
                rel,
                f"found bytes {found.hex(' ')} where only zero padding or an {ALIGN}-byte "
                f"aligned fatbinary may be",
            )
        if self.size - rel < _HEADER.size:
            raise self.fail(
                rel,
                f"truncated fatbinary header: {self.size - rel} bytes left in the section, "
                f"{_HEADER.size} needed",
            )
        magic, version, header_size, payload_size = _HEADER.unpack(self.read(rel, _HEADER.size))
        if magic != FATBIN_MAGIC:
            raise self.fail(
                rel,
                f"expected fatbinary magic {FATBIN_MAGIC:#010x} or zero padding, found {magic:#010x}",
            )
        if version != FATBIN_VERSION:
            raise self.fail(rel, f"unsupported fatbinary version {version} (expected 1)")
        if header_size < _HEADER.size:
            raise self.fail(rel, f"fatbinary header size {header_size} is below {_HEADER.size}")
        end = rel + header_size + payload_size
        if end > self.size:
            raise self.fail(
                rel,
                f"truncated: the fatbinary claims {header_size + payload_size} bytes but "
                f"only {self.size - rel} remain in the section",
            )
        entries = self.entries(rel + header_size, end)
        return Fatbinary(self.base + rel, entries, header_size + payload_size, self.relocatable)

    def entries(self, rel: int, end: int) -> tuple[FatbinEntry, ...]:
        out: list[FatbinEntry] = []
        while rel < end:
            if end - rel < _ENTRY_MIN:
                if self.skip_zeros(rel, end) == end:
                    break
                raise self.fail(
                    rel,
                    f"truncated entry header: {end - rel} bytes left in the fatbinary, {_ENTRY_MIN} needed",
                )
            head = self.read(rel, min(_UNCOMPRESSED_AT + 8, end - rel))
            if not any(head[:_ENTRY_MIN]) and self.skip_zeros(rel, end) == end:
                break  # zero padding up to the end of the fatbinary
            kind_code, _version, header_size, payload_size = _ENTRY.unpack_from(head)
            (arch,) = struct.unpack_from("<I", head, _ARCH_AT)
            (flags,) = struct.unpack_from("<Q", head, _FLAGS_AT)
            minor, major = struct.unpack_from("<HH", head, _VERSION_AT)
            kind = _KINDS.get(kind_code)
            if kind is None:
                raise self.fail(
                    rel,
                    f"unknown entry kind {kind_code} (known: 1 PTX, 2 ELF/SASS, 8 LTO-IR)",
                )
            if header_size < _ENTRY_MIN:
                raise self.fail(rel, f"entry header size {header_size} is below {_ENTRY_MIN}")
            if rel + header_size + payload_size > end:
                raise self.fail(
                    rel,
                    f"truncated: the {kind} entry claims {header_size + payload_size} bytes "
                    f"but only {end - rel} remain in its fatbinary",
                )
            if arch == 0:
                raise self.fail(rel, f"the {kind} entry names architecture 0")
            if flags & FLAG_ARCH_SPECIFIC and flags & FLAG_FAMILY:
                raise self.fail(
                    rel,
                    f"the {kind} entry for arch {arch} is flagged both arch-specific and "
                    f"family (flags {flags:#x})",
                )
            uncompressed = 0
            if header_size >= _UNCOMPRESSED_AT + 8 and len(head) >= _UNCOMPRESSED_AT + 8:
                (uncompressed,) = struct.unpack_from("<Q", head, _UNCOMPRESSED_AT)
            variant: Variant = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
            out.append(
                FatbinEntry(
                    kind,
                    arch,
                    variant,
                    self.base + rel,
                    payload_size,
                    flags,
                    header_size,
                    (major, minor),
                    uncompressed,
                )
            )
            rel += header_size + payload_size
        return tuple(out)
