"""Rewriting a wheel deterministically: renamed members, replaced contents, a new RECORD.

The same input and the same changes give the same bytes: members in a fixed order (the
package's files sorted by name, then the ``.dist-info`` files sorted, ``RECORD`` last), every
member's timestamp from ``SOURCE_DATE_EPOCH`` when given (else the member's own), each
member's file mode kept, deflate at one fixed level, and a ``RECORD`` computed from the
bytes written. Reading is bounded the way installers bound it: a member's name must be a
plain relative path.
"""

from __future__ import annotations

import base64
import csv
import datetime as _dt
import hashlib
import io
import posixpath
import zipfile
from collections.abc import Mapping
from pathlib import Path

from release.core.errors import InputError

COMPRESS_LEVEL = 6
_MIN_DATE = (1980, 1, 1, 0, 0, 0)


def member_problem(name: str) -> str | None:
    """Why a member name cannot be written into a wheel, or None (pure)."""
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return "not a plain relative path"
    parts = name.rstrip("/").split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "has an empty, '.' or '..' part"
    return None


def epoch_date(epoch: int) -> tuple[int, int, int, int, int, int]:
    """A zip timestamp for ``SOURCE_DATE_EPOCH`` (UTC, clipped to 1980 as zip requires)."""
    when = _dt.datetime.fromtimestamp(epoch, tz=_dt.UTC).timetuple()[:6]
    return max(when, _MIN_DATE)


def record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def member_order(names: list[str], dist_info: str) -> list[str]:
    """The package's files sorted, then the dist-info's sorted, its RECORD last (pure)."""
    record = f"{dist_info}/RECORD"
    inside = sorted(n for n in names if n.startswith(f"{dist_info}/") and n != record)
    outside = sorted(n for n in names if not n.startswith(f"{dist_info}/"))
    return [*outside, *inside, *([record] if record in names else [])]


def record_text(entries: list[tuple[str, bytes]], record_name: str) -> str:
    """``RECORD`` for these files (directories have no line), itself last with no hash (pure)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for name, data in entries:
        if name.endswith("/") or name == record_name:
            continue
        writer.writerow([name, record_hash(data), str(len(data))])
    writer.writerow([record_name, "", ""])
    return out.getvalue()


def rewrite(
    source: Path,
    dest: Path,
    *,
    dist_info: str,
    renames: Mapping[str, str],
    replace: Mapping[str, bytes],
    epoch: int | None,
) -> None:
    """Write ``dest`` from ``source``: member prefixes renamed (``old/`` -> ``new/``), contents of
    the named members (new names) replaced, a fresh RECORD. ``dist_info`` is the new name."""
    with zipfile.ZipFile(source) as zin:
        infos = zin.infolist()
        for info in infos:
            problem = member_problem(info.filename)
            if problem:
                raise InputError(f"{source.name}: member {info.filename!r} {problem}")
        renamed: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            for old, new in renames.items():
                if name == old or name.startswith(old + "/"):
                    name = new + name[len(old) :]
                    break
            if name in renamed:
                raise InputError(f"{source.name}: two members would both be named {name!r}")
            renamed[name] = info
        signatures = [n for n in renamed if n.startswith(f"{dist_info}/RECORD.")]
        for n in signatures:  # RECORD.jws / RECORD.p7s sign the old RECORD: they cannot stay
            del renamed[n]
        record_name = f"{dist_info}/RECORD"
        order = member_order(
            [*renamed, record_name] if record_name not in renamed else list(renamed), dist_info
        )
        written: list[tuple[str, bytes]] = []
        with zipfile.ZipFile(dest, "w", compression=zipfile.ZIP_DEFLATED) as zout:
            for name in order:
                original: zipfile.ZipInfo | None
                if name == record_name:
                    data = record_text(written, record_name).encode("utf-8")
                    original = renamed.get(name)
                else:
                    original = renamed[name]
                    data = replace[name] if name in replace else zin.read(original)
                info = zipfile.ZipInfo(
                    name, date_time=epoch_date(epoch) if epoch is not None else _old_date(original)
                )
                info.create_system = 3
                mode = (original.external_attr >> 16) & 0o7777 if original is not None else 0
                info.external_attr = (
                    (mode or (0o755 if name.endswith("/") else 0o644)) | _type_bits(name)
                ) << 16
                if name.endswith("/"):
                    info.external_attr |= 0x10  # MS-DOS directory bit
                    zout.writestr(info, b"")
                    written.append((name, b""))
                    continue
                info.compress_type = zipfile.ZIP_DEFLATED
                zout.writestr(info, data, compresslevel=COMPRESS_LEVEL)
                written.append((name, data))


def _old_date(info: zipfile.ZipInfo | None) -> tuple[int, int, int, int, int, int]:
    if info is None:
        return _MIN_DATE
    year, month, day, hour, minute, second = info.date_time
    return max((year, month, day, hour, minute, second), _MIN_DATE)


def _type_bits(name: str) -> int:
    return 0o040000 if name.endswith("/") else 0o100000


def install_path(member: str, data_dir: str | None) -> str | None:
    """Where a member lands relative to site-packages (pure): itself, or a ``.data/purelib``
    / ``.data/platlib`` member's rest; None for scripts, headers and data files."""
    if data_dir is not None and member.startswith(data_dir + "/"):
        rest = member[len(data_dir) + 1 :]
        kind, _, inner = rest.partition("/")
        return inner if kind in ("purelib", "platlib") and inner else None
    return posixpath.normpath(member)
