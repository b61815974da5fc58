"""tests/helpers/real_wheels.py hashes a cached pinned wheel once per process: the slow tier asks for the
same 0.5 GB wheels dozens of times. A file whose bytes change after it was hashed (a new inode, size or
modification time) is hashed again and refused when it is not the pin."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from helpers import real_wheels


@pytest.fixture
def hashed(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files real_wheels.sha256_of reads (the real function, counted)."""
    seen: list[Path] = []
    real = real_wheels.sha256_of

    def counting(path: Path) -> str:
        seen.append(path)
        return real(path)

    monkeypatch.setattr(real_wheels, "sha256_of", counting)
    monkeypatch.setattr(real_wheels, "_VERIFIED", {})
    return seen


def test_a_verified_file_is_hashed_once(tmp_path: Path, hashed: list[Path]) -> None:
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"pinned bytes")
    pin = hashlib.sha256(b"pinned bytes").hexdigest()
    assert real_wheels.is_pinned_file(wheel, pin)
    assert real_wheels.is_pinned_file(wheel, pin)
    assert hashed == [wheel]


def test_a_file_changed_after_its_hash_is_hashed_again_and_refused(
    tmp_path: Path, hashed: list[Path]
) -> None:
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"pinned bytes")
    pin = hashlib.sha256(b"pinned bytes").hexdigest()
    assert real_wheels.is_pinned_file(wheel, pin)
    before = wheel.stat()
    wheel.write_bytes(b"other  bytes")  # the same size, written in place
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns + 1_000_000))
    assert not real_wheels.is_pinned_file(wheel, pin)
    assert not real_wheels.is_pinned_file(wheel, pin)  # a refusal is not remembered as a pass
    assert hashed == [wheel, wheel, wheel]


def test_another_pin_for_the_same_file_is_hashed_and_refused(tmp_path: Path, hashed: list[Path]) -> None:
    wheel = tmp_path / "w.whl"
    wheel.write_bytes(b"pinned bytes")
    assert real_wheels.is_pinned_file(wheel, hashlib.sha256(b"pinned bytes").hexdigest())
    assert not real_wheels.is_pinned_file(wheel, hashlib.sha256(b"another pin").hexdigest())
    assert len(hashed) == 2
