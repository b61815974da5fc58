"""One wheel member's bytes, read in chunks from the archive's raw stream, inflated by the fastest
inflater at hand.

Stored and deflated members (every wheel builder's) are read from where the central directory
places them (:func:`release.audit.reading.limits.check_layout` checked that lies inside the archive and
overlaps no other member), after the local header is checked (magic, name, no encryption, no
patch data). Deflate streams are inflated by ISA-L (the ``isal`` package: 1.6 times zlib's speed
on the CUDA libraries of the audit corpus, 1.0 s against 0.65 s for cuFFT's 273 MB here) when it
is installed, else by zlib; both release the GIL while they inflate. The member must inflate to
exactly the size its directory entry declares (never past it: inflation stops there). The caller
checks the CRC-32 with :class:`Crc`, a hasher it feeds beside the sha256 on its hashing thread,
off the inflating one. Other methods (bzip2, lzma) go through :mod:`zipfile`, which checks the CRC.

Errors: :class:`zipfile.BadZipFile`, :class:`EOFError`, :class:`NotImplementedError` (the audit
makes each a corrupt member).
"""

from __future__ import annotations

import importlib
import os
import struct
import zipfile
import zlib
from collections.abc import Generator
from typing import BinaryIO, Protocol, cast

__all__ = ["CHUNK", "INFLATER", "RAW_METHODS", "READ", "Crc", "member_chunks", "zipfile_chunks"]

CHUNK = 256 * 1024  # inflated bytes per chunk; below glibc's mmap threshold: buffers are reused
READ = 256 * 1024  # compressed bytes per read
RAW_METHODS = (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED)
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # a local file header: magic ... name length, extra length


class _Decompressor(Protocol):
    @property
    def eof(self) -> bool: ...
    @property
    def unconsumed_tail(self) -> bytes: ...
    def decompress(self, data: bytes, /, max_length: int = ...) -> bytes: ...


class _Inflater(Protocol):
    def decompressobj(self, wbits: int = ...) -> _Decompressor: ...
    def crc32(self, data: bytes, value: int = ..., /) -> int: ...


def _fastest_inflater() -> _Inflater:
    """ISA-L's inflate (the ``isal`` package: 1.6x zlib's speed on CUDA libraries here) when it is
    installed, else zlib. Both release the GIL while they inflate and compute CRC-32."""
    try:
        found: _Inflater = cast("_Inflater", importlib.import_module("isal.isal_zlib"))
    except ImportError:
        return zlib
    return found


INFLATER = _fastest_inflater()
_ERRORS: tuple[type[Exception], ...] = (
    zlib.error,
    cast("type[Exception]", getattr(INFLATER, "error", zlib.error)),
)


class Crc:
    """CRC-32 as a hasher, so the :class:`Sink` computes it beside the sha256 (off the inflating thread)."""

    def __init__(self) -> None:
        self.value = 0

    def update(self, data: bytes, /) -> None:
        self.value = INFLATER.crc32(data, self.value)


def zipfile_chunks(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> Generator[bytes, None, None]:
    """A member of another method, through :mod:`zipfile` (which checks its CRC-32)."""
    with archive.open(info) as src:
        while chunk := src.read(CHUNK):
            yield chunk


def member_chunks(f: BinaryIO, info: zipfile.ZipInfo) -> Generator[bytes, None, None]:
    """A stored or deflated member of the archive open as ``f``, in chunks of at most :data:`CHUNK`."""
    f.seek(info.header_offset)
    head = f.read(_LOCAL.size)
    if len(head) < _LOCAL.size or head[:4] != b"PK\x03\x04":
        raise zipfile.BadZipFile("bad magic number for the local file header")
    flags, n, m = _LOCAL.unpack(head)[2], *_LOCAL.unpack(head)[9:11]
    if (flags | info.flag_bits) & 0x41:
        raise NotImplementedError("encrypted member")
    if flags & 0x20:
        raise NotImplementedError("compressed patched data")
    raw_name = f.read(n)
    local = raw_name.decode("utf-8" if flags & 0x800 else "cp437")
    if local != info.orig_filename:
        raise zipfile.BadZipFile(
            f"file name in the directory ({info.orig_filename!r}) and header ({local!r}) differ"
        )
    f.seek(m, os.SEEK_CUR)
    left = info.compress_size
    declared = info.file_size
    produced = 0
    if info.compress_type == zipfile.ZIP_STORED:
        while left > 0:
            chunk = f.read(min(CHUNK, left))
            if not chunk:
                raise EOFError("the member's data ends early")
            left -= len(chunk)
            produced += len(chunk)
            yield chunk
        if produced != declared:
            raise zipfile.BadZipFile(f"stored with {produced:,} bytes, its directory says {declared:,}")
        return
    inflater = INFLATER.decompressobj(-15)
    while not inflater.eof:
        if inflater.unconsumed_tail:
            data = inflater.unconsumed_tail
        elif left > 0:
            data = f.read(min(READ, left))
            if not data:
                raise EOFError("the member's data ends early")
            left -= len(data)
        else:
            data = b""
        try:
            chunk = inflater.decompress(data, CHUNK)
        except _ERRORS as exc:
            raise zipfile.BadZipFile(f"corrupt deflate stream: {exc}") from None
        produced += len(chunk)
        if produced > declared:
            raise zipfile.BadZipFile(f"inflates past {declared:,} bytes, the size its directory declares")
        if chunk:
            yield chunk
        elif not data:
            raise EOFError("the compressed stream ends before its end marker")
    if produced != declared:
        raise zipfile.BadZipFile(f"inflates to {produced:,} bytes, its directory says {declared:,}")
