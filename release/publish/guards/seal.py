"""Sealed bytes: what is uploaded is exactly what was audited again.

Publish copies each wheel into its private staging folder (:mod:`release.publish.staging`),
checks the copy's sha256 against the records, audits the copy again, and hashes it once more
after the audit (:mod:`release.publish.guards.reverify`); then :func:`seal` makes the copy read-only.
A read-only file in a folder of this user is no seal against this user: anyone running as it can
rename other bytes over the path between a hash and the uploader's read. So the uploader never
reads the path: :func:`sealed_upload` opens the staged file once, copies it into a memfd and seals
that (:func:`sealed_copy`: no write, shrink, growth or further seal, by anyone, this process
included), hashes the sealed bytes (a mismatch stops before anything is sent, naming the file), and
hands the uploader that descriptor (twine reads it through ``/proc/<pid>/fd/N``,
:mod:`release.publish.sealed_twine`; a static index copies from it). After the upload it hashes the
staged path again, a second line: a change there means something writes into the run's private
folder; the bytes sent were the sealed ones, but the run stops, naming the file.

:func:`seal_problem` is the pure decision; the rest reads files.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal, TypeVar

from release.core.errors import CheckFailed
from release.core.hashing import sha256_file
from release.publish.guards.plan import ruled

T = TypeVar("T")
When = Literal["after the re-audit", "before its upload", "after its upload"]


def seal_problem(filename: str, audited: str, now: str | None, when: When) -> str | None:
    """Why the staged copy is not the audited bytes ``when`` (its sha256 ``now``, None: gone); None when it is. Pure."""
    if now == audited:
        return None
    seen = "it is gone" if now is None else f"its sha256 is now {now}"
    if when == "after its upload":
        tail = (
            "the uploader read the sealed copy made before (the audited bytes; the read-back "
            "checks the index's copy), but something writes into this run's private staging "
            "folder: find it, then rerun"
        )
    else:
        tail = "nothing of it was uploaded; find what writes into the staging folder, then rerun"
    return ruled(
        "sealed-bytes",
        f"{filename}: the staged copy publish re-audited changed {when} ({seen}, the re-audited bytes "
        f"have {audited}); {tail}",
    )


def current_sha256(path: Path) -> str | None:
    """The file's sha256 now; None when it cannot be read (removed, replaced by a folder)."""
    try:
        return sha256_file(path)
    except OSError:
        return None


def check(path: Path, filename: str, audited: str, when: When) -> None:
    """CheckFailed (rule ``sealed-bytes``) unless ``path`` holds the audited bytes now."""
    problem = seal_problem(filename, audited, current_sha256(path), when)
    if problem is not None:
        raise CheckFailed(problem)


def seal(path: Path) -> None:
    """Make the staged copy read-only (its folder is this run's, mode 0700)."""
    path.chmod(stat.S_IRUSR)


SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
CHUNK = 1 << 20


def sealed_copy(path: Path) -> int:
    """A memfd holding the bytes of ``path`` read through one descriptor (a symlink there is
    refused), sealed: nobody can change it any more. The caller closes it. OSError when the file
    cannot be read."""
    src = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    fd = os.memfd_create(f"wheelwright-sealed:{path.name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        with os.fdopen(src, "rb") as f:
            while chunk := f.read(CHUNK):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(fd, view) :]
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, SEALS)
    except BaseException:
        os.close(fd)
        raise
    return fd


def sha256_fd(fd: int) -> str:
    """The sha256 of everything in ``fd`` (read with pread: its offset is left alone)."""
    h, offset = hashlib.sha256(), 0
    while chunk := os.pread(fd, CHUNK, offset):
        h.update(chunk)
        offset += len(chunk)
    return h.hexdigest()


def sealed_upload(path: Path, filename: str, audited: str, upload: Callable[[int], T]) -> T:
    """``upload(fd)`` of a sealed memfd copy of the staged file (:func:`sealed_copy`), whose bytes
    are hashed once sealed (a mismatch: nothing is sent); the staged path is hashed again after
    the upload (a mismatch: the run stops naming the file). Whatever ``upload`` raises goes
    through; the after-check runs only when it returns."""
    try:
        fd = sealed_copy(path)
    except OSError:  # gone, a folder, a symlink: no regular file to seal
        raise CheckFailed(str(seal_problem(filename, audited, None, "before its upload"))) from None
    try:
        problem = seal_problem(filename, audited, sha256_fd(fd), "before its upload")
        if problem is not None:
            raise CheckFailed(problem)
        result = upload(fd)
    finally:
        os.close(fd)
    check(path, filename, audited, "after its upload")
    return result
