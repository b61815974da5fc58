"""release.core.hashing: a wheel's sha256 started early is used only for the very file it hashed."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from release.audit.reading.archive import open_wheel
from release.cli import main
from release.core import hashing

NAME = "pkg-1.0-py3-none-any.whl"


def _wheel(path: Path, payload: bytes) -> Path:
    """A valid pure wheel (the audit reads it to the end) whose module holds ``payload``."""
    files = {
        "pkg/__init__.py": payload,
        "pkg-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n",
        "pkg-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{name},sha256={_b64(data)},{len(data)}" for name, data in files.items()]
    files["pkg-1.0.dist-info/RECORD"] = ("\n".join([*record, "pkg-1.0.dist-info/RECORD,,"]) + "\n").encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("size", [0, 1, hashing.WINDOW - 1, hashing.WINDOW, hashing.WINDOW + 7])
def test_sha256_file_over_window_edges(tmp_path: Path, size: int) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(os.urandom(size))
    assert hashing.sha256_file(path) == _sha(path)


def test_early_hash_is_used_for_the_same_file(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / NAME, b"x = 1\n")
    hashing.hash_early([wheel])
    job = hashing.take_early(wheel)
    assert job is not None
    assert job.result(wheel.stat()) == _sha(wheel)
    assert hashing.take_early(wheel) is None  # taken once


def test_open_wheel_takes_the_early_hash(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / NAME, b"x = 1\n")
    hashing.hash_early([str(tmp_path / "." / NAME)])  # another spelling of the same path
    with open_wheel(wheel) as opened:
        assert opened.sha256 == _sha(wheel)
    assert hashing.take_early(wheel) is None  # open_wheel took it


def test_a_file_replaced_after_its_early_hash_is_hashed_again(tmp_path: Path) -> None:
    """Must fail an early hash that outlived its file: the audit's sha256 is the audited bytes'."""
    wheel = _wheel(tmp_path / NAME, b"x = 1\n")
    hashing.hash_early([wheel])
    old = _sha(wheel)
    job = hashing.take_early(wheel)
    assert job is not None
    assert job.result(wheel.stat()) == old
    hashing.hash_early([wheel])  # started again, then the wheel is replaced under it
    replacement = _wheel(tmp_path / "other.whl", b"x = 2  # another wheel, same name\n")
    os.replace(replacement, wheel)
    with open_wheel(wheel) as opened:
        assert opened.sha256 == _sha(wheel) != old


def test_a_file_rewritten_in_place_is_hashed_again(tmp_path: Path) -> None:
    """Same inode, same size, new bytes and modification time: the early digest is not used."""
    wheel = _wheel(tmp_path / NAME, b"x = 1\n")
    hashing.hash_early([wheel])
    job = hashing.take_early(wheel)
    assert job is not None
    before = wheel.stat()
    assert job.result(before) == _sha(wheel)
    data = bytearray(wheel.read_bytes())
    data[-1] ^= 0xFF  # the end of the central directory's comment length: still the same size
    with wheel.open("r+b") as f:
        f.write(bytes(data))
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert job.result(wheel.stat()) is None


def test_no_file_no_job(tmp_path: Path) -> None:
    hashing.hash_early([tmp_path / "missing.whl", tmp_path])
    assert hashing.take_early(tmp_path / "missing.whl") is None
    assert hashing.take_early(tmp_path) is None


def test_the_audit_command_hashes_its_first_wheel_early(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the command: the wheel's early hash is started and taken, and the JSON's sha256 is right."""
    wheel = _wheel(tmp_path / NAME, b"x = 1\n")
    monkeypatch.chdir(tmp_path)
    started: list[str] = []
    real = hashing.hash_early

    def spy(paths: list[str]) -> None:
        started.extend(paths)
        real(paths)

    monkeypatch.setattr(hashing, "hash_early", spy)
    code = main(["-q", "audit", str(wheel), "--variant", "cpu", "--json", "--no-record"])
    assert started == [str(wheel)]
    assert hashing.take_early(wheel) is None  # the audit took it
    assert f'"sha256": "{_sha(wheel)}"' in capsys.readouterr().out
    assert code in (0, 1)
