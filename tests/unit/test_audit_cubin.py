"""release.binary.cubin: decompressing entries (LZ4 here, zstd through libzstd) and telling kernels apart."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
from pathlib import Path

import pytest
from synth_elf import SHT_PROGBITS, build_elf, fatbinary

from release.binary.cubin import DecodeError, cubin_target, lz4_block, unit_facts, zstd_available
from release.binary.fatbin import read_fatbins

CUBIN_WITH_KERNEL = (
    b"\x7fELF" + b"\0" * 60 + b"\0.shstrtab\0.strtab\0.symtab\0.nv.info\0.text._Z6kernelPf\0"
    b"Cuda compilation tools, release 13.2, V13.2.86\0-arch sm_100f -m 64 \0" + b"\0" * 200
)
CUBIN_STUB = (
    b"\x7fELF" + b"\0" * 60 + b"\0.shstrtab\0.strtab\0.symtab\0.nv.info\0.nv.callgraph\0" + b"\0" * 200
)
PTX_KERNEL = b"//\n.version 9.2\n.target sm_80\n.address_size 64\n\n.visible .entry _Z1kPf(\n.param .u64 p)\n{ ret; }\n"
PTX_NO_KERNEL = b"//\n.version 9.0\n.target sm_80\n.address_size 64\n.global .align 4 .u32 g;\n"


def lz4_literals(data: bytes) -> bytes:
    """An LZ4 block holding ``data`` as literals only (the last sequence of any block)."""
    n = len(data)
    if n < 15:
        return bytes([n << 4]) + data
    rest, ext = n - 15, b""
    while rest >= 255:
        ext += b"\xff"
        rest -= 255
    return bytes([0xF0]) + ext + bytes([rest]) + data


def zstd_compress(data: bytes) -> bytes:
    lib = ctypes.CDLL(ctypes.util.find_library("zstd") or "libzstd.so.1")
    lib.ZSTD_compress.restype = ctypes.c_size_t
    lib.ZSTD_compress.argtypes = (
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_int,
    )
    out = ctypes.create_string_buffer(len(data) + 1024)
    n = lib.ZSTD_compress(out, len(out), data, len(data), 3)
    return out.raw[:n]


def entry(
    kind: int, arch: int, payload: bytes, *, flags: int = 0x11, size: int = 0, isa: tuple[int, int] = (0, 0)
) -> bytes:
    head = bytearray(0x48)
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, len(head), len(payload))
    struct.pack_into("<HH", head, 0x18, isa[1], isa[0])
    struct.pack_into("<I", head, 0x1C, arch)
    struct.pack_into("<Q", head, 0x28, flags)
    struct.pack_into("<Q", head, 0x38, size)
    return bytes(head) + payload + b"\0" * (-len(payload) % 8)


def library(tmp_path: Path, *units: bytes) -> Path:
    section = b"".join(units)
    built = build_elf([(".text", SHT_PROGBITS, b"\x90" * 16), (".nv_fatbin", SHT_PROGBITS, section)])
    p = tmp_path / "libk.so"
    p.write_bytes(built.data)
    return p


def facts(path: Path) -> list[tuple[bool | None, tuple[tuple[int, int], ...]]]:
    fd = os.open(path, os.O_RDONLY)
    try:
        return [(f.kernels, f.toolkits) for f in (unit_facts(fd, fb) for fb in read_fatbins(path))]
    finally:
        os.close(fd)


def test_lz4_block_literals_and_matches() -> None:
    assert lz4_block(lz4_literals(b"hello"), 100) == b"hello"
    long = bytes(range(256)) * 3
    assert lz4_block(lz4_literals(long), 10_000) == long
    # "abcabcabcabc": literals "abc", then a 9-byte overlapping match at offset 3, then an empty tail
    block = bytes([0x35]) + b"abc" + b"\x03\x00" + bytes([0x00])
    assert lz4_block(block, 100) == b"abc" * 4
    assert lz4_block(lz4_literals(long), 10) == long[:10]  # a prefix only
    with pytest.raises(DecodeError, match="before the start"):
        lz4_block(bytes([0x10]) + b"a" + b"\x09\x00", 100)
    with pytest.raises(DecodeError, match="middle of a sequence"):
        lz4_block(bytes([0xF0]), 100)


def test_lz4_block_stops_at_the_uncompressed_size_before_padding() -> None:
    """spconv-cu126 2.3.8's compute_52 PTX: 57 bytes of LZ4 and 7 zero bytes of padding, 68 bytes out."""
    raw = bytes.fromhex(
        "3c0a2f2f0300f0220a2e76657273696f6e20382e350a2e74617267657420736d5f35320a2e616464726573735f73697a65"
        "2036340a0a0a0a0000000000000000"
    )
    text = lz4_block(raw, 68)
    assert (
        text == b"\n//" * 6 + b"\n\n.version 8.5\n.target sm_52\n.address_size 64\n\n\n\n\0"
    )  # PTX ends in a NUL
    with pytest.raises(DecodeError, match="offset 0"):  # past the size, the padding is no sequence
        lz4_block(raw, 69)


def test_lz4_entry_padded_to_8_bytes_is_read(tmp_path: Path) -> None:
    """Must pass: the payload size counts the padding; the header's uncompressed size ends the decoding."""
    block = lz4_literals(PTX_KERNEL)
    padded = block + b"\0" * (8 + (-len(block) % 8))  # padding inside the recorded payload size
    unit = fatbinary(entry(1, 52, padded, flags=0x2011, size=len(PTX_KERNEL)))
    assert facts(library(tmp_path, unit)) == [(True, ())]
    # must fail: without the size recorded, the padding is read as a sequence and the unit is unknown
    unknown = fatbinary(entry(1, 52, padded, flags=0x2011, size=0))
    assert facts(library(tmp_path, unknown)) == [(None, ())]


def test_link_step_unit_holds_no_kernel(tmp_path: Path) -> None:
    stub = fatbinary(entry(2, 80, CUBIN_STUB))
    unit = fatbinary(entry(1, 80, PTX_KERNEL, isa=(9, 2)), entry(2, 80, CUBIN_WITH_KERNEL))
    assert facts(library(tmp_path, stub, unit)) == [(False, ()), (True, ((13, 2),))]


def test_sass_only_unit_with_a_kernel_names_its_ptxas(tmp_path: Path) -> None:
    only = fatbinary(entry(2, 100, CUBIN_WITH_KERNEL, flags=0x200011))
    assert facts(library(tmp_path, only)) == [(True, ((13, 2),))]


def test_ptx_without_entry_is_no_kernel(tmp_path: Path) -> None:
    assert facts(library(tmp_path, fatbinary(entry(1, 80, PTX_NO_KERNEL)))) == [(False, ())]


def test_lz4_compressed_entries(tmp_path: Path) -> None:
    with_kernel = fatbinary(entry(1, 86, lz4_literals(PTX_KERNEL), flags=0x2011, size=len(PTX_KERNEL)))
    stub = fatbinary(entry(2, 86, lz4_literals(CUBIN_STUB), flags=0x2011, size=len(CUBIN_STUB)))
    assert facts(library(tmp_path, with_kernel, stub)) == [(True, ()), (False, ())]


def test_zstd_compressed_entries(tmp_path: Path) -> None:
    assert zstd_available(), "libzstd.so.1 is missing: zstd-compressed entries cannot be looked into"
    with_kernel = fatbinary(
        entry(2, 90, zstd_compress(CUBIN_WITH_KERNEL), flags=0x8011, size=len(CUBIN_WITH_KERNEL))
    )
    stub = fatbinary(entry(2, 90, zstd_compress(CUBIN_STUB), flags=0x8011, size=len(CUBIN_STUB)))
    assert facts(library(tmp_path, with_kernel, stub)) == [(True, ((13, 2),)), (False, ())]


def test_a_payload_that_does_not_decode_leaves_kernels_unknown(tmp_path: Path) -> None:
    broken = fatbinary(entry(2, 90, b"\x28\xb5\x2f\xfd" + b"\xff" * 40, flags=0x8011, size=4096))
    fd = os.open(library(tmp_path, broken), os.O_RDONLY)
    try:
        (unit,) = read_fatbins(tmp_path / "libk.so")
        found = unit_facts(fd, unit)
    finally:
        os.close(fd)
    assert found.kernels is None and found.problem is not None and "sm_90" in found.problem


def test_cubin_target_reads_arch_variant_and_toolkit() -> None:
    head = bytearray(0x40)
    head[:4] = b"\x7fELF"
    head[4], head[5], head[8] = 2, 1, 8
    struct.pack_into("<H", head, 0x12, 190)
    struct.pack_into("<I", head, 0x30, 0x6006402)  # sm_100 (bits 8-15), ABI version 8
    target = cubin_target(bytes(head), CUBIN_WITH_KERNEL)
    assert target is not None
    assert (target.arch, target.variant, target.toolkit, target.kernels) == (100, "f", (13, 2), True)
    struct.pack_into("<H", head, 0x12, 62)  # x86_64: not a cubin
    assert cubin_target(bytes(head), b"") is None
