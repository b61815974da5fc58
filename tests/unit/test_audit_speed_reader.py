"""release.audit.reading.archive's own member reader (stored and deflated members, zlib or ISA-L): every byte
and every corruption the zipfile reader caught is still caught, each with an archive that fails it."""

from __future__ import annotations

import hashlib
import importlib
import os
import stat
import struct
import zipfile
import zlib
from pathlib import Path

import pytest

from release.audit.reading.archive import open_wheel
from release.binary import inflate

NAME = "pkg-1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
INFLATERS = ["zlib", "isal.isal_zlib"]


@pytest.fixture(params=INFLATERS)
def inflater(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each test runs with zlib and with ISA-L (a dependency: it must be importable)."""
    monkeypatch.setattr(inflate, "INFLATER", importlib.import_module(request.param))
    return str(request.param)


def _info(name: str, method: int = zipfile.ZIP_DEFLATED) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0))
    info.create_system = 3
    info.external_attr = (stat.S_IFREG | 0o644) << 16
    info.compress_type = method
    return info


def make(tmp_path: Path, entries: list[tuple[str, bytes, int]]) -> Path:
    path = tmp_path / NAME
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, method in entries:
            zf.writestr(_info(name, method), data)
    return path


def _patch_directory(wheel: Path, name: str, offset: int, fmt: str, value: int) -> None:
    """Overwrite one field of ``name``'s central directory entry (offset from its signature)."""
    blob = bytearray(wheel.read_bytes())
    at = blob.index(b"PK\x01\x02" + blob[blob.index(b"PK\x01\x02") + 4 : blob.index(b"PK\x01\x02") + 4])
    while True:
        n = struct.unpack_from("<H", blob, at + 28)[0]
        if blob[at + 46 : at + 46 + n] == name.encode():
            break
        at = blob.index(b"PK\x01\x02", at + 4)
    struct.pack_into(fmt, blob, at + offset, value)
    wheel.write_bytes(bytes(blob))


def _local_offset(wheel: Path, name: str) -> int:
    with zipfile.ZipFile(wheel) as zf:
        return zf.getinfo(name).header_offset


def _audit(wheel: Path) -> tuple[dict[str, bytes | None], list[str]]:
    with open_wheel(wheel, write_all=True) as w:
        digests = {m.name: m.sha256 for m in w.members}
        return digests, [f"{i.kind}: {i.message}" for i in w.issues]


BIG = os.urandom(300_000) + b"\0" * (3 << 20) + bytes(range(256)) * 4000  # several chunks, runs of zeros


@pytest.mark.parametrize(
    "method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]
)
def test_every_method_reads_every_byte(tmp_path: Path, inflater: str, method: int) -> None:
    wheel = make(tmp_path, [("pkg/lib/libbig.so", BIG, method), ("pkg/x.py", b"x = 1\n", method)])
    digests, issues = _audit(wheel)
    assert not issues
    assert digests["pkg/lib/libbig.so"] == hashlib.sha256(BIG).digest()
    assert digests["pkg/x.py"] == hashlib.sha256(b"x = 1\n").digest()


def test_output_held_inside_the_inflater_is_drained(
    tmp_path: Path, inflater: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tiny output chunk: 1 KiB of compressed zeros holds megabytes the inflater hands out in pieces."""
    monkeypatch.setattr(inflate, "CHUNK", 4096)
    monkeypatch.setattr(inflate, "READ", 512)
    zeros = b"\0" * (2 << 20)
    digests, issues = _audit(make(tmp_path, [("pkg/zeros.bin", zeros, zipfile.ZIP_DEFLATED)]))
    assert not issues
    assert digests["pkg/zeros.bin"] == hashlib.sha256(zeros).digest()


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2])
def test_a_wrong_crc_is_corrupt(tmp_path: Path, inflater: str, method: int) -> None:
    wheel = make(tmp_path, [("pkg/lib/libbig.so", BIG, method), ("pkg/x.py", b"ok", method)])
    _patch_directory(wheel, "pkg/lib/libbig.so", 16, "<I", zlib.crc32(BIG) ^ 1)
    digests, issues = _audit(wheel)
    assert len(issues) == 1 and issues[0].startswith("corrupt: 'pkg/lib/libbig.so'") and "CRC" in issues[0]
    assert digests["pkg/lib/libbig.so"] is None
    assert digests["pkg/x.py"] == hashlib.sha256(b"ok").digest()


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
@pytest.mark.parametrize("delta", [-1, 1])
def test_a_size_that_lies_is_corrupt(tmp_path: Path, inflater: str, method: int, delta: int) -> None:
    """The directory's uncompressed size must be the member's: shorter or longer is corrupt."""
    wheel = make(tmp_path, [("pkg/data.bin", BIG, method)])
    _patch_directory(wheel, "pkg/data.bin", 24, "<I", len(BIG) + delta)
    _digests, issues = _audit(wheel)
    assert len(issues) == 1 and issues[0].startswith("corrupt: 'pkg/data.bin'")
    assert f"{len(BIG) + delta:,}" in issues[0] and "directory" in issues[0]


def test_a_truncated_stream_is_corrupt(tmp_path: Path, inflater: str) -> None:
    wheel = make(tmp_path, [("pkg/data.bin", BIG, zipfile.ZIP_DEFLATED)])
    with zipfile.ZipFile(wheel) as zf:
        size = zf.getinfo("pkg/data.bin").compress_size
    _patch_directory(wheel, "pkg/data.bin", 20, "<I", size // 2)
    _digests, issues = _audit(wheel)
    assert len(issues) == 1 and "ends before its end marker" in issues[0]


def test_local_name_must_match_the_directory(tmp_path: Path, inflater: str) -> None:
    wheel = make(tmp_path, [("pkg/good.py", b"x", zipfile.ZIP_DEFLATED)])
    at = _local_offset(wheel, "pkg/good.py") + 30
    blob = bytearray(wheel.read_bytes())
    blob[at : at + len("pkg/good.py")] = b"pkg/evil.py"
    wheel.write_bytes(bytes(blob))
    _digests, issues = _audit(wheel)
    assert len(issues) == 1 and "'pkg/evil.py'" in issues[0] and "differ" in issues[0]


@pytest.mark.parametrize("where", ["local", "directory"])
def test_encrypted_members_are_refused(tmp_path: Path, inflater: str, where: str) -> None:
    wheel = make(tmp_path, [("pkg/secret.py", b"x", zipfile.ZIP_DEFLATED), ("pkg/ok.py", b"y", 8)])
    if where == "local":
        at = _local_offset(wheel, "pkg/secret.py") + 6
        blob = bytearray(wheel.read_bytes())
        blob[at] |= 0x1
        wheel.write_bytes(bytes(blob))
    else:
        _patch_directory(wheel, "pkg/secret.py", 8, "<H", 0x1)
    digests, issues = _audit(wheel)
    assert len(issues) == 1 and issues[0].startswith("corrupt: 'pkg/secret.py'")
    assert "encrypted" in issues[0] or "password" in issues[0]
    assert digests["pkg/ok.py"] == hashlib.sha256(b"y").digest()


def test_a_corrupt_stream_is_corrupt(tmp_path: Path, inflater: str) -> None:
    wheel = make(tmp_path, [("pkg/data.bin", BIG, zipfile.ZIP_DEFLATED), ("pkg/ok.py", b"y", 8)])
    with zipfile.ZipFile(wheel) as zf:
        info = zf.getinfo("pkg/data.bin")
    blob = bytearray(wheel.read_bytes())
    start = info.header_offset + 30 + len(info.filename) + len(info.extra) + 1000
    for i in range(start, start + 64):
        blob[i] ^= 0xFF
    wheel.write_bytes(bytes(blob))
    digests, issues = _audit(wheel)
    assert len(issues) == 1 and issues[0].startswith("corrupt: 'pkg/data.bin'")
    assert digests["pkg/ok.py"] == hashlib.sha256(b"y").digest()
