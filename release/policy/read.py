"""Read a policy file's bytes and parse them as TOML, bounded and total.

Whatever path is given (a FIFO, ``/dev/zero``, a directory, an empty string, a file of
gigabytes, TOML nested five thousand deep, a byte order mark), the answer is either the
parsed table or a :class:`~release.core.errors.PolicyError` (exit 2) naming the file and
the problem: never a hang, a traceback or unbounded memory.

- Only a regular file is read: the path is ``stat``-ed first, then opened with
  ``O_NONBLOCK`` (so a FIFO swapped in between cannot block) and checked again.
- At most :data:`MAX_POLICY_BYTES` are read.
- The sha256 of exactly the bytes parsed is computed here, once.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.core.errors import PolicyError

MAX_POLICY_BYTES = 1 << 20  # 1 MiB; rows.toml is a few KB
_BOMS = (
    (b"\xef\xbb\xbf", "a UTF-8 byte order mark (BOM)", "save it as UTF-8 without a BOM"),
    (b"\xff\xfe", "a UTF-16 byte order mark", "save it as UTF-8"),
    (b"\xfe\xff", "a UTF-16 byte order mark", "save it as UTF-8"),
)


@dataclass(frozen=True)
class PolicyFile:
    """A policy file as read: the path as the user wrote it, where it is, its table and digest."""

    shown: str  # the path as given, for messages
    source: Path  # absolute path of the file read
    data: dict[str, Any]
    sha256: str  # of exactly the bytes parsed


def _kind_of(mode: int) -> str | None:
    """What a non-regular file is, in words; None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _refuse_kind(shown: str, mode: int) -> None:
    kind = _kind_of(mode)
    if kind is not None:
        raise PolicyError(
            shown,
            "",
            f"is {kind}, not a regular file; pass the path of the policy .toml file (--policy PATH)",
        )


def _too_big(shown: str, size: str) -> PolicyError:
    return PolicyError(
        shown,
        "",
        f"is {size}; a policy file is at most {MAX_POLICY_BYTES // 1024} KiB (rows.toml is a few KB): "
        "is this the right file?",
    )


def read_bytes(path: str | Path) -> tuple[str, Path, bytes]:
    """(path as shown, absolute path, the bytes) of a regular file of at most MAX_POLICY_BYTES."""
    text = os.fspath(path)
    if text == "":
        raise PolicyError("''", "", "the policy path is empty; pass --policy PATH (default: rows.toml)")
    shown = text if text.isprintable() else ascii(text)  # a newline in a name stays visible
    if "\0" in text:
        raise PolicyError(shown, "", "the policy path contains a NUL character; pass a real path")
    try:
        st = Path(text).stat()
    except FileNotFoundError:
        raise PolicyError(shown, "", "file not found; pass --policy PATH or run from the repo root") from None
    except OSError as exc:
        raise PolicyError(shown, "", f"cannot read: {exc.strerror}") from None
    _refuse_kind(shown, st.st_mode)
    if st.st_size > MAX_POLICY_BYTES:
        raise _too_big(shown, f"{st.st_size} bytes")
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(text, flags)
    except OSError as exc:
        raise PolicyError(shown, "", f"cannot read: {exc.strerror}") from None
    try:
        _refuse_kind(shown, os.fstat(fd).st_mode)  # swapped for something else since the stat
        chunks: list[bytes] = []
        total = 0
        while total <= MAX_POLICY_BYTES:
            chunk = os.read(fd, MAX_POLICY_BYTES + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    except OSError as exc:
        raise PolicyError(shown, "", f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if total > MAX_POLICY_BYTES:
        raise _too_big(shown, "growing while it is read")
    return shown, Path(text).absolute(), b"".join(chunks)


def parse_toml(shown: str, raw: bytes) -> dict[str, Any]:
    """The TOML table in ``raw``; a PolicyError naming the problem otherwise."""
    for bom, what, fix in _BOMS:
        if raw.startswith(bom):
            raise PolicyError(shown, "", f"starts with {what}; {fix}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise PolicyError(
            shown,
            "",
            f"not UTF-8 text (byte 0x{raw[exc.start]:02x} at line {line}); save the file as UTF-8",
        ) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(shown, "", f"not valid TOML: {exc}") from None
    except ValueError as exc:  # a value tomllib reads but Python refuses: an int of 5,000 digits
        reason = str(exc).split(";", 1)[0]
        raise PolicyError(shown, "", f"not a policy: a value cannot be read ({reason})") from None
    except RecursionError:
        raise PolicyError(
            shown, "", "not a policy: its arrays or tables are nested too deeply to read"
        ) from None


def read_policy_file(path: str | Path) -> PolicyFile:
    """Read, hash and parse a policy file; every failure is a PolicyError (exit 2)."""
    shown, source, raw = read_bytes(path)
    data = parse_toml(shown, raw)
    return PolicyFile(shown, source, data, hashlib.sha256(raw).hexdigest())
