"""release.binary.elf on synthetic ELF files built byte by byte (and one real one)."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest
from synth_elf import (
    DT_NEEDED,
    DT_RPATH,
    DT_RUNPATH,
    DT_SONAME,
    SHT_NOBITS,
    SHT_PROGBITS,
    build_elf,
)

from release.binary.elf import ElfError, Section, is_elf, iter_section, open_section, read_elf, section_bytes
from release.core.errors import InputError

DYNAMIC = [
    (DT_NEEDED, "libcudart.so.13"),
    (DT_NEEDED, "libc.so.6"),
    (DT_SONAME, "libkernels.so"),
    (DT_RPATH, "$ORIGIN/../nvidia/cu13/lib:$ORIGIN"),
    (DT_RUNPATH, "$ORIGIN/lib"),
]
PAYLOAD = bytes(range(256)) * 3


def write(tmp_path: Path, data: bytes, name: str = "lib.so") -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize(("elf_class", "endian"), [(64, "<"), (64, ">"), (32, "<"), (32, ">")])
def test_reads_sections_and_dynamic(tmp_path: Path, elf_class: int, endian: str) -> None:
    built = build_elf(
        [(".text", SHT_PROGBITS, b"\x90" * 40), (".nv_fatbin", SHT_PROGBITS, PAYLOAD)],
        elf_class=elf_class,
        endian=endian,
        machine=183,
        dynamic=DYNAMIC,
    )
    p = write(tmp_path, built.data)
    info = read_elf(p)
    assert info.path == str(p)
    assert info.elf_class == elf_class
    assert info.byte_order == ("little" if endian == "<" else "big")
    assert info.machine == 183
    assert info.machine_name == "aarch64"
    assert info.elf_type == 3
    names = [s.name for s in info.sections]
    assert names == ["", ".text", ".nv_fatbin", ".dynstr", ".dynamic", ".shstrtab"]
    assert info.section(".nv_fatbin") == Section(
        ".nv_fatbin", built.offsets[".nv_fatbin"], len(PAYLOAD), SHT_PROGBITS
    )
    assert info.section(".missing") is None
    assert info.needed == ("libcudart.so.13", "libc.so.6")
    assert info.soname == "libkernels.so"
    assert info.rpath == ("$ORIGIN/../nvidia/cu13/lib", "$ORIGIN")
    assert info.runpath == ("$ORIGIN/lib",)
    assert is_elf(p)


def test_no_dynamic_section(tmp_path: Path) -> None:
    p = write(tmp_path, build_elf([(".text", SHT_PROGBITS, b"x")]).data)
    info = read_elf(p)
    assert (info.needed, info.rpath, info.runpath, info.soname) == ((), (), (), None)


@pytest.mark.parametrize("elf_class", [64, 32])
def test_dynamic_through_program_headers_without_section_table(tmp_path: Path, elf_class: int) -> None:
    built = build_elf([], elf_class=elf_class, dynamic=DYNAMIC, section_table=False, program_headers=True)
    info = read_elf(write(tmp_path, built.data))
    assert info.sections == ()
    assert info.needed == ("libcudart.so.13", "libc.so.6")
    assert info.soname == "libkernels.so"
    assert info.rpath == ("$ORIGIN/../nvidia/cu13/lib", "$ORIGIN")
    assert info.runpath == ("$ORIGIN/lib",)


def test_extended_section_numbering(tmp_path: Path) -> None:
    built = build_elf([(".nv_fatbin", SHT_PROGBITS, PAYLOAD)], dynamic=DYNAMIC, extended_numbering=True)
    info = read_elf(write(tmp_path, built.data))
    assert [s.name for s in info.sections][1:] == [".nv_fatbin", ".dynstr", ".dynamic", ".shstrtab"]
    assert info.needed[0] == "libcudart.so.13"


def test_nobits_section_may_lie_past_the_end(tmp_path: Path) -> None:
    built = build_elf([(".bss", SHT_NOBITS, b"")], nobits_size=1 << 30)
    info = read_elf(write(tmp_path, built.data))
    bss = info.section(".bss")
    assert bss is not None
    assert bss.size == 1 << 30
    with pytest.raises(ElfError, match=r"\.bss has no bytes in the file"):
        section_bytes(tmp_path / "lib.so", ".bss")


def test_section_bytes_and_lazy_reads(tmp_path: Path) -> None:
    p = write(tmp_path, build_elf([(".nv_fatbin", SHT_PROGBITS, PAYLOAD)]).data)
    assert section_bytes(p, ".nv_fatbin") == PAYLOAD
    chunks = list(iter_section(p, ".nv_fatbin", chunk_size=100))
    assert b"".join(chunks) == PAYLOAD
    assert [len(c) for c in chunks] == [100] * 7 + [68]
    with open_section(p, ".nv_fatbin") as reader:
        assert reader.size == len(PAYLOAD)
        assert reader.read(256, 4) == bytes([0, 1, 2, 3])
        with pytest.raises(ElfError, match="outside the section"):
            reader.read(len(PAYLOAD) - 2, 4)
        with pytest.raises(ElfError, match="outside the section"):
            reader.read(-1, 4)
    with pytest.raises(ElfError, match=r"has no section \.nope"):
        section_bytes(p, ".nope")
    with pytest.raises(ValueError, match="chunk_size"):
        list(iter_section(p, ".nv_fatbin", chunk_size=0))


def test_linker_script_is_not_elf(tmp_path: Path) -> None:
    p = write(tmp_path, b"/* GNU ld script */\nINPUT(libfoo.so.1 AS_NEEDED(libbar.so))\n")
    assert not is_elf(p)
    with pytest.raises(ElfError) as info:
        read_elf(p)
    message = str(info.value)
    assert str(p) in message
    assert "not an ELF file" in message
    assert "GNU ld script" in message
    assert "linker script" in message


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", "not an ELF file: it is empty"),
        (b"\x7fEL", "not an ELF file"),
        (b"\x00\x01\x02\x03" * 20, "it starts with bytes 00 01 02 03"),
        (b"\x7fELF" + bytes([3, 1, 1]) + b"\0" * 60, "unknown class 3"),
        (b"\x7fELF" + bytes([2, 7, 1]) + b"\0" * 60, "unknown byte order 7"),
        (b"\x7fELF" + bytes([2, 1, 9]) + b"\0" * 60, "unknown ELF version 9"),
        (b"\x7fELF" + bytes([2, 1, 1]) + b"\0" * 20, "truncated: the ELF64 header needs 64"),
    ],
)
def test_bad_headers(tmp_path: Path, data: bytes, expected: str) -> None:
    p = write(tmp_path, data)
    with pytest.raises(ElfError, match=expected) as info:
        read_elf(p)
    assert str(p) in str(info.value)


def test_every_truncation_is_an_elf_error(tmp_path: Path) -> None:
    data = build_elf([(".nv_fatbin", SHT_PROGBITS, PAYLOAD)], dynamic=DYNAMIC).data
    p = tmp_path / "cut.so"
    # Every cut inside the headers, then a sample through the rest of the file.
    for cut in [*range(160), *range(160, len(data), 5)]:
        p.write_bytes(data[:cut])
        with pytest.raises(ElfError) as info:
            read_elf(p)
        assert str(p) in str(info.value)


def test_errors_are_input_errors(tmp_path: Path) -> None:
    assert issubclass(ElfError, InputError)
    with pytest.raises(InputError) as info:
        read_elf(tmp_path / "missing.so")
    assert info.value.return_code == 2
    assert "missing.so" in str(info.value)
    with pytest.raises(ElfError, match="is a directory"):
        read_elf(tmp_path)
    with pytest.raises(ElfError, match="cannot open"):
        is_elf(tmp_path / "missing.so")


def _patch_section(data: bytes, built_shoff: int, index: int, **fields: int) -> bytes:
    """Rewrite fields of section header ``index`` of an ELF64 LE file."""
    fmt = struct.Struct("<IIQQQQIIQQ")
    names = ["name", "type", "flags", "addr", "offset", "size", "link", "info", "align", "entsize"]
    at = built_shoff + index * 64
    values = dict(zip(names, fmt.unpack_from(data, at), strict=True))
    values.update(fields)
    out = bytearray(data)
    fmt.pack_into(out, at, *(values[n] for n in names))
    return bytes(out)


def test_section_outside_the_file(tmp_path: Path) -> None:
    built = build_elf([(".nv_fatbin", SHT_PROGBITS, PAYLOAD)])
    data = _patch_section(built.data, built.shoff, 1, size=10**9)
    p = write(tmp_path, data)
    with pytest.raises(
        ElfError, match=r"section \.nv_fatbin at offset 0x[0-9a-f]+ \(1000000000 bytes\) runs past the end"
    ):
        read_elf(p)
    data = _patch_section(built.data, built.shoff, 1, offset=len(built.data) + 8)
    with pytest.raises(ElfError, match=r"runs past the end of the file"):
        read_elf(write(tmp_path, data))


def test_section_name_outside_the_name_table(tmp_path: Path) -> None:
    built = build_elf([(".nv_fatbin", SHT_PROGBITS, PAYLOAD)])
    data = _patch_section(built.data, built.shoff, 1, name=5000)
    with pytest.raises(ElfError, match="name offset 5000 lies outside its string table"):
        read_elf(write(tmp_path, data))


def test_dynamic_string_outside_its_table(tmp_path: Path) -> None:
    built = build_elf([], dynamic=[(DT_NEEDED, "libc.so.6")])
    data = bytearray(built.data)
    # First .dynamic entry: DT_NEEDED with a string offset far past .dynstr.
    struct.pack_into("<qQ", data, built.offsets[".dynamic"], DT_NEEDED, 4096)
    with pytest.raises(ElfError, match="DT_NEEDED name offset 4096 lies outside"):
        read_elf(write(tmp_path, bytes(data)))


def test_dynamic_links_to_missing_string_table(tmp_path: Path) -> None:
    built = build_elf([], dynamic=[(DT_NEEDED, "libc.so.6")])
    data = _patch_section(built.data, built.shoff, 2, link=99)  # section 2 is .dynamic
    with pytest.raises(ElfError, match="links to string table 99"):
        read_elf(write(tmp_path, data))


@pytest.mark.parametrize(
    ("offset", "value", "message"),
    [
        (62, 40, "section name table index 40 is out of range"),
        (58, 32, "section header entry size 32 is smaller than 64"),
    ],
    ids=["e_shstrndx-out-of-range", "e_shentsize-too-small"],
)
def test_bad_section_header_field(tmp_path: Path, offset: int, value: int, message: str) -> None:
    """One 16-bit field of the ELF header (at ``offset``) set to a value the reader must refuse."""
    built = build_elf([(".text", SHT_PROGBITS, b"x")])
    data = bytearray(built.data)
    struct.pack_into("<H", data, offset, value)
    with pytest.raises(ElfError, match=message):
        read_elf(write(tmp_path, bytes(data)))


def test_unterminated_section_name(tmp_path: Path) -> None:
    built = build_elf([(".text", SHT_PROGBITS, b"x")])
    info = read_elf(write(tmp_path, built.data))
    names = info.section(".shstrtab")
    assert names is not None
    data = bytearray(built.data)
    data[names.offset + names.size - 1] = ord("x")  # drop the final NUL
    with pytest.raises(ElfError, match="not NUL-terminated"):
        read_elf(write(tmp_path, bytes(data)))


def test_reads_a_real_elf_file() -> None:
    exe = Path(sys.executable).resolve()
    if not is_elf(exe):
        pytest.skip(f"{exe} is not an ELF file")
    info = read_elf(exe)
    assert info.elf_class in (32, 64)
    assert info.section(".text") is not None
    assert any(n.startswith("libc.so") for n in info.needed)


def test_symbol_versions_lookups_and_resolution_on_real_files() -> None:
    """The interpreter running the tests and the libc it loads: real files, read as the loader does."""
    from release.binary.elf_symbols import STT_FUNC, lookup, undefined_symbols
    from release.binary.ldd import Resolver, platform_of

    exe = Path(sys.executable).resolve()
    info = read_elf(exe)
    assert "libc.so.6" in info.needed
    (libc_needs,) = [versions for soname, versions in info.version_needs if soname == "libc.so.6"]
    assert libc_needs and all(v.startswith("GLIBC_") for v in libc_needs)
    assert platform_of(info).base is not None and platform_of(info).error is None
    assert "__libc_start_main" in {s.name for s in undefined_symbols(exe)}
    libc = Resolver().tree(exe).libraries["libc.so.6"]
    assert libc.realpath is not None and libc.platform is not None
    assert libc.platform.compatible(platform_of(info))  # GNU/Linux (3) and System V (0) ABIs load alike
    libc_info = read_elf(libc.realpath)
    assert libc_info.soname == "libc.so.6" and "GLIBC_2.2.5" in libc_info.version_definitions
    found = lookup(libc.realpath, ["malloc", "no_such_symbol_anywhere"])
    assert set(found) == {"malloc"} and found["malloc"].defined and found["malloc"].type == STT_FUNC
