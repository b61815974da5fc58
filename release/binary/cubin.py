"""Look inside device code entries: decompress the start of an entry, tell whether a unit holds kernels.

A fatbinary's entry headers say which GPUs it targets (:mod:`release.binary.fatbin`), not whether
it holds any kernel: nvcc's link step adds a fatbinary of its own to every binary it links (SASS
for the link's targets, no PTX, no kernel), and a ``.cu`` file with only host code or device
globals still gets one. Those units run nothing, so the GPU table must not count them. This
module reads just enough of an entry to tell:

* a cubin (SASS) holds code when its section names include ``.text.<function>``: its section
  name table comes right after the 64-byte ELF header, so the first kilobytes suffice (the
  link step's unit has only ``.nv.info``, ``.nv.callgraph`` and notes);
* PTX holds a kernel when it has an ``.entry`` directive;
* a cubin's ``.note.nv.tkinfo`` names the ptxas that wrote it (``Cuda compilation tools,
  release 13.0``) and its ``-arch sm_100f``.

A cubin's ELF header says its architecture in two layouts, told apart by ``e_ident[EI_ABIVERSION]``
(checked on cubins of the CUDA 12.4 and 13.0 ptxas, and on CUPTI 13.0's cubins against cuobjdump):

* **ABI version 7** (OS/ABI 0x33; every ptxas up to CUDA 12.x): the SM in the low byte of
  ``e_flags`` (``0x500550``: sm_80, ``0x5a0d5a``: sm_90a), bit 0x800 the ``a`` variant
  (``EF_CUDA_ACCELERATORS``) from sm_90a on (older ptxas set that bit as ``EF_CUDA_SW_1729687``:
  ``0x3c0d3c`` is a plain sm_60), the virtual architecture in bits 16-23, and ``e_version`` the
  toolkit (``124``: CUDA 12.4). CUDA 12.4's ptxas writes no ``.note.nv.tkinfo``.
* **ABI version 8** (OS/ABI 0x41; CUDA 13): the SM in bits 8-15 (``0x6005004``: sm_80),
  ``e_version`` 1; the a/f variant and the toolkit only in ``.note.nv.tkinfo`` (ptxas 13.0
  writes the same flags for sm_90 and sm_90a).

Compressed payloads: LZ4 blocks (flag 0x2000) are decoded here in Python; zstd frames (flag
0x8000) through the system's ``libzstd.so.1`` (its public streaming API, by ctypes). Output
is always bounded: a prefix of :data:`PREFIX` bytes, the whole entry only when the prefix does
not answer, and never more than :data:`MAX_ENTRY` bytes. Without libzstd a zstd entry cannot be
looked into, and the unit's kernels are *unknown* (counted as holding kernels: fail closed).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from release.binary.fatbin import Fatbinary, FatbinEntry

__all__ = [
    "MAX_ENTRY",
    "PREFIX",
    "DecodeError",
    "UnitFacts",
    "cubin_target",
    "decompress",
    "header_target",
    "lz4_block",
    "unit_facts",
    "zstd_available",
]

PREFIX = 64 * 1024  # bytes of an entry looked at first
MAX_ENTRY = 64 * 1024 * 1024  # never decompress more than this of one entry
EM_CUDA = 190
ABI_V8 = 8  # e_ident[EI_ABIVERSION] from CUDA 13 on: the SM moved to e_flags bits 8-15
ACCELERATORS_V7 = 0x800  # e_flags of ABI version 7: the "a" variant (sm_90a and later)
FIRST_ARCH_SPECIFIC = 90  # sm_90a, CUDA 12.0: before it, ptxas used bit 0x800 for something else

_TEXT = re.compile(rb"\0\.text\.[^\0]")
_ENTRY = re.compile(rb"(?m)^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s")
_RELEASE = re.compile(rb"Cuda compilation tools, release (\d{1,2})\.(\d{1,2})")
_ARCH = re.compile(rb"-arch(?:=|\s+)sm_(\d{2,3})([af]?)\b")


class DecodeError(Exception):
    """A compressed payload that does not decode."""


# --------------------------------------------------------------------------- LZ4


def _lz4_more(src: bytes, i: int, length: int) -> tuple[int, int]:
    """A length of 15 continues in the bytes at ``i``: each adds its value, 255 says one more
    follows. The full length and where the next field starts (IndexError past the input)."""
    while True:
        b = src[i]
        i += 1
        length += b
        if b != 255:
            return length, i


def lz4_block(src: bytes, limit: int) -> bytes:
    """Decode an LZ4 block (no frame) until ``limit`` bytes are out or the input ends. A fatbin pads an
    entry's payload with zero bytes to 8 (spconv-cu126 2.3.8's PTX entries), which are no sequence:
    with ``limit`` the entry's uncompressed size, decoding stops at it, before the padding."""
    out = bytearray()
    i, n = 0, len(src)
    try:
        while i < n and len(out) < limit:
            token = src[i]
            i += 1
            length = token >> 4
            if length == 15:
                length, i = _lz4_more(src, i, length)
            out += src[i : i + length]
            i += length
            if i >= n or len(out) >= limit:
                break  # the last sequence is literals only (the rest, if any, is padding or not needed)
            offset = src[i] | (src[i + 1] << 8)
            i += 2
            if offset == 0 or offset > len(out):
                raise DecodeError(f"LZ4 match offset {offset} points before the start of the output")
            match = token & 15
            if match == 15:
                match, i = _lz4_more(src, i, match)
            match += 4
            start = len(out) - offset
            if offset >= match:
                out += out[start : start + match]
            else:  # overlapping copy: the pattern repeats
                pattern = bytes(out[start:])
                out += (pattern * (match // len(pattern) + 1))[:match]
    except IndexError:
        raise DecodeError("LZ4 block ends in the middle of a sequence") from None
    return bytes(out[:limit])


# --------------------------------------------------------------------------- zstd (system library)


class _Buffer(ctypes.Structure):
    _fields_ = (("data", ctypes.c_void_p), ("size", ctypes.c_size_t), ("pos", ctypes.c_size_t))


@dataclass(frozen=True)
class _Zstd:
    lib: ctypes.CDLL

    def decode(self, src: bytes, limit: int) -> bytes:
        z = self.lib
        stream = z.ZSTD_createDStream()
        if not stream:
            raise DecodeError("libzstd could not create a decompression stream")
        try:
            z.ZSTD_initDStream(stream)
            out = ctypes.create_string_buffer(limit)
            source = ctypes.create_string_buffer(src, len(src))
            inb = _Buffer(ctypes.cast(source, ctypes.c_void_p), len(src), 0)
            outb = _Buffer(ctypes.cast(out, ctypes.c_void_p), limit, 0)
            while outb.pos < limit and inb.pos < inb.size:
                before = (inb.pos, outb.pos)
                rc = z.ZSTD_decompressStream(stream, ctypes.byref(outb), ctypes.byref(inb))
                if z.ZSTD_isError(rc):
                    raise DecodeError(f"zstd: {z.ZSTD_getErrorName(rc).decode(errors='replace')}")
                if rc == 0 or (inb.pos, outb.pos) == before:
                    break
            return out.raw[: outb.pos]
        finally:
            z.ZSTD_freeDStream(stream)


@functools.cache
def _zstd() -> _Zstd | None:
    name = ctypes.util.find_library("zstd") or "libzstd.so.1"
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        return None
    lib.ZSTD_createDStream.restype = ctypes.c_void_p
    lib.ZSTD_initDStream.argtypes = (ctypes.c_void_p,)
    lib.ZSTD_initDStream.restype = ctypes.c_size_t
    lib.ZSTD_freeDStream.argtypes = (ctypes.c_void_p,)
    lib.ZSTD_freeDStream.restype = ctypes.c_size_t
    lib.ZSTD_decompressStream.argtypes = (ctypes.c_void_p, ctypes.POINTER(_Buffer), ctypes.POINTER(_Buffer))
    lib.ZSTD_decompressStream.restype = ctypes.c_size_t
    lib.ZSTD_isError.argtypes = (ctypes.c_size_t,)
    lib.ZSTD_isError.restype = ctypes.c_uint
    lib.ZSTD_getErrorName.argtypes = (ctypes.c_size_t,)
    lib.ZSTD_getErrorName.restype = ctypes.c_char_p
    return _Zstd(lib)


def zstd_available() -> bool:
    return _zstd() is not None


# --------------------------------------------------------------------------- entries


def _read(fd: int, offset: int, size: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise DecodeError(f"{size} bytes at {offset:#x} run past the end of the file")
    return data


def decompress(fd: int, entry: FatbinEntry, limit: int) -> bytes | None:
    """Up to ``limit`` bytes of the entry's payload, decompressed; None when it is zstd and this
    machine has no libzstd. DecodeError for a payload that does not decode."""
    limit = min(limit, MAX_ENTRY, entry.uncompressed_size or MAX_ENTRY)
    codec = entry.compression
    if codec is None:
        return _read(fd, entry.payload_offset, min(entry.payload_size, limit))
    if codec == "lz4":
        need = min(entry.payload_size, limit + limit // 255 + 64)
        return lz4_block(_read(fd, entry.payload_offset, need), limit)
    zstd = _zstd()
    if zstd is None:
        return None
    need = min(entry.payload_size, limit + 256 * 1024)  # a zstd block is at most 128 KiB
    return zstd.decode(_read(fd, entry.payload_offset, need), limit)


def _full_size(entry: FatbinEntry) -> int:
    return entry.uncompressed_size or (entry.payload_size if not entry.compressed else MAX_ENTRY)


def _holds_code(entry: FatbinEntry, data: bytes) -> bool:
    if entry.kind == "ptx":
        return _ENTRY.search(data) is not None
    return data[:4] != b"\x7fELF" or _TEXT.search(data) is not None  # not an ELF cubin: assume code


@dataclass(frozen=True)
class UnitFacts:
    """What the look inside one fatbinary found."""

    kernels: bool | None  # None: could not be told (no libzstd, an undecodable payload)
    toolkits: tuple[tuple[int, int], ...]  # ptxas releases named by the cubins looked at
    problem: str | None = None  # why kernels is None


def unit_facts(fd: int, unit: Fatbinary) -> UnitFacts:
    """Whether ``unit`` holds kernels (an ``.entry`` in its PTX or ``.text.*`` in a cubin), looking at
    its smallest entries first and stopping at the first that does. LTO-IR is not looked into."""
    toolkits: set[tuple[int, int]] = set()
    unknown: str | None = None
    looked = [e for e in unit.entries if e.kind in ("sass", "ptx")]
    # cheapest first: an uncompressed cubin answers from its first kilobytes; PTX may hold megabytes of
    # data before its first .entry; compressed entries cost a decompression
    for entry in sorted(looked, key=lambda e: (e.compressed, e.kind != "sass", e.payload_size)):
        try:
            data = decompress(fd, entry, PREFIX)
            if data is None:
                unknown = f"{entry.name} is zstd-compressed and this machine has no libzstd.so.1"
                continue
            if entry.kind == "sass":
                toolkits.update(_cubin_toolkits(data))
            if _holds_code(entry, data):
                return UnitFacts(True, tuple(sorted(toolkits)))
            size = _full_size(entry)
            if len(data) < min(size, MAX_ENTRY) and size > PREFIX:
                data = decompress(fd, entry, size) or b""
                if _holds_code(entry, data):
                    return UnitFacts(True, tuple(sorted(toolkits)))
        except (DecodeError, OSError) as exc:
            unknown = f"{entry.name} could not be decompressed: {exc}"
    if unknown is not None:
        return UnitFacts(None, tuple(sorted(toolkits)), unknown)
    return UnitFacts(False, tuple(sorted(toolkits)))


def _releases(data: bytes) -> Iterable[tuple[int, int]]:
    return {(int(m[1]), int(m[2])) for m in _RELEASE.finditer(data)}


def _cubin_toolkits(data: bytes) -> set[tuple[int, int]]:
    """The ptxas releases a cubin (or the start of one) names: its ``.note.nv.tkinfo``, else the
    toolkit an ABI-7 header keeps in ``e_version``."""
    found = set(_releases(data))
    if not found and is_cubin_header(data) and (toolkit := _header_toolkit(data)) is not None:
        found.add(toolkit)
    return found


# --------------------------------------------------------------------------- cubin files and images


@dataclass(frozen=True)
class CubinTarget:
    arch: int  # 90
    variant: str  # "", "a", "f"
    toolkit: tuple[int, int] | None  # the ptxas release that wrote it
    kernels: bool


def header_target(head: bytes) -> tuple[int, str]:
    """(SM, variant) from a cubin's ELF header, by its ABI version (the module docstring): the
    variant only where the header says it (``a`` in ABI version 7), else ``""``."""
    (flags,) = struct.unpack_from("<I", head, 0x30)
    if head[8] >= ABI_V8:
        return (flags >> 8) & 0xFF, ""
    arch = flags & 0xFF
    return arch, "a" if flags & ACCELERATORS_V7 and arch >= FIRST_ARCH_SPECIFIC else ""


def _header_toolkit(head: bytes) -> tuple[int, int] | None:
    """The toolkit an ABI-7 header names in ``e_version`` (``124``: CUDA 12.4; cuobjdump's
    ``toolkit=``); None for ABI version 8 (``e_version`` 1) or a value no toolkit writes."""
    if len(head) < 0x18 or head[8] >= ABI_V8:
        return None
    (version,) = struct.unpack_from("<I", head, 0x14)
    if not 20 <= version < 1000:
        return None
    major, minor = divmod(version, 10)
    return major, minor


def cubin_target(head: bytes, data: bytes) -> CubinTarget | None:
    """The target of a cubin (an ELF file for EM_CUDA) from its ELF header ``head`` and its bytes (or
    their start) ``data``; None when it is not a 64-bit little-endian cubin. The architecture comes
    from the header, by its ABI version; the variant from the ``-arch`` its ``.note.nv.tkinfo``
    names when that is the header's architecture, else from the header (ABI version 7's ``a`` bit)."""
    if len(head) < 0x34 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
        return None
    (machine,) = struct.unpack_from("<H", head, 0x12)
    if machine != EM_CUDA:
        return None
    arch, variant = header_target(head)
    m = _ARCH.search(data)
    if m is not None and int(m[1]) == arch:
        variant = m[2].decode()
    releases = sorted(_releases(data))
    toolkit = releases[-1] if releases else _header_toolkit(head)
    return CubinTarget(arch, variant, toolkit, _TEXT.search(data) is not None)


def is_cubin_header(head: bytes) -> bool:
    return len(head) >= 0x14 and head[:4] == b"\x7fELF" and struct.unpack_from("<H", head, 0x12)[0] == EM_CUDA
