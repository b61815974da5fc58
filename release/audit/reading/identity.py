"""The wheel as an installer sees it: member names and types, RECORD lines, one name, version and tags.

pip and installer decide a member's type by its name (a trailing slash is a directory,
whatever the zip's mode bits say), split RECORD with ``str.splitlines``, take the one
``.dist-info`` directory, and refuse (pip) a wheel whose ``.dist-info`` directory or
METADATA names another distribution or another version than its file name. The audit
reads the wheel the same way, so it audits what would be installed:

* :func:`safe_member_name`: names that may not be extracted (zip slip);
* :func:`member_kind`: the type by name, and why the mode bits disagree when they do
  (the wheel reader refuses such a member: bad input);
* :func:`read_record`: RECORD read once, bounded, refused when readers would split
  it differently or cannot read it;
* :func:`identity_split` (pure), :func:`read_identity` and :func:`check_identity`: file name,
  the one ``.dist-info`` directory, METADATA ``Name``/``Version`` and WHEEL ``Wheel-Version``,
  ``Tag`` and ``Build`` lines must agree. What pip refuses (no or two ``.dist-info``, another
  distribution's, METADATA naming another name or version, no WHEEL, a Wheel-Version not 1.x)
  is bad input (exit 2); what pip installs anyway (WHEEL's tags or build tag, the
  ``.dist-info`` folder's version, Root-Is-Purelib) is a failing finding of the hygiene check,
  so the wheel still gets a verdict.
"""

from __future__ import annotations

import csv
import io
import re
import stat
import zipfile
import zlib
from collections.abc import Sequence
from email.parser import HeaderParser

from packaging.tags import Tag
from packaging.utils import (
    InvalidName,
    InvalidWheelFilename,
    canonicalize_name,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from release.audit.model import WheelFile
from release.audit.reading.limits import LimitExceeded, Limits, first_few
from release.core.errors import InputError
from release.core.sizes import size

__all__ = [
    "check_identity",
    "dist_info_dirs",
    "dist_info_for",
    "identity_problems",
    "identity_split",
    "member_kind",
    "read_identity",
    "read_record",
    "safe_member_name",
    "unix_mode",
]

_DRIVE = re.compile(r"^[A-Za-z]:")


def safe_member_name(name: str) -> str | None:
    """Why ``name`` may not be extracted (zip slip and friends), or None when it is safe."""
    if not name:
        return "empty name"
    if "\0" in name:
        return "the name contains a NUL byte"
    if "\\" in name:
        return "the name contains a backslash (a Windows path separator)"
    if name.startswith("/"):
        return "absolute path"
    if _DRIVE.match(name):
        return "absolute Windows path (drive letter)"
    parts = name.rstrip("/").split("/")
    if any(p == ".." for p in parts):
        return "the path climbs out of the wheel with '..'"
    if any(p == "" for p in parts):
        return "the path has an empty component ('//')"
    return None


def unix_mode(info: zipfile.ZipInfo) -> int:
    return (info.external_attr >> 16) & 0xFFFF if info.create_system == 3 else 0


def member_kind(info: zipfile.ZipInfo) -> tuple[str, str | None]:
    """The member's kind as pip and installer see it (by name), and why its mode disagrees, if it does."""
    mode = unix_mode(info)
    fmt = stat.S_IFMT(mode)
    mode_dir = fmt == stat.S_IFDIR if info.create_system == 3 else bool(info.external_attr & 0x10)
    if info.filename.endswith("/"):
        if fmt not in (0, stat.S_IFDIR):
            return "directory", f"its name ends in '/' but its mode is {stat.filemode(mode)}"
        if info.file_size:
            return "directory", f"its name ends in '/' (a directory) but it carries {info.file_size} bytes"
        return "directory", None
    if mode_dir:
        return "file", (
            "its mode says directory but its name has no trailing '/': pip and installer decide by the "
            "name and install it as a file, which a reader going by the mode would skip"
        )
    if fmt in (0, stat.S_IFREG):
        return "file", None
    return ("symlink" if fmt == stat.S_IFLNK else "special"), None


def dist_info_dirs(names: Sequence[str]) -> list[str]:
    """Every top-level ``*.dist-info`` directory, as pip lists them (any member below one)."""
    return sorted(
        {n.split("/", 1)[0] for n in names if "/" in n and n.split("/", 1)[0].endswith(".dist-info")}
    )


def dist_info_for(names: Sequence[str], name: str) -> str | None:
    """The ``.dist-info`` directory of the distribution (the one named after it, if several)."""
    dirs = dist_info_dirs(names)
    own = [d for d in dirs if canonicalize_name(d.removesuffix(".dist-info").rsplit("-", 1)[0]) == name]
    return own[0] if own else (dirs[0] if dirs else None)


# --------------------------------------------------------------------------- RECORD

_RECORD_ALGORITHMS = ("sha384", "sha512")
# Line breaks str.splitlines() (pip's and installer's RECORD readers) splits on and csv does not.
_ODD_BREAKS = re.compile(r"\r(?!\n)|[\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


def _check_record_text(text: str, wheel: str, name: str, limits: Limits) -> None:
    lines = text.split("\n")
    if len(lines) > limits.record_lines + 1:
        raise LimitExceeded(
            f"{wheel}: {name} has {len(lines):,} lines, over the limit of {limits.record_lines:,}"
        )
    for number, line in enumerate(lines, 1):
        if len(line) > limits.record_line_chars:
            raise LimitExceeded(
                f"{wheel}: {name} line {number} is {len(line):,} characters long, over the limit of "
                f"{limits.record_line_chars:,}"
            )
        odd = _ODD_BREAKS.search(line.removesuffix("\r"))
        if odd is not None:
            raise InputError(
                f"{wheel}: {name} line {number} holds a line break {odd.group()!r} inside the line: pip and "
                "installer split RECORD there and csv does not, so they would read different files"
            )


def read_record(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo | None, wheel: str, limits: Limits
) -> dict[str, tuple[str, ...]]:
    """Read the wheel's RECORD once, bounded; refuse one that readers would split differently or
    cannot read (a csv error, a line past the limit); return the members its lines hash with
    sha384/sha512, so the extraction pass computes those too."""
    if info is None:
        return {}
    try:
        with archive.open(info) as f:
            data = f.read(limits.record_bytes + 1)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError, ValueError, RuntimeError, NotImplementedError):
        return {}  # the pass reports the damaged member
    name = info.filename
    if len(data) > limits.record_bytes:
        raise LimitExceeded(f"{wheel}: {name} is larger than {size(limits.record_bytes)}, the limit for it")
    text = data.decode("utf-8", errors="replace")
    _check_record_text(text, wheel, name, limits)
    out: dict[str, tuple[str, ...]] = {}
    reader = csv.reader(io.StringIO(text))
    try:
        for row in reader:
            if len(row) == 3 and row[1].partition("=")[0] in _RECORD_ALGORITHMS:
                out[row[0]] = (*out.get(row[0], ()), row[1].partition("=")[0])
    except csv.Error as exc:
        raise InputError(f"{wheel}: {name} line {reader.line_num} is not valid CSV: {exc}") from None
    return out


# --------------------------------------------------------------------------- name, version, tags


def _headers(text: str) -> dict[str, list[str]]:
    """The header fields of a METADATA or WHEEL file (email format), each with all its values."""
    head = text.split("\n\n", 1)[0]
    message = HeaderParser().parsestr(head)
    out: dict[str, list[str]] = {}
    for key, value in message.items():
        out.setdefault(key.lower(), []).append(str(value).strip())
    return out


def _one(
    fields: dict[str, list[str]], key: str, where: str, problems: list[str], why: str = ""
) -> str | None:
    """The one value of ``key``; None, with the problem added, when there is none or more than one."""
    values = fields.get(key.lower(), [])
    if len(values) == 1:
        return values[0]
    if not values:
        problems.append(f"{where} has no {key} field{why}")
    else:
        problems.append(
            f"{where} has {len(values)} {key} fields ({first_few(values, 3)}); installers read one{why}"
        )
    return None


def _wheel_problems(
    wheel_text: str | None, where: str, tags: frozenset[Tag], build: str
) -> tuple[list[str], list[str]]:
    """What is wrong with the WHEEL file: (what pip refuses, what pip installs anyway)."""
    if wheel_text is None:
        return [f"{where} is missing: pip refuses a wheel without it"], []
    fields = _headers(wheel_text)
    problems: list[str] = []
    tolerated: list[str] = []
    wheel_version = _one(fields, "Wheel-Version", where, problems, " (pip refuses it)")
    if wheel_version is not None and not re.fullmatch(r"1\.\d+", wheel_version):
        problems.append(f"{where} says Wheel-Version: {wheel_version}; installers read only 1.x")
    _one(fields, "Root-Is-Purelib", where, tolerated, " (pip reads a missing one as false)")
    listed: set[Tag] = set()
    bad_line = False
    for line in fields.get("tag", []):
        parts = line.split("-")
        if len(parts) != 3 or not all(parts):
            tolerated.append(f"{where} has a Tag line {line!r} that is not interpreter-abi-platform")
            bad_line = True
            continue
        listed.add(Tag(*parts))
    if not bad_line and listed != tags:
        tolerated.append(
            f"{where} lists the tags {sorted(map(str, listed)) or 'none'} but the file name says "
            f"{sorted(map(str, tags))}; pip installs by the file name's tags, while tools that read WHEEL "
            "(auditwheel, repair and retagging tools) go by these: they disagree on where it installs"
        )
    wheel_build = fields.get("build", [])
    if wheel_build != ([build] if build else []):
        tolerated.append(
            f"{where} says Build: {', '.join(wheel_build) or '(none)'} but the file name's build tag is "
            f"{build or '(none)'}; pip goes by the file name"
        )
    return problems, tolerated


def _metadata_problems(metadata: str | None, where: str, name: str, version: Version) -> list[str]:
    if metadata is None:
        return [f"{where} is missing: installers cannot tell what the wheel is"]
    fields = _headers(metadata)
    problems: list[str] = []
    meta_name = _one(fields, "Name", where, problems)
    if meta_name is not None:
        try:
            if canonicalize_name(meta_name, validate=True) != name:
                problems.append(
                    f"{where} says Name: {meta_name} but the file name says {name}; pip refuses the "
                    "inconsistent metadata"
                )
        except InvalidName:
            problems.append(f"{where} says Name: {meta_name!r}, not a valid distribution name")
    meta_version = _one(fields, "Version", where, problems)
    if meta_version is not None:
        try:
            if Version(meta_version) != version:
                problems.append(
                    f"{where} says Version: {meta_version} but the file name says {version}; pip refuses the "
                    "inconsistent metadata"
                )
        except InvalidVersion:
            problems.append(f"{where} says Version: {meta_version!r}, not a valid version")
    return problems


def identity_split(
    filename: str,
    dist_infos: Sequence[str],
    metadata: str | None,
    wheel_text: str | None,
) -> tuple[list[str], list[str]]:
    """What disagrees between a wheel's file name, its ``.dist-info`` directories, its METADATA and
    its WHEEL file, split in two: what pip refuses to install (bad input: exit 2) and what pip
    installs anyway (the audit's findings: a verdict). Pure: the caller reads the files."""
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        return [f"not a wheel file name: {exc}"], []
    if not dist_infos:
        return ["has no .dist-info directory: pip refuses it (not an installable wheel)"], []
    if len(dist_infos) > 1:
        return [
            f"has {len(dist_infos):,} .dist-info directories ({first_few(list(dist_infos))}): pip refuses a "
            "wheel with more than one, and tools reading the first would read another distribution"
        ], []
    dist_info = dist_infos[0]
    tolerated: list[str] = []
    stem = dist_info.removesuffix(".dist-info")
    di_name, sep, di_version = stem.rpartition("-")
    if not sep or canonicalize_name(di_name) != name:
        return [
            f"its only .dist-info directory, {dist_info}, belongs to another distribution than the file "
            f"name's {name}: pip refuses it"
        ], []
    try:
        if Version(di_version) != version:
            tolerated.append(
                f"{dist_info} says version {di_version} but the file name says {version}: installers would "
                f"record version {di_version}"
            )
    except InvalidVersion:
        tolerated.append(f"{dist_info}: {di_version!r} is not a valid version")
    refused = _metadata_problems(metadata, f"{dist_info}/METADATA", name, version)
    build_tag = f"{build[0]}{build[1]}" if build else ""
    wheel_refused, wheel_tolerated = _wheel_problems(wheel_text, f"{dist_info}/WHEEL", tags, build_tag)
    return refused + wheel_refused, tolerated + wheel_tolerated


def identity_problems(
    filename: str,
    dist_infos: Sequence[str],
    metadata: str | None,
    wheel_text: str | None,
) -> list[str]:
    """Every disagreement :func:`identity_split` finds, refused or tolerated (empty: one identity)."""
    refused, tolerated = identity_split(filename, dist_infos, metadata, wheel_text)
    return refused + tolerated


def read_identity(wheel: WheelFile) -> tuple[list[str], list[str]]:
    """:func:`identity_split` of an unpacked wheel: (what pip refuses, what pip installs anyway)."""
    dirs = dist_info_dirs([m.name for m in wheel.members])
    wheel_text: str | None = None
    if len(dirs) == 1:
        member = wheel.member(f"{dirs[0]}/WHEEL")
        if member is not None and member.path is not None:
            wheel_text = member.path.read_text(encoding="utf-8", errors="replace")
    metadata = wheel.metadata if wheel.dist_info in dirs else None
    return identity_split(wheel.filename, dirs, metadata, wheel_text)


def check_identity(wheel: WheelFile) -> None:
    """Raise :class:`InputError` (exit 2) naming every disagreement in the wheel's identity that
    pip refuses to install; what pip installs anyway is the hygiene check's to report
    (:func:`read_identity`)."""
    refused, _tolerated = read_identity(wheel)
    if refused:
        raise InputError(f"{wheel.filename}: " + "; ".join(refused))
