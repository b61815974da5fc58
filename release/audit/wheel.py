"""Open a wheel safely: one streaming pass that extracts and hashes every member.

Each member is decompressed once, in chunks, and each chunk is hashed (sha256, for
the RECORD check) and written to a fresh file under a temporary directory. Nothing
is ever written outside that directory:

* names that are absolute, contain ``..``, a backslash, a drive letter or a NUL are
  refused (zip slip) and reported as issues;
* symlinks and other special files (from the zip's Unix mode bits) are never created;
* a name that appears twice is extracted once; the repeat is an issue;
* files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW``, so nothing existing is
  overwritten and no link is followed;
* a member whose data is corrupt (bad CRC, bad deflate stream, unsupported method)
  is an issue, and its partial file is removed.

A file that is not a zip archive, or a name that is not a wheel file name, is an
:class:`~release.core.errors.InputError` (exit 2). Everything else becomes findings.

Members are extracted by a few threads (zlib and hashlib release the GIL), largest
first, each thread with its own handle on the archive. ``on_extracted`` is called
from those threads as each file is complete, so callers can start work on big
libraries before the rest is out.

The temporary directory is removed on exit, also on errors; set
``WHEELWRIGHT_KEEP_AUDIT_DIR=1`` to keep it for debugging (its path is printed).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import os
import re
import shutil
import stat
import sys
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from release.audit.model import Member, WheelFile, ZipIssue
from release.core.errors import InputError, StepFailed

__all__ = ["KEEP_ENV", "open_wheel", "safe_member_name"]

KEEP_ENV = "WHEELWRIGHT_KEEP_AUDIT_DIR"
CHUNK = 256 * 1024  # below glibc's mmap threshold: buffers are reused, not mapped per read
KEEP_LIMIT = 256 << 20  # header bytes kept in memory; beyond this they are not kept
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx", ".inc", ".cuh")
ELF_MAGIC = b"\x7fELF"
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


def _unix_mode(info: zipfile.ZipInfo) -> int:
    return (info.external_attr >> 16) & 0xFFFF if info.create_system == 3 else 0


def _kind_of_mode(mode: int) -> str:
    fmt = stat.S_IFMT(mode)
    if fmt in (0, stat.S_IFREG):
        return "file"
    if fmt == stat.S_IFDIR:
        return "directory"
    if fmt == stat.S_IFLNK:
        return "symlink"
    return "special"


class _Extractor:
    def __init__(
        self,
        wheel: Path,
        root: Path,
        on_extracted: Callable[[Member], None] | None,
        *,
        write_all: bool = False,
        other_digests: Mapping[str, tuple[str, ...]] | None = None,
    ) -> None:
        self.wheel = wheel
        self.write_all = write_all
        self.other_digests = other_digests or {}
        self._kept_bytes = 0
        self.root = root
        self.root_str = str(root) + os.sep
        self.on_extracted = on_extracted
        self._local = threading.local()
        self._handles: list[zipfile.ZipFile] = []
        self._lock = threading.Lock()
        self._made: set[str] = {str(root)}

    def _zip(self) -> zipfile.ZipFile:
        zf: zipfile.ZipFile | None = getattr(self._local, "zip", None)
        if zf is None:
            zf = zipfile.ZipFile(self.wheel)
            self._local.zip = zf
            with self._lock:
                self._handles.append(zf)
        return zf

    def close(self) -> None:
        for zf in self._handles:
            zf.close()

    def _mkdirs(self, directory: str) -> None:
        if directory in self._made:
            return
        os.makedirs(directory, exist_ok=True)  # noqa: PTH103 - str paths: thousands of members
        with self._lock:
            self._made.add(directory)

    def extract(self, info: zipfile.ZipInfo) -> Member:
        name = info.filename
        target = os.path.normpath(os.path.join(self.root, name))
        if not target.startswith(self.root_str):  # guarded by safe_member_name; never trust one check
            return Member(name, info.file_size, None, None, "file", problem="path escapes the wheel")
        digest = hashlib.sha256()
        others = {algo: hashlib.new(algo) for algo in self.other_digests.get(name, ())}
        size = 0
        is_elf = False
        out: BinaryIO | None = None
        kept: list[bytes] | None = None
        try:
            with self._zip().open(info) as src:
                chunk = src.read(CHUNK)
                is_elf = chunk[:4] == ELF_MAGIC
                if self.write_all or is_elf or _written(name):
                    out = self._create(target)
                elif _kept(name) and self._reserve(info.file_size):
                    kept = []
                while chunk:
                    digest.update(chunk)
                    for h in others.values():
                        h.update(chunk)
                    if out is not None:
                        out.write(chunk)
                    elif kept is not None:
                        kept.append(chunk)
                    size += len(chunk)
                    chunk = src.read(CHUNK)
        except _CannotCreate as exc:
            return Member(name, info.file_size, None, None, "file", problem=f"cannot be extracted: {exc}")
        except (
            zipfile.BadZipFile,
            zlib.error,
            EOFError,
            NotImplementedError,
            OSError,
            ValueError,
            RuntimeError,
        ) as exc:
            if out is not None:
                out.close()
                with contextlib.suppress(OSError):
                    os.unlink(target)  # noqa: PTH108
            reason = str(exc) or type(exc).__name__
            return Member(name, size, None, None, "file", problem=f"corrupt member: {reason}")
        if out is not None:
            out.close()
        member = Member(
            name,
            size,
            digest.digest(),
            Path(target) if out is not None else None,
            "file",
            is_elf=is_elf,
            data=b"".join(kept) if kept is not None else None,
            digests={algo: h.digest() for algo, h in others.items()},
        )
        if self.on_extracted is not None and member.path is not None:
            self.on_extracted(member)
        return member

    def extract_all(self, batch: list[tuple[int, zipfile.ZipInfo]]) -> list[tuple[int, Member]]:
        return [(index, self.extract(info)) for index, info in batch]

    def _create(self, target: str) -> BinaryIO:
        try:
            self._mkdirs(os.path.dirname(target))  # noqa: PTH120
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise _CannotCreate(exc.strerror or str(exc)) from exc
        return os.fdopen(fd, "wb", buffering=0)

    def _reserve(self, size: int) -> bool:
        with self._lock:
            if self._kept_bytes + size > KEEP_LIMIT:
                return False
            self._kept_bytes += size
            return True


class _CannotCreate(Exception):
    pass


def _written(name: str) -> bool:
    """Members a check reads from disk, whatever their content."""
    base = name.rsplit("/", 1)[-1]
    top = name.split("/", 1)[0]
    return ".so" in base or (top.endswith(".dist-info") and "/" in name)


def _kept(name: str) -> bool:
    """C++ headers of an ``include`` directory: kept in memory for the C++ consumer check."""
    return name.endswith(HEADER_SUFFIXES) and "/include/" in f"/{name}"


BATCH_BYTES = 4 << 20  # small members go to the threads in batches of about this many bytes


def _batches(todo: list[tuple[int, zipfile.ZipInfo]]) -> list[list[tuple[int, zipfile.ZipInfo]]]:
    """One task per big member, in order; small members grouped (a future per file costs)."""
    out: list[list[tuple[int, zipfile.ZipInfo]]] = []
    current: list[tuple[int, zipfile.ZipInfo]] = []
    size = 0
    for item in todo:
        if item[1].compress_size >= BATCH_BYTES:
            out.append([item])
            continue
        current.append(item)
        size += item[1].compress_size + 4096
        if size >= BATCH_BYTES:
            out.append(current)
            current, size = [], 0
    if current:
        out.append(current)
    return out


def _likely_elf(name: str) -> bool:
    """Shared libraries and executables by name: extracted first, so their reads start early."""
    base = name.rsplit("/", 1)[-1]
    return ".so" in base or "/bin/" in f"/{name}" or "." not in base


_RECORD_ALGORITHMS = ("sha384", "sha512")


def _record_algorithms(wheel: Path, infos: list[zipfile.ZipInfo]) -> dict[str, tuple[str, ...]]:
    """Members whose RECORD line uses a hash other than sha256, so the pass computes it too."""
    records = [i for i in infos if i.filename.count("/") == 1 and i.filename.endswith(".dist-info/RECORD")]
    out: dict[str, tuple[str, ...]] = {}
    for info in records:
        try:
            with zipfile.ZipFile(wheel) as zf:
                text = zf.read(info).decode("utf-8", errors="replace")
        except (zipfile.BadZipFile, zlib.error, OSError, ValueError, RuntimeError, NotImplementedError):
            continue  # the pass reports the damaged member
        for row in csv.reader(io.StringIO(text)):
            if len(row) == 3 and row[1].partition("=")[0] in _RECORD_ALGORITHMS:
                out[row[0]] = (*out.get(row[0], ()), row[1].partition("=")[0])
    return out


def _threads() -> int:
    return max(2, min(8, os.cpu_count() or 2))


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _dist_info(names: list[str], name: str) -> str | None:
    """The ``.dist-info`` directory of the distribution (the one named after it, if several)."""
    dirs = sorted(
        {n.split("/", 1)[0] for n in names if "/" in n and n.split("/", 1)[0].endswith(".dist-info")}
    )
    own = [d for d in dirs if canonicalize_name(d.removesuffix(".dist-info").rsplit("-", 1)[0]) == name]
    return own[0] if own else (dirs[0] if dirs else None)


@contextlib.contextmanager
def open_wheel(
    path: str | os.PathLike[str],
    *,
    workdir: str | os.PathLike[str] | None = None,
    on_extracted: Callable[[Member], None] | None = None,
    threads: int | None = None,
    write_all: bool = False,
    on_libraries_done: Callable[[Path, Path], None] | None = None,
) -> Iterator[WheelFile]:
    """Read and hash every member of ``path``; yield a :class:`WheelFile`; remove the tree on exit.

    Written to disk: ELF files, files named like shared libraries, the .dist-info files
    (every member with ``write_all``). Kept in memory: C++ headers under ``include/``.
    Everything else is read and hashed only: creating thousands of files nobody reads
    costs more than the whole audit of their bytes (0.3-0.6 ms per file on some disks).

    ``workdir``: where the temporary tree goes (default: the system temp dir).
    ``on_libraries_done(root, wheel)``: called once every member named like a library
    or executable is out (they go first), while the rest is still being read.
    """
    wheel = Path(path)
    if not wheel.is_file():
        raise InputError(f"{wheel}: no such wheel file")
    try:
        name, version, _build, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise InputError(f"{wheel.name}: not a wheel file name: {exc}") from None
    try:
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError) as exc:
        raise InputError(f"{wheel.name}: not a readable zip archive: {exc}") from None
    with archive:
        try:
            infos = archive.infolist()
        except (zipfile.BadZipFile, ValueError) as exc:  # pragma: no cover - infolist is already parsed
            raise InputError(f"{wheel.name}: unreadable zip directory: {exc}") from None

    base = Path(tempfile.mkdtemp(prefix="wheelwright-audit-", dir=workdir))
    keep = os.environ.get(KEEP_ENV) == "1"
    try:
        root = (base / "tree").resolve()
        root.mkdir()
        needed = sum(i.file_size for i in infos)
        free = shutil.disk_usage(base).free
        if needed > free:
            raise StepFailed(
                f"{wheel.name}: extracting needs {needed >> 20} MiB but {base} has {free >> 20} MiB free; "
                "set TMPDIR to a larger disk"
            )

        issues: list[ZipIssue] = []
        members: dict[int, Member] = {}
        seen: set[str] = set()
        todo: list[tuple[int, zipfile.ZipInfo]] = []
        for index, info in enumerate(infos):
            mode = _unix_mode(info)
            kind = "directory" if info.filename.endswith("/") else _kind_of_mode(mode)
            why = safe_member_name(info.filename)
            if why is not None:
                issues.append(
                    ZipIssue("unsafe-path", info.filename, f"{info.filename!r}: {why}; not extracted")
                )
                members[index] = Member(info.filename, info.file_size, None, None, "file", problem=why)
                continue
            if info.filename in seen:
                issues.append(
                    ZipIssue(
                        "duplicate",
                        info.filename,
                        f"{info.filename!r} appears more than once in the archive; "
                        "installers disagree on which copy wins",
                    )
                )
                members[index] = Member(
                    info.filename, info.file_size, None, None, "file", problem="duplicate name"
                )
                continue
            seen.add(info.filename)
            if kind == "symlink":
                issues.append(
                    ZipIssue(
                        "symlink",
                        info.filename,
                        f"{info.filename!r} is a symbolic link; wheels cannot carry links "
                        "(pip writes the link target as a file) and one could point outside site-packages",
                    )
                )
                members[index] = Member(
                    info.filename, info.file_size, None, None, "symlink", problem="symlink"
                )
                continue
            if kind == "special":
                issues.append(
                    ZipIssue(
                        "special-file",
                        info.filename,
                        f"{info.filename!r} is a special file (mode {stat.filemode(mode)}); not extracted",
                    )
                )
                members[index] = Member(
                    info.filename, info.file_size, None, None, "special", problem="special file"
                )
                continue
            if kind == "directory":
                members[index] = Member(info.filename, 0, None, None, "directory")
                continue
            todo.append((index, info))

        extractor = _Extractor(
            wheel, root, on_extracted, write_all=write_all, other_digests=_record_algorithms(wheel, infos)
        )
        todo.sort(key=lambda item: (not _likely_elf(item[1].filename), -item[1].compress_size))
        try:
            with ThreadPoolExecutor(max_workers=threads or _threads(), thread_name_prefix="unzip") as pool:
                batches = _batches(todo)
                futures = [pool.submit(extractor.extract_all, batch) for batch in batches]
                wheel_hash = pool.submit(_hash_file, wheel)  # last: the libraries come out first
                libraries_left = sum(_likely_elf(batch[0][1].filename) for batch in batches)
                for future in futures:
                    for index, member in future.result():
                        members[index] = member
                        if member.problem is not None:
                            corrupt = member.problem.startswith("corrupt")
                            issues.append(
                                ZipIssue(
                                    "corrupt" if corrupt else "conflict",
                                    member.name,
                                    f"{member.name!r}: {member.problem}",
                                )
                            )
                    libraries_left -= 1
                    if libraries_left == 0 and on_libraries_done is not None:
                        on_libraries_done(root, wheel)
                sha256 = wheel_hash.result()
        finally:
            extractor.close()

        ordered = tuple(members[i] for i in range(len(infos)))
        names = [m.name for m in ordered]
        dist_info = _dist_info(names, str(name))
        metadata: str | None = None
        if dist_info is not None:
            meta = next((m for m in ordered if m.name == f"{dist_info}/METADATA"), None)
            if meta is not None and meta.path is not None:
                metadata = meta.path.read_text(encoding="utf-8", errors="replace")
        yield WheelFile(
            path=wheel,
            filename=wheel.name,
            size=wheel.stat().st_size,
            sha256=sha256,
            name=str(name),
            version=str(version),
            local=version.local,
            python_tags=tuple(sorted({t.interpreter for t in tags})),
            platform_tags=tuple(sorted({t.platform for t in tags})),
            root=root,
            members=ordered,
            issues=tuple(issues),
            dist_info=dist_info,
            metadata=metadata,
        )
    finally:
        if keep:
            print(f"{KEEP_ENV}=1: kept the extracted wheel in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
