"""Regenerate tests/fixtures/hostile/: wheels an attacker would hand the audit, each with its verdict.

    python scripts/make_hostile_wheels.py

Each case is a real wheel (Python's zipfile, or raw zip bytes where a header must lie)
built on the fixture CPU wheel (its C++ SDK and library), with the exit code the audit
must give and a regular expression its output must match. Small cases are committed
with tests/fixtures/hostile/expected.json; cases too big to commit (bombs, a million
members) are built at test time by :func:`build`. tests/integration/test_hostile_wheels.py
runs every case through ``python -m release audit`` under a 2 GiB address-space limit.
The hostile-header cases reach for ``SECRET_FILE``, which the test writes with ``SECRET``
and then looks for in everything the audit prints and records.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import stat
import struct
import subprocess
import sys
import tempfile
import warnings
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "hostile"
EXPECTED = OUT / "expected.json"
BASE_WHEEL = (
    ROOT / "tests" / "fixtures" / "wheels" / "fx_good_cpu-1.0.0-cp312-cp312-manylinux_2_28_x86_64.whl"
)
TAG = "cp312-cp312-manylinux_2_28_x86_64"
VERSION = "1.0.0"
DATE = (2024, 1, 1, 0, 0, 0)
SECRET_FILE = "/tmp/wheelwright-hostile-secret/token"
SECRET = "ghp_wheelwrightHOSTILEsecret0123456789"
ZEROS = 64 << 20  # one repeatable deflate chunk inflates to this many zero bytes
RECORD_CAP = 256 << 10  # a record about a wheel of thousands of bad members stays under this


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def base_files(dist: str) -> dict[str, bytes]:
    """The fixture CPU wheel's package (``__init__``, C++ header, library) renamed to ``dist``."""
    with zipfile.ZipFile(BASE_WHEEL) as zf:
        return {
            name.replace("fx_good_cpu/", f"{dist}/", 1): zf.read(name)
            for name in zf.namelist()
            if name.startswith("fx_good_cpu/")
        }


def dist_info(
    dist: str,
    files: dict[str, bytes],
    *,
    name: str | None = None,
    version: str = VERSION,
    folder: str | None = None,
    metadata: str | None = None,
    wheel: str | None = None,
    record_tail: str = "",
) -> dict[str, bytes]:
    """``files`` plus METADATA, WHEEL (each left out when given as ``""``) and a RECORD listing every
    file with its right hash, then ``record_tail``."""
    folder = folder or f"{dist}-{version}.dist-info"
    out = dict(files)
    if metadata is None:
        metadata = f"Metadata-Version: 2.1\nName: {name or dist}\nVersion: {version}\n"
    if metadata:
        out[f"{folder}/METADATA"] = metadata.encode()
    if wheel is None:
        wheel = f"Wheel-Version: 1.0\nGenerator: hostile\nRoot-Is-Purelib: false\nTag: {TAG}\n"
    if wheel:
        out[f"{folder}/WHEEL"] = wheel.encode()
    lines = [f"{n},sha256={_b64(d)},{len(d)}" for n, d in out.items() if not n.endswith("/")]
    out[f"{folder}/RECORD"] = ("\n".join([*lines, f"{folder}/RECORD,,"]) + "\n" + record_tail).encode()
    return out


# --------------------------------------------------------------------------- raw zips (headers that lie)


@dataclass
class Raw:
    """One entry as written: ``data`` is what the archive stores (compressed, for method 8)."""

    name: str
    data: bytes
    crc: int
    size: int  # the uncompressed size the headers claim
    method: int = 8
    mode: int = stat.S_IFREG | 0o644
    system: int = 3  # 3: Unix mode bits in the top half of external_attr; 0: MS-DOS attributes

    @classmethod
    def of(cls, name: str, content: bytes, **kw: int) -> Raw:
        c = zlib.compressobj(9, zlib.DEFLATED, -15)
        return cls(name, c.compress(content) + c.flush(), zlib.crc32(content), len(content), **kw)


def zeros(chunks: int) -> tuple[bytes, int, int]:
    """A deflate stream of ``chunks`` x 64 MiB of zero bytes, its CRC and size, made in seconds: one
    compressed chunk repeated (each ends byte-aligned and refers back only to zeros)."""
    zero = bytes(ZEROS)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(zero) + c.flush(zlib.Z_SYNC_FLUSH)
    middle = c.compress(zero) + c.flush(zlib.Z_SYNC_FLUSH)
    crc = 0
    for _ in range(chunks):
        crc = zlib.crc32(zero, crc)
    return first + middle * (chunks - 1) + c.flush(zlib.Z_FINISH), crc, chunks * ZEROS


def raw_zip(path: Path, entries: list[Raw], central: list[tuple[Raw, int]] | None = None) -> None:
    """Write ``entries`` (local headers and data) and a central directory of ``central``: each entry
    pointing at the local header of the given index (default: one per entry). zip64 throughout."""
    dos_date = (DATE[0] - 1980) << 9 | DATE[1] << 5 | DATE[2]
    offsets: list[int] = []
    central = central if central is not None else [(e, i) for i, e in enumerate(entries)]
    with path.open("wb") as f:
        for e in entries:
            offsets.append(f.tell())
            name = e.name.encode()
            extra = struct.pack("<HHQQ", 1, 16, e.size, len(e.data))
            f.write(struct.pack("<4s5HL", b"PK\x03\x04", 45, 0, e.method, 0, dos_date, e.crc))
            f.write(
                struct.pack("<2L2H", 0xFFFFFFFF, 0xFFFFFFFF, len(name), len(extra)) + name + extra + e.data
            )
        cd_start = f.tell()
        for e, index in central:
            fields = [e.size, len(e.data), offsets[index]]
            wide = [v >= 0xFFFFFFFF for v in fields]
            body = b"".join(struct.pack("<Q", v) for v, w in zip(fields, wide, strict=True) if w)
            extra = struct.pack("<HH", 1, len(body)) + body if body else b""
            usize, csize, offset = (0xFFFFFFFF if w else v for v, w in zip(fields, wide, strict=True))
            attr = e.mode << 16 if e.system == 3 else e.mode
            name = e.name.encode()
            f.write(
                struct.pack(
                    "<4s6H3L",
                    b"PK\x01\x02",
                    e.system << 8 | 45,
                    45,
                    0,
                    e.method,
                    0,
                    dos_date,
                    e.crc,
                    csize,
                    usize,
                )
            )
            f.write(struct.pack("<5H2L", len(name), len(extra), 0, 0, 0, attr, offset) + name + extra)
        cd_end, count = f.tell(), len(central)
        f.write(
            struct.pack(
                "<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, cd_end - cd_start, cd_start
            )
        )
        f.write(struct.pack("<4sLQL", b"PK\x06\x07", 0, cd_end, 1))
        f.write(struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0))


def raw_wheel(dist: str, files: dict[str, bytes] | None = None, **kw: object) -> list[Raw]:
    """The base wheel (plus ``files``) as raw entries with a right RECORD; ``kw`` as :func:`dist_info`."""
    content = dist_info(dist, base_files(dist) | (files or {}), **kw)  # type: ignore[arg-type]
    return [Raw.of(n, d) for n, d in content.items()]


def patch_central(path: Path, name: str, field_offset: int, value: int) -> None:
    """Overwrite one 4-byte field of ``name``'s central directory header (offset from its start)."""
    blob = bytearray(path.read_bytes())
    at = blob.rfind(name.encode()) - 46  # the central header comes last; the name follows its 46 bytes
    struct.pack_into("<L", blob, at + field_offset, value)
    path.write_bytes(bytes(blob))


@functools.cache
def cudart_elf() -> bytes:
    """A small real shared library whose SONAME is the CUDA runtime's (compiled with gcc)."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "cudart.c"
        src.write_text("int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n", encoding="utf-8")
        out = Path(tmp) / "libcudart.so.13"
        subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcudart.so.13", "-o", out, src], check=True)
        return out.read_bytes()


# --------------------------------------------------------------------------- makers

Maker = Callable[[Path, str], None]  # writes the case's wheel to the path, for the distribution name


def plain(files: Callable[[str], dict[str, bytes]] | None = None, **kw: object) -> Maker:
    """The base wheel plus ``files(dist)``, written by zipfile; ``kw`` as :func:`dist_info`."""

    def make(path: Path, dist: str) -> None:
        fill = {k: v.format(dist=dist) if isinstance(v, str) else v for k, v in kw.items()}
        content = dist_info(dist, base_files(dist) | (files(dist) if files else {}), **fill)  # type: ignore[arg-type]
        with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as zf:
            warnings.simplefilter("ignore")
            for name, data in content.items():
                info = zipfile.ZipInfo(name, DATE)
                info.create_system, info.compress_type = 3, zipfile.ZIP_DEFLATED
                info.external_attr = (stat.S_IFREG | (0o755 if ".so" in name else 0o644)) << 16
                zf.writestr(info, data)

    return make


def raw(
    extra: Callable[[str], list[Raw]] = lambda dist: [],
    *,
    files: Callable[[str], dict[str, bytes]] | None = None,
    drop: str | None = None,
    alias: int = 0,
    **kw: object,
) -> Maker:
    """The base wheel as raw entries (less ``drop``), then ``extra(dist)``; ``alias`` more directory
    entries, each its own name, all pointing at the last entry's local header."""

    def make(path: Path, dist: str) -> None:
        fill = {k: v.format(dist=dist) if isinstance(v, str) else v for k, v in kw.items()}
        gone = (drop or "").format(dist=dist)
        entries = [e for e in raw_wheel(dist, files(dist) if files else None, **fill) if e.name != gone]
        entries += extra(dist)
        last = entries[-1]
        central = [(e, i) for i, e in enumerate(entries)]
        central += [
            (Raw(f"{last.name}.{k}", last.data, last.crc, last.size), len(entries) - 1) for k in range(alias)
        ]
        raw_zip(path, entries, central)

    return make


def bomb(member: str, size: int) -> Maker:
    """The base wheel with ``member`` (``{dist}``, ``{di}`` filled in) inflating to ``size`` zero bytes."""

    def extra(dist: str) -> list[Raw]:
        name = member.format(dist=dist, di=f"{dist}-{VERSION}.dist-info")
        if size % ZEROS:
            return [Raw.of(name, bytes(size))]
        return [Raw(name, *zeros(size // ZEROS))]

    return raw(extra, drop=member.replace("{di}", "{dist}-" + VERSION + ".dist-info"))


def header(text: str) -> Maker:
    """The base wheel with its SDK header replaced by ``text`` (``{secret}``: SECRET_FILE)."""
    return plain(lambda dist: {f"{dist}/include/fx.h": text.replace("{secret}", SECRET_FILE).encode()})


def odd_member(name: str, data: Callable[[], bytes], mode: int, system: int = 3) -> Maker:
    """The base wheel plus ``name`` with these mode bits, listed in RECORD (as pip would install it)."""

    def make(path: Path, dist: str) -> None:
        full, content = name.format(dist=dist), data()
        tail = f"{full},sha256={_b64(content)},{len(content)}\n" if not full.endswith("/") else ""
        raw(lambda d: [Raw.of(full, content, mode=mode, system=system)], record_tail=tail)(path, dist)

    return make


def patched(maker: Maker, member: str, field_offset: int, value: int) -> Maker:
    def make(path: Path, dist: str) -> None:
        maker(path, dist)
        patch_central(path, member.format(dist=dist), field_offset, value)

    return make


def many(count: int, name: str, data: bytes = b"", *, listed: bool = False, once: bool = False) -> Maker:
    """The base wheel plus ``count`` stored members ``name.format(i=, dist=)`` (listed in RECORD, or
    with ``once`` one name ``count`` times, listed once)."""

    def make(path: Path, dist: str) -> None:
        names = [name.format(i=0 if once else i, dist=dist) for i in range(count)]
        listed_files = {n: data for n in names} if listed or once else {}
        base = [e for e in raw_wheel(dist, listed_files) if e.name not in listed_files]
        raw_zip(path, base + [Raw(n, data, zlib.crc32(data), len(data), method=0) for n in names])

    return make


def claims(dist: str) -> list[Raw]:
    """Three small members whose headers claim 4 GiB each."""
    small = Raw.of("x", b"small")
    return [Raw(f"{dist}/claims{k}.bin", small.data, small.crc, 0xFFFFFFFE) for k in range(3)]


def spread(dist: str) -> list[Raw]:
    """300 members of 1 MiB of zeros each (one compressed stream, stored 300 times)."""
    z = Raw.of("z", bytes(1 << 20))
    return [Raw(f"{dist}/data/z{k}.bin", z.data, z.crc, z.size) for k in range(300)]


def no_dist_info(path: Path, dist: str) -> None:
    raw_zip(path, [Raw.of(n, d) for n, d in base_files(dist).items()])


CUDART_SO = "{dist}/lib/libcudart.so.13"


def C(id: str, kind: str, exit: int, message: str, make: Maker, why: str, **kw: object) -> Case:
    return Case(id, kind, why, exit, message, make, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    """One hostile (or control) wheel: how to build it, the class it covers, what the audit must say."""

    id: str
    kind: str  # the class of hostile input (docs/security.md lists them)
    why: str
    exit: int
    message: str  # a regular expression the audit's output (stdout and stderr) must match
    make: Maker = field(repr=False)
    big: bool = False  # built at test time, never committed
    secret: bool = False  # its headers reach for SECRET_FILE
    filename: str | None = None  # a file name other than the usual one
    record_cap: int | None = None  # the audit record must stay under this many bytes

    @property
    def dist(self) -> str:
        return f"hx_{self.id}"

    @property
    def wheel(self) -> str:
        return self.filename or f"{self.dist}-{VERSION}-{TAG}.whl"

    def to_json(self) -> dict[str, object]:
        keys = ("id", "kind", "why", "wheel", "exit", "message", "big", "secret", "record_cap")
        return {k: getattr(self, k) for k in keys}


DIR = stat.S_IFDIR | 0o755
REG = stat.S_IFREG | 0o644
EMPTY_HEADER = "/* declares nothing */\n#ifndef HX_EMPTY_H\n#define HX_EMPTY_H\n#endif\n"
FX = "int fx_scale(float *x, int n);\nint fx_version(void);\n"
# fmt: off
CASES: tuple[Case, ...] = (
    # --- controls: what a good wheel looks like passes
    C("control_good", "control", 0, "PASSED", plain(), "the fixture CPU wheel's SDK, renamed: everything right"),
    C("control_dirs", "control", 0, "PASSED", raw(lambda d: [Raw.of(f"{d}/", b"", mode=DIR), Raw.of(f"{d}/lib/", b"", mode=DIR)]), "explicit directory entries whose names and modes agree"),
    C("control_many_files", "control", 0, "PASSED", many(20000, "{dist}/data/f{i}.txt", b"x", listed=True), "20,000 members, every one in RECORD: linear time", big=True),
    # --- member types: by name, as pip decides; mode bits and name must agree
    C("hidden_cudart", "member-type", 2, "libcudart\\.so\\.13.*mode says directory", odd_member(CUDART_SO, cudart_elf, DIR), "the CUDA runtime hidden as a member whose mode says directory (pip installs it as a file)"),
    C("hidden_cudart_dos", "member-type", 2, "libcudart\\.so\\.13.*mode says directory", odd_member(CUDART_SO, cudart_elf, 16, system=0), "the same, with the MS-DOS directory attribute"),
    C("dir_name_file_mode", "member-type", 2, "ends in '/' but its mode is -rw", odd_member("{dist}/sub/", lambda: b"", REG), "a name with a trailing slash whose mode says regular file"),
    C("dir_with_data", "member-type", 2, "carries 100 bytes", odd_member("{dist}/sub/", lambda: b"x" * 100, DIR), "a directory entry that carries bytes"),
    # --- identity: file name, .dist-info, METADATA and WHEEL agree
    C("meta_name", "identity", 2, "says Name: other_pkg but the file name says hx-meta-name", plain(name="other_pkg"), "METADATA names another distribution"),
    C("meta_version", "identity", 2, "says Version: 2\\.0\\.0 but the file name says 1\\.0\\.0", plain(metadata="Metadata-Version: 2.1\nName: {dist}\nVersion: 2.0.0\n"), "METADATA gives another version"),
    C("meta_two_names", "identity", 2, "2 Name fields", plain(metadata="Metadata-Version: 2.1\nName: {dist}\nName: other\nVersion: 1.0.0\n"), "METADATA with two Name fields"),
    C("meta_missing", "identity", 2, "METADATA is missing", plain(metadata=""), "no METADATA"),
    C("di_version", "identity", 1, "says version 2\\.0\\.0 but the file name says 1\\.0\\.0", plain(folder="{dist}-2.0.0.dist-info"), "the .dist-info directory gives another version"),
    C("di_foreign", "identity", 2, "belongs to another distribution", plain(folder="other_pkg-1.0.0.dist-info"), "the only .dist-info directory is another distribution's"),
    C("di_two", "identity", 2, "2 \\.dist-info directories", plain(lambda d: {"other_pkg-1.0.0.dist-info/METADATA": b"Name: other_pkg\nVersion: 1.0.0\n"}), "two .dist-info directories"),
    C("di_none", "identity", 2, "no \\.dist-info directory", no_dist_info, "no .dist-info directory at all"),
    C("wheel_tags", "identity", 1, "lists the tags \\['cp311-cp311-manylinux_2_28_x86_64'\\]", plain(wheel="Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: cp311-cp311-manylinux_2_28_x86_64\n"), "WHEEL's Tag lines differ from the file name's tags"),
    C("wheel_version", "identity", 2, "Wheel-Version: 2\\.0", plain(wheel="Wheel-Version: 2.0\nRoot-Is-Purelib: false\nTag: " + TAG + "\n"), "a Wheel-Version installers do not read"),
    C("wheel_missing", "identity", 2, "WHEEL is missing", plain(wheel=""), "no WHEEL file"),
    C("build_tag", "identity", 1, "build tag is 1", plain(), "a build tag in the file name that WHEEL does not carry", filename=f"hx_build_tag-{VERSION}-1-{TAG}.whl"),
    # --- RECORD: read as pip reads it, bounded
    C("record_long_field", "record", 2, "RECORD line \\d+ is 140,0\\d\\d characters long", plain(record_tail="a" * 140000 + ",,\n"), "a RECORD field over csv's 131,072-character limit"),
    C("record_quoted_field", "record", 2, "RECORD line \\d+ is not valid CSV: field larger than field limit", plain(record_tail='"' + ("y" * 1000 + "\n") * 140 + '",,\n'), "a quoted RECORD field of short lines, 140,000 characters in all"),
    C("record_bare_cr", "record", 2, "RECORD line \\d+ holds a line break '\\\\r'", plain(record_tail="{dist}/a\rb.py,,\n"), "a bare CR inside a RECORD field"),
    C("record_nel", "record", 2, "RECORD line \\d+ holds a line break '\\\\x85'", plain(record_tail="{dist}/a\x85b.py,,\n"), "U+0085 inside a RECORD line (str.splitlines splits there)"),
    C("record_lines", "record", 2, "RECORD has 2,000,0\\d\\d lines, over the limit", plain(record_tail="a,,\n" * 2000000), "a RECORD of two million lines"),
    C("record_bomb", "record", 2, "RECORD is larger than 32 MiB", bomb("{di}/RECORD", 33 << 20), "a RECORD inflating to 33 MiB"),
    # --- sizes, counted as they inflate
    C("metadata_bomb", "bomb", 2, "declares 2\\.0 GiB uncompressed", bomb("{di}/METADATA", 2 << 30), "a 2 MB wheel whose METADATA inflates to 2 GiB", big=True),
    C("metadata_inflate", "bomb", 2, "METADATA inflates past 16 MiB, its limit", bomb("{di}/METADATA", 128 << 20), "a METADATA of 128 MiB: refused as it inflates, at 16 MiB", big=True),
    C("wheel_bomb", "bomb", 2, "WHEEL inflates past 64 KiB", bomb("{di}/WHEEL", 1 << 20), "a WHEEL file inflating to 1 MiB"),
    C("so_bomb", "bomb", 2, "declares 6\\.0 GiB uncompressed", bomb("{dist}/lib/libzero.so", 6 << 30), "a 6 GiB shared library of zeros in a 6 MB wheel", big=True),
    C("spread_bomb", "bomb", 2, "declares 300\\.\\d MiB uncompressed, over the limit of 256 MiB", raw(spread), "300 members of 1 MiB zeros each: no one member is big", big=True),
    # --- member counts, counted before the directory is parsed
    C("members_150k", "member-count", 2, "more than 100,000 members", many(150000, "{dist}/m/{i}"), "150,000 empty members", big=True),
    C("members_million", "member-count", 2, "zip directory is [\\d.]+ MiB, over the limit of 32 MiB", many(1000000, "{dist}/m/{i}"), "a million empty members", big=True),
    C("dist_info_5000", "member-count", 2, "5,001 \\.dist-info directories", many(5000, "hx{i}.dist-info/RECORD", b"a,,\n"), "5,000 members named *.dist-info/RECORD: linear time", big=True),
    # --- zip headers that lie
    C("lying_sizes", "lying-header", 2, "declares \\d+(\\.\\d)? GiB uncompressed", raw(claims), "three members claiming 4 GiB each"),
    C("shared_header", "lying-header", 2, "2,000 zip entries overlap", raw(lambda d: [Raw.of(f"{d}/blob.bin", bytes(1 << 20))], alias=2000), "2,000 directory entries sharing one local header", big=True),
    C("bad_offset", "lying-header", 2, "no local header where the directory says", patched(raw(lambda d: [Raw.of(f"{d}/moved.bin", b"x" * 4096)]), "{dist}/moved.bin", 42, 0x7FFFFFF0), "a directory entry pointing into another member's data"),
    C("past_directory", "lying-header", 2, "run past the directory", patched(raw(lambda d: [Raw.of(f"{d}/long.bin", b"x" * 4096)]), "{dist}/long.bin", 20, 50 << 20), "a member whose compressed size runs past the end of the archive"),
    # --- records stay small
    C("dup_5000", "records-small", 1, "4,989 more duplicate entries, named 'hx_dup_5000/dup.py'\\n", many(5000, "{dist}/dup.py", b"", once=True), "one name 5,000 times", big=True, record_cap=RECORD_CAP),
    C("unsafe_5000", "records-small", 1, "4,990 more unsafe-path entries", many(5000, "../escape{i}.py", b"", listed=True), "5,000 names climbing out of the wheel", big=True, record_cap=RECORD_CAP),
    # --- the C++ consumer check, sandboxed
    C("cpp_empty_header", "cpp-sandbox", 0, "nothing to check: .*declare nothing", header(EMPTY_HEADER), "a header that declares nothing: nothing to check, not a pass"),
    C("cpp_token_abs", "cpp-sandbox", 1, "fx\\.h includes '/tmp/wheelwright-hostile-secret/token', an absolute path", header('#include "{secret}"\n' + FX), "a header including a token file of the auditing machine", secret=True),
    C("cpp_dev_zero", "cpp-sandbox", 1, "includes '/dev/zero', an absolute path", header('#include "/dev/zero"\n' + FX), "a header including /dev/zero (g++ took 22.8 GB)"),
    C("cpp_dotdot", "cpp-sandbox", 1, "climbing out of the include directories", header('#include "../../../../../../../..{secret}"\n' + FX), "a quoted include climbing out with ..", secret=True),
    C("cpp_angle_dotdot", "cpp-sandbox", 1, "climbing out of the include directories", header("#include <../../../../../../../..{secret}>\n" + FX), "an angle include climbing out with ..", secret=True),
    C("cpp_has_include", "cpp-sandbox", 1, "an absolute path", header('#if __has_include("{secret}")\nint hx_has;\n#endif\n' + FX), "__has_include probing a file of the auditing machine", secret=True),
    C("cpp_dependency", "cpp-sandbox", 1, "an absolute path", header('#pragma GCC dependency "{secret}"\n' + FX), "#pragma GCC dependency naming a file of the auditing machine", secret=True),
    C("cpp_computed_token", "cpp-sandbox", 1, "open 1 file\\(s\\) outside the wheel's headers", header('#define HX_P "{secret}"\n#include HX_P\n' + FX), "a computed #include of the token file", secret=True),
    C("cpp_comment_include", "cpp-sandbox", 1, "outside the wheel's headers", header('# /* hidden */ include "{secret}"\n' + FX), "an #include the line scanner cannot see (a comment inside the directive)", secret=True),
    C("cpp_continuation", "cpp-sandbox", 1, "outside the wheel's headers", header('#inc\\\nlude "{secret}"\n' + FX), "an #include split by a line continuation", secret=True),
    C("cpp_computed_dev_zero", "cpp-sandbox", 1, "outside the wheel's headers|does not compile", header("#define HX_Z </dev/zero>\n#include HX_Z\n" + FX), "a computed #include of /dev/zero: bounded memory"),
    C("cpp_stringify", "cpp-sandbox", 1, "outside the wheel's headers", header('#define HX_P "{secret}"\n#define HX_S(x) #x\nstatic_assert(sizeof(HX_S(\n#include HX_P\n)) == 0, "x");\n' + FX), "token-file content stringified into a diagnostic", secret=True),
    C("cpp_many_errors", "cpp-sandbox", 1, "does not compile[\\s\\S]*other lines not shown", header("".join(f"int hx_bad{i} = ;\n" for i in range(300)) + FX), "300 errors: the finding keeps the first few"),
    # --- CUDA libraries known by what they are (the grafting check)
    C("renamed_cudart", "grafting", 1, "lib/libhelper\\.so", plain(lambda d: {f"{d}/lib/libhelper.so": cudart_elf()}), "the CUDA runtime shipped as lib/libhelper.so"),
)
# fmt: on


def build(case: Case, out_dir: Path) -> Path:
    """Build one case's wheel into ``out_dir``; returns its path."""
    path = out_dir / case.wheel
    case.make(path, case.dist)
    return path


def main() -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    for old in OUT.glob("*.whl"):
        old.unlink()
    for case in CASES:
        if not case.big:
            build(case, OUT)
    cases = [c.to_json() for c in CASES]
    text = json.dumps({"secret_file": SECRET_FILE, "secret": SECRET, "cases": cases}, indent=2) + "\n"
    EXPECTED.write_text(text, encoding="utf-8")
    small = sum(not c.big for c in CASES)
    print(
        f"wrote {small} wheels and {EXPECTED.relative_to(ROOT)}: {len(CASES)} cases, {len(CASES) - small} built at test time"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
