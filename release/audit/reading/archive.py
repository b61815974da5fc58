"""Open a wheel safely: one streaming pass that extracts and hashes every member.

Each member is decompressed once, in chunks, hashed (sha256, for the RECORD check; a big one on a
thread of its own, :mod:`release.audit.reading.sink`) and written to a fresh file in a temporary directory:

* unsafe names (absolute, ``..``, backslash, drive letter, NUL) are refused (zip slip);
* a member's type is decided by its name, as pip and installer decide it (see
  :mod:`release.audit.reading.identity`); links and special files are never created; a member
  whose mode bits and name disagree is bad input;
* a repeated name is extracted once; files are created ``O_EXCL | O_NOFOLLOW``;
* a corrupt member (bad CRC or stream, unsupported method) is an issue, its partial
  file removed.

No zip header is trusted for a limit (:mod:`release.audit.reading.limits`): entries are counted
in the raw directory before it is parsed, overlapping entries are refused, and inflated
bytes are counted as they come, per member and for the wheel. Past a limit, like a file
that is no zip or a name that is no wheel name, the wheel is bad input (InputError,
exit 2). Everything else becomes issues; many of one kind are counted, the first shown.

A few threads extract, libraries first; ``on_extracted`` is called from them as each file is
complete. The tree is removed on exit (``WHEELWRIGHT_KEEP_AUDIT_DIR=1`` keeps it).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import struct
import sys
import tempfile
import threading
import zipfile
import zlib
from collections.abc import Callable, Generator, Iterator, Mapping
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from pathlib import Path
from typing import BinaryIO, Literal

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.audit.model import Member, WheelFile, ZipIssue
from release.audit.reading.buildpaths import scanner_for
from release.audit.reading.entries import aggregate, classify
from release.audit.reading.identity import dist_info_for, read_record, safe_member_name
from release.audit.reading.limits import (
    LIMITS,
    Budget,
    LimitExceeded,
    Limits,
    Stopped,
    central_directory_start,
    check_layout,
)
from release.audit.reading.sink import THREAD_BYTES, Sink
from release.binary.inflate import RAW_METHODS, Crc, member_chunks, zipfile_chunks
from release.core.errors import InputError, StepFailed
from release.core.hashing import EarlyHash, sha256_file, take_early
from release.core.sizes import size

__all__ = ["KEEP_ENV", "open_wheel", "safe_member_name"]

KEEP_ENV = "WHEELWRIGHT_KEEP_AUDIT_DIR"

KEEP_LIMIT = 256 << 20  # header bytes kept in memory; beyond this they are not kept
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx", ".inc", ".cuh")
ELF_MAGIC = b"\x7fELF"


# --------------------------------------------------------------------------- extraction


class _Extractor:
    def __init__(
        self,
        wheel: Path,
        root: Path,
        on_extracted: Callable[[Member], None] | None,
        *,
        budget: Budget,
        limits: Limits,
        write_all: bool = False,
        other_digests: Mapping[str, tuple[str, ...]] | None = None,
        dist_info: str | None = None,
    ) -> None:
        self.wheel = wheel
        self.dist_info = f"{dist_info}/" if dist_info else None
        self.budget = budget
        self.limits = limits
        self.write_all = write_all
        self.other_digests = other_digests or {}
        self._kept_bytes = 0
        self.root = root
        self.root_str = str(root) + os.sep
        self.on_extracted = on_extracted
        self._local = threading.local()
        self._handles: list[zipfile.ZipFile] = []
        self._raws: list[BinaryIO] = []
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
        for f in self._raws:
            f.close()

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
        got = 0
        cap = self.limits.member_cap(name)
        is_elf = False
        out: BinaryIO | None = None
        kept: list[bytes] | None = None
        scanner = scanner_for(name)
        sink: Sink | None = None  # hashes and writes (a big member: on a thread of its own)
        crc = Crc() if info.compress_type in RAW_METHODS else None
        try:
            with contextlib.closing(self._chunks(info)) as src:
                chunk = next(src, b"")
                is_elf = chunk[:4] == ELF_MAGIC
                if self.write_all or is_elf or _written(name, self.dist_info):
                    out = self._create(target)
                elif _kept(name) and self._reserve(info.file_size):
                    kept = []
                hashers = [digest, *others.values(), *((crc,) if crc is not None else ())]
                sink = Sink(hashers, out, threaded=info.file_size >= THREAD_BYTES)
                while chunk:
                    got += len(chunk)
                    self.budget.inflated(len(chunk), name)
                    if cap is not None and got > cap:
                        raise self.budget.refuse(
                            LimitExceeded(f"{self.wheel.name}: {name} inflates past {size(cap)}, its limit")
                        )
                    if out is not None:
                        self.budget.written(len(chunk))
                    sink.feed(chunk)
                    if scanner is not None:
                        scanner.feed(chunk)
                    if kept is not None:
                        kept.append(chunk)
                    chunk = next(src, b"")
                sink.close()
                if crc is not None and crc.value != info.CRC:
                    raise zipfile.BadZipFile(f"Bad CRC-32 for file {name!r}")
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
            _discard(out, target, sink)
            if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
                full = f"{self.wheel.name}: the temporary directory is full; set TMPDIR to a larger disk"
                raise self.budget.refuse(StepFailed(full)) from None
            reason = str(exc) or type(exc).__name__
            return Member(name, got, None, None, "file", problem=f"corrupt member: {reason}")
        except BaseException:
            _discard(out, target, sink)
            raise
        if out is not None:
            out.close()
        member = Member(
            name,
            got,
            digest.digest(),
            Path(target) if out is not None else None,
            "file",
            is_elf=is_elf,
            data=b"".join(kept) if kept is not None else None,
            digests={algo: h.digest() for algo, h in others.items()},
            build_paths=scanner.close() if scanner is not None else (),
        )
        if self.on_extracted is not None and member.path is not None:
            self.on_extracted(member)
        return member

    def _chunks(self, info: zipfile.ZipInfo) -> Generator[bytes, None, None]:
        if info.compress_type in RAW_METHODS:
            return member_chunks(self._raw(), info)
        return zipfile_chunks(self._zip(), info)

    def _raw(self) -> BinaryIO:
        f: BinaryIO | None = getattr(self._local, "raw", None)
        if f is None:
            f = self.wheel.open("rb", buffering=0)
            self._local.raw = f
            with self._lock:
                self._raws.append(f)
        return f

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


def _discard(out: BinaryIO | None, target: str, sink: Sink | None = None) -> None:
    if sink is not None:
        sink.close(check=False)  # its thread writes no more before the file goes
    if out is not None:
        out.close()
        with contextlib.suppress(OSError):
            os.unlink(target)  # noqa: PTH108


def _written(name: str, dist_info: str | None) -> bool:
    """Members a check reads from disk: named like a library or device code file, or in our .dist-info."""
    base = name.rsplit("/", 1)[-1]
    return ".so" in base or base.endswith((".cubin", ".fatbin", ".ptx")) or name.startswith(dist_info or "\0")


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


def _threads() -> int:
    return max(2, min(8, os.cpu_count() or 2))


def _run(
    extractor: _Extractor,
    todo: list[tuple[int, zipfile.ZipInfo]],
    threads: int,
    libraries_done: Callable[[], object],
    others_done: Callable[[list[Member], frozenset[str]], object] | None = None,
    early: tuple[EarlyHash, os.stat_result] | None = None,
) -> tuple[list[tuple[int, Member]], str]:
    """Extract ``todo`` on ``threads`` threads; ``libraries_done()`` once the likely ELF files are out;
    ``others_done(members out, names still being read)`` once every other member is out.
    The wheel's sha256 is hashed beside them, unless ``early`` (a hash started before, and the
    wheel's stat when it was opened) gives it. The first refusal stops every thread (at its next
    chunk) and is raised."""
    done: list[tuple[int, Member]] = []
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="unzip") as pool:
        try:
            batches = _batches(todo)
            futures = [pool.submit(extractor.extract_all, batch) for batch in batches]
            wheel_hash = None if early else pool.submit(sha256_file, extractor.wheel)  # last: libraries first
            names = {f: [i.filename for _, i in b] for f, b in zip(futures, batches, strict=True)}
            libs = [f for f in futures if _likely_elf(names[f][0])]
            others = [f for f in futures if not all(_likely_elf(n) for n in names[f])]
            pending = set(futures)
            fired = [not libs, others_done is None or not others]
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in finished:
                    done += future.result()
                if not fired[0] and all(f.done() for f in libs):
                    fired[0] = True
                    libraries_done()
                if not fired[1] and others_done is not None and all(f.done() for f in others):
                    fired[1] = True
                    still = frozenset(n for f in futures if not f.done() for n in names[f])
                    others_done([m for _, m in done], still)
            sha256 = wheel_hash.result() if wheel_hash else (early and early[0].result(early[1]))
            sha256 = sha256 or sha256_file(extractor.wheel)  # the early hash was of another file
        except BaseException:
            extractor.budget.halt()  # every thread stops at its next chunk
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    return done, sha256


@contextlib.contextmanager
def open_wheel(
    path: str | os.PathLike[str],
    *,
    workdir: str | os.PathLike[str] | None = None,
    on_extracted: Callable[[Member], None] | None = None,
    threads: int | None = None,
    write_all: bool = False,
    on_libraries_done: Callable[[Path, Path], None] | None = None,
    on_others_done: Callable[[list[Member], frozenset[str]], object] | None = None,
    limits: Limits = LIMITS,
) -> Iterator[WheelFile]:
    """Read and hash every member of ``path``; yield a :class:`WheelFile`; remove the tree on exit.

    Written to disk: ELF files, files named like shared libraries, the wheel's .dist-info files
    (every member with ``write_all``). Kept in memory: C++ headers under ``include/``.
    Everything else is read and hashed only: creating thousands of files nobody reads
    costs more than the whole audit of their bytes (0.3-0.6 ms per file on some disks).

    ``workdir``: where the temporary tree goes (default: the system temp dir).
    ``on_libraries_done(root, wheel)``: called once every member named like a library
    or executable is out (they go first), while the rest is still being read.
    ``on_others_done(members, pending)``: called once every other member is out (the C++ headers,
    say), with the members out so far and the names of those still being read.
    ``limits``: what the wheel may make the audit read (bad input, exit 2, past any).
    """
    wheel = Path(path)
    if not wheel.is_file():
        raise InputError(f"{wheel}: no such wheel file")
    try:
        name, version, _build, tags = parse_wheel_filename(wheel.name)
    except InvalidWheelFilename as exc:
        raise InputError(f"{wheel.name}: not a wheel file name: {exc}") from None
    try:
        with wheel.open("rb") as f:
            cd_start = central_directory_start(f, wheel.stat().st_size, limits, wheel.name)
        archive = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, struct.error) as exc:
        raise InputError(f"{wheel.name}: not a readable zip archive: {exc}") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > limits.members:
            raise LimitExceeded(
                f"{wheel.name}: has {len(infos):,} members, over the limit of {limits.members:,}"
            )
        with wheel.open("rb") as f:
            check_layout(f, infos, cd_start, wheel.name, limits)
        issues, members, todo = classify(infos, wheel.name)
        dist_info = dist_info_for([i.filename for i in infos], str(name))
        record = next((i for _, i in todo if i.filename == f"{dist_info}/RECORD"), None)
        other_digests = read_record(archive, record, wheel.name, limits)

    base = Path(tempfile.mkdtemp(prefix="wheelwright-audit-", dir=workdir))
    keep = os.environ.get(KEEP_ENV) == "1"
    try:
        root = (base / "tree").resolve()
        root.mkdir()
        room = shutil.disk_usage(base).free - limits.disk_reserve_bytes
        budget = Budget(wheel.name, wheel.stat().st_size, room, limits)
        extractor = _Extractor(
            wheel,
            root,
            on_extracted,
            budget=budget,
            limits=limits,
            write_all=write_all,
            other_digests=other_digests,
            dist_info=dist_info,
        )
        todo.sort(key=lambda item: (not _likely_elf(item[1].filename), -item[1].compress_size))
        started = take_early(wheel)  # release.core.hashing.hash_early: the audit command starts it
        try:
            done, sha256 = _run(
                extractor,
                todo,
                threads or _threads(),
                lambda: on_libraries_done and on_libraries_done(root, wheel),
                on_others_done,
                (started, wheel.stat()) if started else None,
            )
        except Stopped:
            raise budget.error or StepFailed(f"{wheel.name}: extraction stopped") from None
        finally:
            extractor.close()
        for index, member in done:
            members[index] = member
            if member.problem is not None:
                kind: Literal["corrupt", "conflict"] = (
                    "corrupt" if member.problem.startswith("corrupt") else "conflict"
                )
                issues.append(ZipIssue(kind, member.name, f"{member.name!r}: {member.problem}"))

        ordered = tuple(members[i] for i in range(len(infos)))
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
            issues=tuple(aggregate(issues)),
            dist_info=dist_info,
            metadata=metadata,
        )
    finally:
        if keep:
            print(f"{KEEP_ENV}=1: kept the extracted wheel in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
