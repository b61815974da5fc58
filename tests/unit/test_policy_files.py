"""What the policy reader accepts as a file: a regular file of at most 1 MiB, UTF-8 without a BOM.

Each refusal is a PolicyError (exit 2) naming the path and the problem. The FIFO case,
which would hang a reader that opens first, runs in a subprocess with a deadline in
tests/integration/test_hostile_policies.py.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from helpers.policy import stub_project

from release.core.errors import PolicyError
from release.policy.load import load_policy
from release.policy.read import MAX_POLICY_BYTES, parse_toml, read_policy_file

ROOT = Path(__file__).resolve().parents[2]
ROWS = (ROOT / "rows.toml").read_bytes()


def _refusal(path: str | Path) -> str:
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert info.value.return_code == 2
    return str(info.value)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    assert _refusal(tmp_path) == (
        f"{tmp_path}: is a directory, not a regular file; pass the path of the policy .toml file (--policy PATH)"
    )


def test_a_device_is_refused_without_reading_it() -> None:
    assert _refusal("/dev/zero").startswith("/dev/zero: is a device, not a regular file")
    assert _refusal("/dev/null").startswith("/dev/null: is a device, not a regular file")


def test_an_empty_path_is_refused_by_name() -> None:
    assert _refusal("") == "'': the policy path is empty; pass --policy PATH (default: rows.toml)"


def test_a_nul_in_the_path_is_refused() -> None:
    assert "contains a NUL character" in _refusal("rows.toml\0x")


def test_a_missing_file_and_a_missing_folder(tmp_path: Path) -> None:
    assert _refusal(tmp_path / "nope.toml").endswith(
        "file not found; pass --policy PATH or run from the repo root"
    )
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "cannot read: Not a directory" in _refusal(blocker / "rows.toml")


def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    with big.open("wb") as f:
        f.truncate(4 << 30)  # sparse: 4 GiB by its size, nothing on disk
    message = _refusal(big)
    assert message == (
        f"{big}: is {4 << 30} bytes; a policy file is at most 1024 KiB (rows.toml is a few KB): "
        "is this the right file?"
    )


def test_a_file_at_the_cap_is_read(tmp_path: Path) -> None:
    padded = tmp_path / "padded.toml"
    stub_project(tmp_path, "examples/tinyaxpy")
    padded.write_bytes(ROWS + b"#" * (MAX_POLICY_BYTES - len(ROWS)))
    assert padded.stat().st_size == MAX_POLICY_BYTES
    assert load_policy(padded).project.name == "tinyaxpy"
    padded.write_bytes(ROWS + b"#" * (MAX_POLICY_BYTES + 1 - len(ROWS)))
    assert "a policy file is at most 1024 KiB" in _refusal(padded)


def test_a_symlink_to_a_policy_is_followed(tmp_path: Path) -> None:
    link = tmp_path / "rows.toml"
    link.symlink_to(ROOT / "rows.toml")
    policy = load_policy(link)
    assert policy.sha256 == hashlib.sha256(ROWS).hexdigest()
    assert policy.source == link


def test_unreadable_paths_say_why(tmp_path: Path) -> None:
    loop = tmp_path / "loop.toml"
    loop.symlink_to(tmp_path / "loop2.toml")
    (tmp_path / "loop2.toml").symlink_to(loop)
    assert _refusal(loop) == f"{loop}: cannot read: Too many levels of symbolic links"
    long_name = tmp_path / ("x" * 300 + ".toml")
    assert _refusal(long_name) == f"{long_name}: cannot read: File name too long"


@pytest.mark.parametrize(
    ("prefix", "fragment"),
    [
        (b"\xef\xbb\xbf", "starts with a UTF-8 byte order mark (BOM); save it as UTF-8 without a BOM"),
        (b"\xff\xfe", "starts with a UTF-16 byte order mark; save it as UTF-8"),
        (b"\xfe\xff", "starts with a UTF-16 byte order mark; save it as UTF-8"),
    ],
)
def test_byte_order_marks_are_named(prefix: bytes, fragment: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_toml("p.toml", prefix + ROWS)
    assert str(info.value) == f"p.toml: {fragment}"


def test_utf8_errors_name_the_byte_and_line() -> None:
    with pytest.raises(PolicyError, match=r"^p\.toml: not UTF-8 text \(byte 0xff at line 3\)"):
        parse_toml("p.toml", b"a = 1\nb = 2\n\xff = 3\n")


@pytest.mark.parametrize("depth", [5000, 100_000])
@pytest.mark.parametrize(("open_", "close"), [("[", "]"), ("{a = ", "}")])
def test_deep_nesting_is_a_clean_refusal(depth: int, open_: str, close: str) -> None:
    text = "x = " + open_ * depth + ("1" if open_ != "[" else "") + close * depth
    with pytest.raises(PolicyError, match="nested too deeply to read"):
        parse_toml("p.toml", text.encode())


def test_moderate_nesting_reaches_the_schema_check(tmp_path: Path) -> None:
    nested = tmp_path / "nested.toml"
    nested.write_bytes(ROWS.replace(b"schema_version = 1", b"schema_version = " + b"[" * 50 + b"]" * 50))
    message = _refusal(nested)
    assert "schema_version: [[[[" in message and "(a list) is not supported" in message
    assert len(message) < 300, "a value is shown cut short"


def test_the_digest_is_of_the_bytes_parsed(tmp_path: Path) -> None:
    copy = tmp_path / "rows.toml"
    copy.write_bytes(ROWS)
    read = read_policy_file(copy)
    assert read.sha256 == hashlib.sha256(ROWS).hexdigest()
    assert read.source == copy
    assert read.data["schema_version"] == 1
