"""Bounds on what the audit does with an untrusted wheel: the reader's budget.

A wheel is hostile input: the audit reads it with every size counted as it is read
(never trusted from a zip header) and refuses it as bad input (exit 2, naming the
file and the limit) past any of :class:`Limits`. A tool run on the wheel's contents
(the C++ compiler) runs under :func:`release.core.sandbox.run_limited`: its own session, a
clean environment, limits on CPU time, address space and file size, a wall-clock limit,
and only the first part of its output read back. docs/security.md lists the limits
and what they guarantee.
"""

from __future__ import annotations

import os
import struct
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO, Literal

from release.core.errors import InputError, StepFailed, WheelwrightError
from release.core.sizes import GIB, KIB, MIB, size

__all__ = [
    "LIMITS",
    "Budget",
    "LimitExceeded",
    "Limits",
    "central_directory_start",
    "check_layout",
    "first_few",
    "size",
]


@dataclass(frozen=True)
class Limits:
    """What a wheel may make the audit read, hold and write. Past any of them: exit 2."""

    members: int = 100_000  # torch 2.14 has 13,043; the largest wheel seen, 15,586
    central_directory_bytes: int = 32 * MIB  # torch's: 1.3 MB
    metadata_bytes: int = 16 * MIB  # .dist-info/METADATA (a long description included)
    wheel_file_bytes: int = 64 * KIB  # .dist-info/WHEEL: a handful of lines
    record_bytes: int = 32 * MIB  # .dist-info/RECORD (torch's: 1.6 MB)
    record_line_chars: int = 16 * KIB  # a path is at most 4,096 bytes on Linux; csv's field limit is 131,072
    record_lines: int = 100_000  # one line per member at most
    inflate_ratio: int = 100  # total inflated bytes per byte of wheel (real wheels: 1.4 to 7)
    inflate_floor: int = 256 * MIB  # ...but a small wheel may always inflate to this much
    inflated_bytes: int = 32 * GIB  # and no wheel to more than this
    disk_reserve_bytes: int = 256 * MIB  # free space left under TMPDIR, whatever the wheel

    def inflated_cap(self, wheel_size: int) -> int:
        """The most a wheel of ``wheel_size`` bytes may inflate to, all members together."""
        return min(self.inflated_bytes, max(self.inflate_floor, self.inflate_ratio * wheel_size))

    def member_cap(self, name: str) -> int | None:
        """The most one member may inflate to, for the few the audit reads whole; None: no own cap."""
        top, _, rest = name.partition("/")
        if not top.endswith(".dist-info") or "/" in rest:
            return None
        return {
            "METADATA": self.metadata_bytes,
            "WHEEL": self.wheel_file_bytes,
            "RECORD": self.record_bytes,
        }.get(rest)


LIMITS = Limits()


class LimitExceeded(InputError):
    """The wheel made the audit go past one of :class:`Limits`: bad input, exit 2."""


def first_few(names: Sequence[str], shown: int = 5) -> str:
    """``'a', 'b', 'c' and 997 more``: a list in a message or record stays small."""
    head = ", ".join(repr(n) if len(n) <= 200 else repr(n[:200] + "...") for n in names[:shown])
    more = len(names) - shown
    return f"{head} and {more:,} more" if more > 0 else head


class Budget:
    """Bytes inflated and written so far for one wheel, counted as they come; thread-safe.

    :meth:`inflated` refuses the wheel (:class:`LimitExceeded`) past its cap, :meth:`written`
    stops the step (:class:`~release.core.errors.StepFailed`) when the next bytes would leave
    less than the reserve free under the temporary directory. After :meth:`refuse` every
    counting call raises :class:`Stopped` (one thread's refusal stops the others) and
    :attr:`error` is the first refusal, the one to report.
    """

    def __init__(self, wheel: str, wheel_size: int, disk_room: int, limits: Limits = LIMITS) -> None:
        self.wheel = wheel
        self.limits = limits
        self.cap = limits.inflated_cap(wheel_size)
        self.disk_room = disk_room
        self.error: WheelwrightError | None = None
        self._counted: dict[Literal["inflated", "written"], int] = {"inflated": 0, "written": 0}
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def halt(self) -> None:
        """Stop every reader at its next chunk (the caller has its own reason)."""
        self._stop.set()

    def refuse(self, error: WheelwrightError) -> WheelwrightError | Stopped:
        """Stop every reader, keep the first ``error`` as the reason; what the caller raises:
        ``error`` when it is the first, else :class:`Stopped`."""
        with self._lock:
            first = self.error is None
            if first:
                self.error = error
            self._stop.set()
        return error if first else Stopped()

    def _add(self, counter: Literal["inflated", "written"], n: int) -> int:
        """Count ``n`` more bytes; the new total."""
        with self._lock:
            self._counted[counter] += n
            return self._counted[counter]

    def inflated(self, n: int, member: str) -> None:
        if self._stop.is_set():
            raise Stopped
        if self._add("inflated", n) > self.cap:
            raise self.refuse(
                LimitExceeded(
                    f"{self.wheel}: its members inflate to more than {size(self.cap)}, the limit for a wheel "
                    f"of this size ({self.limits.inflate_ratio} times its size, at least "
                    f"{size(self.limits.inflate_floor)}); reached while inflating {member!r}: a zip bomb"
                )
            )

    def written(self, n: int) -> None:
        if self._add("written", n) > self.disk_room:
            raise self.refuse(
                StepFailed(
                    f"{self.wheel}: extracting it needs more than the {size(self.disk_room)} free under the "
                    "temporary directory (less a reserve); set TMPDIR to a larger disk"
                )
            )


class Stopped(Exception):
    """Another thread refused the wheel: stop reading."""


# --------------------------------------------------------------------------- the archive's layout

_EOCD = struct.Struct("<4s4H2LH")
_ZIP64_LOCATOR = struct.Struct("<4sLQL")
_ZIP64_EOCD = struct.Struct("<4sQ2H2L4Q")
_CENTRAL = struct.Struct("<4s6H3L5H2L")
_LOCAL = struct.Struct("<4s5H3L2H")


def central_directory_start(f: BinaryIO, file_size: int, limits: Limits, wheel: str) -> int:
    """Where the central directory starts; its entries counted from the raw bytes, before zipfile
    builds an object per entry (a million entries cost 2.4 GB that way)."""
    tail_start = max(0, file_size - _EOCD.size - 0xFFFF)
    f.seek(tail_start)
    tail = f.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _EOCD.size:
        raise InputError(f"{wheel}: not a readable zip archive: no end of central directory record")
    fields = _EOCD.unpack_from(tail, at)
    entries, cd_size = int(fields[4]), int(fields[5])
    end = tail_start + at
    if (entries == 0xFFFF or cd_size == 0xFFFFFFFF) and at >= _ZIP64_LOCATOR.size:
        loc = _ZIP64_LOCATOR.unpack_from(tail, at - _ZIP64_LOCATOR.size)
        if loc[0] == b"PK\x06\x07":
            end = tail_start + at - _ZIP64_LOCATOR.size - _ZIP64_EOCD.size
            f.seek(max(0, end))
            record = f.read(_ZIP64_EOCD.size)
            if len(record) == _ZIP64_EOCD.size and record[:4] == b"PK\x06\x06":
                cd_size = int(_ZIP64_EOCD.unpack(record)[8])
    if cd_size > limits.central_directory_bytes:
        raise LimitExceeded(
            f"{wheel}: its zip directory is {size(cd_size)}, over the limit of "
            f"{size(limits.central_directory_bytes)}"
        )
    start = end - cd_size
    f.seek(max(0, start))
    data = f.read(cd_size)
    pos = count = 0
    while pos + _CENTRAL.size <= len(data) and data[pos : pos + 4] == b"PK\x01\x02":
        n, m, k = struct.unpack_from("<3H", data, pos + 28)
        pos += _CENTRAL.size + n + m + k
        count += 1
        if count > limits.members:
            raise LimitExceeded(
                f"{wheel}: has more than {limits.members:,} members (the limit); the largest real wheels "
                "have about 16,000"
            )
    return start


def check_layout(
    f: BinaryIO, infos: list[zipfile.ZipInfo], cd_start: int, wheel: str, limits: Limits
) -> None:
    """Refuse entries whose data overlap (one stream counted many times: a zip bomb), run past the
    directory, or lack a local header, and a directory that declares more than the wheel may
    inflate to. Linear in the number of members (one 30-byte read each)."""
    overlapping: list[str] = []
    broken: list[str] = []
    end = 0
    for info in sorted(infos, key=lambda i: i.header_offset):
        if info.header_offset < end:
            overlapping.append(info.filename)
            continue
        f.seek(info.header_offset)
        head = f.read(_LOCAL.size)
        if len(head) < _LOCAL.size or head[:4] != b"PK\x03\x04":
            broken.append(info.filename)
            continue
        n, m = _LOCAL.unpack(head)[9:11]
        end = info.header_offset + _LOCAL.size + n + m + info.compress_size
        if end > cd_start:
            broken.append(info.filename)
    if overlapping:
        raise InputError(
            f"{wheel}: {len(overlapping):,} zip entries overlap the data of another ({first_few(overlapping)}): "
            "entries sharing one compressed stream are a zip bomb, never written by a wheel builder"
        )
    if broken:
        raise InputError(
            f"{wheel}: {len(broken):,} zip entries have no local header where the directory says, or run "
            f"past the directory ({first_few(broken)}): the zip headers lie"
        )
    cap = limits.inflated_cap(f.seek(0, os.SEEK_END))
    declared = sum(i.file_size for i in infos)
    if declared > cap:
        raise LimitExceeded(
            f"{wheel}: its zip directory declares {size(declared)} uncompressed, over the limit of {size(cap)} "
            f"for a wheel of this size ({limits.inflate_ratio} times its size, at least "
            f"{size(limits.inflate_floor)})"
        )
