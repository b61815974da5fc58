"""The embedded-image scan runs with the C library's ``memmem`` (GIL released) as a task of its own,
beside the platform analysis: it must find exactly what ``mmap.find`` finds, and the inspection split
in two (:class:`release.audit.reading.inspector.Inspector`) must give exactly ``inspect_member``'s libraries.
On the committed fixture wheel whose library carries a cubin as data (nvcc-built)."""

from __future__ import annotations

import shutil
import struct
from dataclasses import replace
from pathlib import Path

from release.audit.model import Library
from release.audit.reading.archive import open_wheel
from release.audit.reading.inspector import Inspector, inspect_member, scan_embedded, with_embedded
from release.binary.elf import read_elf
from release.binary.embedded import _mapped, _scan, find_embedded

WHEELS = Path(__file__).resolve().parents[1] / "fixtures" / "wheels"
EMBEDDED = WHEELS / "fx_embedded-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
BLOB = "fx_embedded/lib/libfx_blob.so"


def test_memmem_and_mmap_find_find_the_same_images_and_a_plain_library_has_none() -> None:
    with open_wheel(EMBEDDED) as wheel:
        libs = [m for m in wheel.members if m.path is not None and m.is_elf]
        assert any(m.name == BLOB for m in libs)
        for member in libs:
            assert member.path is not None
            info = read_elf(member.path)
            native, plain = find_embedded(member.path, info), find_embedded(member.path, info, native=False)
            assert native == plain, member.name
            if member.name == BLOB:  # must be found: one sm_80 cubin
                assert [(i.kind, i.targets) for i in native] == [("cubin", ("sm_80",))]
            else:  # must not: no image in a plain CUDA library
                assert native == ()


def test_an_image_after_decoy_magics_is_still_found(tmp_path: Path) -> None:
    """Bare magics the longer needles skip (32-bit ELF class, fatbinary version 2) before and after the
    real cubin: both searches step over them and find the cubin, at the same offset."""
    with open_wheel(EMBEDDED) as wheel:
        member = next(m for m in wheel.members if m.name == BLOB)
        assert member.path is not None
        copy = tmp_path / "libfx_blob.so"
        shutil.copyfile(member.path, copy)
    info = read_elf(copy)
    (image,) = find_embedded(copy, info)
    data = bytearray(copy.read_bytes())
    decoys = b"\x7fELF\x01" + b"\x50\xed\x55\xba\x02\x00\x10\x00"
    after = image.offset + image.size
    data[after : after + len(decoys)] = decoys  # in the section's tail: must change nothing
    copy.write_bytes(bytes(data))
    assert find_embedded(copy, info) == find_embedded(copy, info, native=False) == (image,)
    cubin = bytes(data[image.offset : image.offset + image.size])
    blob = tmp_path / "blob"
    blob.write_bytes(b"\0" * 8 + decoys + b"\0" * 3 + cubin + decoys)  # the cubin behind the decoys, at 24
    for native in (True, False):
        with blob.open("rb") as f, _mapped(f.fileno(), blob.stat().st_size, native=native) as (mm, find):
            found = _scan(mm, find, ".rodata", 8, blob.stat().st_size, 10)  # a section starting at 8
        assert [(i.offset, i.kind, i.targets) for i in found] == [(24, "cubin", image.targets)], native


def _blob_copy(tmp_path: Path) -> Path:
    with open_wheel(EMBEDDED) as wheel:
        member = next(m for m in wheel.members if m.name == BLOB)
        assert member.path is not None
        copy = tmp_path / "libfx_blob.so"
        shutil.copyfile(member.path, copy)
    return copy


def _move_section(path: Path, name: str, offset: int, size: int) -> None:
    """Rewrite section ``name``'s file offset and size in the section header table (ELF64, LE)."""
    data = bytearray(path.read_bytes())
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    index = next(i for i, s in enumerate(read_elf(path).sections) if s.name == name)
    assert index < shnum
    header = shoff + index * shentsize
    assert struct.unpack_from("<QQ", data, header + 0x18) == next(
        (s.offset, s.size) for s in read_elf(path).sections if s.name == name
    )
    struct.pack_into("<QQ", data, header + 0x18, offset, size)
    path.write_bytes(bytes(data))


def test_a_data_section_at_file_offset_0_is_searched(tmp_path: Path) -> None:
    """A section whose header says it starts at offset 0 (hostile: the ELF header is there) is searched
    like any other: the cubin inside it is found (the first search once waited for ``start > 0``),
    and the file's own x86-64 ELF header at 0 is not taken for a cubin."""
    copy = _blob_copy(tmp_path)
    (image,) = find_embedded(copy, read_elf(copy))
    assert image.section == ".rodata" and image.offset > 0
    _move_section(copy, ".rodata", 0, image.offset + image.size)  # from 0 through the cubin: found
    info = read_elf(copy)
    assert next(s for s in info.sections if s.name == ".rodata").offset == 0
    assert find_embedded(copy, info) == find_embedded(copy, info, native=False) == (image,)
    _move_section(copy, ".rodata", 0, image.offset)  # from 0 up to the cubin: nothing
    info = read_elf(copy)
    assert find_embedded(copy, info) == find_embedded(copy, info, native=False) == ()
    cubin = tmp_path / "cubin"
    with (tmp_path / "libfx_blob.so").open("rb") as f:
        f.seek(image.offset)
        cubin.write_bytes(f.read(image.size) + b"\0" * 8)
    for native in (True, False):  # a cubin at the very first byte of a section at 0
        with cubin.open("rb") as f, _mapped(f.fileno(), cubin.stat().st_size, native=native) as (mm, find):
            found = _scan(mm, find, ".rodata", 0, cubin.stat().st_size, 10)
        assert [(i.offset, i.kind, i.targets) for i in found] == [(0, "cubin", image.targets)], native


def test_the_split_inspection_gives_inspect_members_libraries() -> None:
    with open_wheel(EMBEDDED) as wheel, Inspector() as inspector:
        for member in wheel.members:
            if member.path is not None:
                inspector.submit(member)
        quick = inspector.libraries(wheel, embedded=False)
        full = inspector.libraries(wheel)
        whole = tuple(lib for m in wheel.members if (lib := inspect_member(m)) is not None)
        assert full == whole
        assert not inspector.scan_failed
        assert tuple(replace(lib, embedded=()) for lib in full) == quick
        assert any(lib.embedded for lib in full) and not any(lib.embedded for lib in quick)


def test_a_scan_that_fails_makes_the_library_inspect_member_makes(tmp_path: Path) -> None:
    """inspect_member scans first: an error there is the library's fatbin_error, with nothing read after."""
    with open_wheel(EMBEDDED) as wheel:
        member = next(m for m in wheel.members if m.name == BLOB)
        quick = inspect_member(member, embedded=False)
        assert quick is not None and quick.elf is not None
        assert isinstance(scan_embedded(member, quick), tuple)
        member_gone = replace(member, path=tmp_path / "gone.so")
        failed = scan_embedded(member_gone, replace(quick, file=tmp_path / "gone.so"))
    assert isinstance(failed, str) and BLOB in failed  # named by its wheel path, as inspect_member names it
    merged = with_embedded(member, quick, failed)
    assert merged == replace(
        Library(member.name, quick.file, member.sha256, quick.elf, None, False, (), None, quick.defines),
        has_device_code=True,
        fatbin_error=failed,
    )
    assert with_embedded(member, quick, None) is quick


def test_a_device_file_or_unreadable_file_is_not_scanned() -> None:
    with open_wheel(EMBEDDED) as wheel:
        member = next(m for m in wheel.members if m.name == BLOB)
        lib = inspect_member(member, embedded=False)
        assert lib is not None
        assert scan_embedded(member, replace(lib, device_file="cubin")) is None
        assert scan_embedded(member, replace(lib, elf=None)) is None
        assert scan_embedded(member, None) is None
