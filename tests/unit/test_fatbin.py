"""release.binary.fatbin on synthetic .nv_fatbin sections built byte by byte."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from synth_elf import SHT_NOBITS, SHT_PROGBITS, build_elf, fatbin_entry, fatbinary

from release.binary.elf import ElfError
from release.binary.fatbin import (
    Fatbinary,
    FatbinEntry,
    FatbinError,
    all_entries,
    has_device_code,
    read_fatbins,
    target_name,
)
from release.core.errors import InputError

SASS, PTX, LTOIR = 2, 1, 8
A, F = 0x100000, 0x200000


def lib(tmp_path: Path, section: bytes | None, **kwargs: object) -> tuple[Path, int]:
    """Write an ELF with ``section`` as .nv_fatbin; return the path and the section offset."""
    sections = [(".text", SHT_PROGBITS, b"\x90" * 16)]
    if section is not None:
        sections.append((".nv_fatbin", SHT_PROGBITS, section))
    built = build_elf(sections, **kwargs)  # type: ignore[arg-type]
    p = tmp_path / "libk.so"
    p.write_bytes(built.data)
    return p, built.offsets.get(".nv_fatbin", 0)


def test_names() -> None:
    assert target_name("sass", 90, "a") == "sm_90a"
    assert target_name("sass", 100, "f") == "sm_100f"
    assert target_name("ptx", 120) == "compute_120"
    assert target_name("ltoir", 90) == "lto_90"
    assert FatbinEntry("sass", 80).name == "sm_80"
    assert FatbinEntry("ptx", 100, "f").name == "compute_100f"


def test_entry_equality_ignores_position() -> None:
    assert FatbinEntry("sass", 90, "a", offset=16, payload_size=9, flags=A) == FatbinEntry("sass", 90, "a")
    assert len({FatbinEntry("sass", 90, offset=1), FatbinEntry("sass", 90, offset=2)}) == 1
    assert FatbinEntry("sass", 90) != FatbinEntry("sass", 90, "a")


def test_reads_entries_of_every_kind_and_variant(tmp_path: Path) -> None:
    first = fatbinary(
        fatbin_entry(SASS, 80),
        fatbin_entry(SASS, 90, flags=0x11 | A),
        fatbin_entry(SASS, 100, flags=0x1000011 | F, header_size=96),
    )
    second = fatbinary(
        fatbin_entry(PTX, 120, flags=0x8011, header_size=80, payload=b"ptx!" * 5),
        fatbin_entry(PTX, 100, flags=0x208011, header_size=80),
        fatbin_entry(LTOIR, 90, flags=0x18011, header_size=120),
        fatbin_entry(SASS, 121, flags=0x1100011, payload=b"\x7fELF" * 2),
    )
    section = first + b"\0" * 24 + second
    p, base = lib(tmp_path, section)
    assert has_device_code(p)
    fbs = read_fatbins(p)
    assert [fb.offset for fb in fbs] == [base, base + len(first) + 24]
    assert [fb.size for fb in fbs] == [len(first), len(second)]
    assert [[e.name for e in fb.entries] for fb in fbs] == [
        ["sm_80", "sm_90a", "sm_100f"],
        ["compute_120", "compute_100f", "lto_90", "sm_121a"],
    ]
    assert fbs[0].entries == (
        FatbinEntry("sass", 80),
        FatbinEntry("sass", 90, "a"),
        FatbinEntry("sass", 100, "f"),
    )
    e = fbs[0].entries[1]
    assert e.offset == base + 16 + 64 + 24
    assert e.payload_size == 24
    assert e.flags == 0x11 | A
    assert fbs[1].entries[0].payload_size == 20
    assert [e.name for e in all_entries(p)] == [e.name for fb in fbs for e in fb.entries]


def test_unaligned_fatbinary_end_then_padding(tmp_path: Path) -> None:
    odd = fatbinary(fatbin_entry(SASS, 75, payload=b"\x01" * 21))  # 16 + 64 + 21 bytes
    assert len(odd) % 8 == 5
    section = odd + b"\0" * 3 + fatbinary(fatbin_entry(PTX, 75))
    p, _ = lib(tmp_path, section)
    assert [e.name for e in all_entries(p)] == ["sm_75", "compute_75"]


def test_empty_fatbinary_and_trailing_zeros(tmp_path: Path) -> None:
    # nvcc writes an empty fatbinary (payload size 0) in a PTX-only library.
    section = fatbinary() + fatbinary(fatbin_entry(PTX, 120)) + b"\0" * 40
    p, base = lib(tmp_path, section)
    fbs = read_fatbins(p)
    assert fbs == (Fatbinary(base, ()), Fatbinary(base + 16, (FatbinEntry("ptx", 120),)))


def test_zero_padding_inside_a_fatbinary(tmp_path: Path) -> None:
    section = fatbinary(fatbin_entry(SASS, 86), b"\0" * 24)
    p, _ = lib(tmp_path, section)
    assert [e.name for e in all_entries(p)] == ["sm_86"]


def test_no_section_empty_section_nobits(tmp_path: Path) -> None:
    p, _ = lib(tmp_path, None)
    assert not has_device_code(p)
    assert read_fatbins(p) == ()
    p, _ = lib(tmp_path, b"")
    assert not has_device_code(p)
    assert read_fatbins(p) == ()
    built = build_elf([(".nv_fatbin", SHT_NOBITS, b"")], nobits_size=4096)
    p.write_bytes(built.data)
    assert not has_device_code(p)
    assert read_fatbins(p) == ()


def test_big_endian_elf_still_has_little_endian_fatbin(tmp_path: Path) -> None:
    p, _ = lib(tmp_path, fatbinary(fatbin_entry(SASS, 90)), elf_class=32, endian=">")
    assert [e.name for e in all_entries(p)] == ["sm_90"]


def test_non_elf_file(tmp_path: Path) -> None:
    p = tmp_path / "libfoo.so"
    p.write_text("INPUT(libfoo.so.1)\n")
    with pytest.raises(ElfError, match="not an ELF file"):
        has_device_code(p)
    with pytest.raises(ElfError, match="not an ELF file"):
        read_fatbins(p)


def test_truncated_file_is_an_input_error(tmp_path: Path) -> None:
    p, _ = lib(tmp_path, fatbinary(fatbin_entry(SASS, 90)) * 4)
    data = p.read_bytes()
    for cut in range(0, len(data), 7):
        p.write_bytes(data[:cut])
        with pytest.raises(InputError):
            read_fatbins(p)


def _malformed(tmp_path: Path, section: bytes) -> tuple[str, int]:
    p, base = lib(tmp_path, section)
    with pytest.raises(FatbinError) as info:
        read_fatbins(p)
    message = str(info.value)
    assert message.startswith(f"{p}: malformed .nv_fatbin at file offset 0x")
    assert info.value.return_code == 2
    offset = int(message.split("file offset ")[1].split(":")[0], 16)
    return message, offset - base


GOOD = fatbinary(fatbin_entry(SASS, 80), fatbin_entry(SASS, 90))


MALFORMED = [
    (b"\x7fELF" + b"\0" * 60, "expected fatbinary magic 0xba55ed50 or zero padding", 0),
    (GOOD + b"garbage!" * 3, "found 0x62726167", len(GOOD)),
    (GOOD + b"\0\0\0\x01" + b"\0" * 12, "only zero padding or an 8-byte aligned", len(GOOD) + 3),
    (GOOD + GOOD[:12], "truncated fatbinary header: 12 bytes left", len(GOOD)),
    (fatbinary(fatbin_entry(SASS, 80), payload_size=4000), "truncated: the fatbinary claims 4016 bytes", 0),
    (GOOD[:-8], "truncated: the fatbinary claims", 0),
    (fatbinary(fatbin_entry(SASS, 80), version=2), "unsupported fatbinary version 2", 0),
    (fatbinary(fatbin_entry(SASS, 80), header_size=8), "fatbinary header size 8 is below 16", 0),
    (fatbinary(fatbin_entry(5, 80)), "unknown entry kind 5", 16),
    (fatbinary(fatbin_entry(SASS, 80), fatbin_entry(0, 90)), "unknown entry kind 0", 16 + 88),
    (fatbinary(fatbin_entry(SASS, 90, flags=A | F)), "both arch-specific and family", 16),
    (fatbinary(fatbin_entry(SASS, 0)), "names architecture 0", 16),
    (fatbinary(fatbin_entry(SASS, 90, payload_size=500)), "the sass entry claims 564 bytes but only 88", 16),
    (fatbinary(fatbin_entry(SASS, 90, header_size=32)), "entry header size 32 is below 48", 16),
    (
        fatbinary(fatbin_entry(SASS, 90), b"\x02" + b"\0" * 23),
        "truncated entry header: 24 bytes left",
        16 + 88,
    ),
    (fatbinary(fatbin_entry(SASS, 90), b"\0" * 48 + b"\x01" + b"\0" * 7), "unknown entry kind 0", 16 + 88),
    (b"\0" * 64, "the section holds 64 zero bytes and no fatbinary", 0),
]


@pytest.mark.parametrize(
    ("section", "expected", "at"), MALFORMED, ids=[f"{i}-{c[1][:40]}" for i, c in enumerate(MALFORMED)]
)
def test_malformed(tmp_path: Path, section: bytes, expected: str, at: int) -> None:
    message, offset = _malformed(tmp_path, section)
    assert expected in message
    assert offset == at


def test_error_offset_is_absolute_in_the_file(tmp_path: Path) -> None:
    p, base = lib(tmp_path, GOOD + b"\xff" * 8)
    with pytest.raises(FatbinError, match=f"file offset {base + len(GOOD):#x}"):
        read_fatbins(p)
    assert base > 0


def test_reads_only_headers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A 16 MiB payload is skipped, not read: the parse costs a handful of small reads.
    big = 16 << 20
    head = fatbin_entry(SASS, 90, payload=b"", payload_size=big)
    section = struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(head) + big) + head + b"\0" * big
    p, _ = lib(tmp_path, section)
    calls: list[int] = []
    real = os.pread

    def counting(fd: int, n: int, offset: int) -> bytes:
        calls.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(os, "pread", counting)
    fbs = read_fatbins(p)
    assert [e.name for fb in fbs for e in fb.entries] == ["sm_90"]
    assert fbs[0].entries[0].payload_size == big
    assert sum(calls) < 64 * 1024
