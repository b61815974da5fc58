"""Sealed bytes: what is uploaded is exactly what was audited again.

Publish copies each wheel into its private staging folder (:mod:`release.publish.staging`),
checks the copy's sha256 against the records, audits the copy again, and hashes it once more
after the audit (:mod:`release.publish.guards.reverify`); then :func:`seal` makes the copy read-only.
Between that and twine's read, nothing is trusted either: :func:`sealed_upload` hashes the
staged file immediately before each upload (a mismatch stops before anything is sent, naming the
file) and immediately after it (a mismatch means the uploader may have read other bytes: the
run stops, naming the file, and the index's copy is what the read-back then judges).

:func:`seal_problem` is the pure decision; the rest reads files.
"""

from __future__ import annotations

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
            "the uploader may have read other bytes: the index's copy of it is not trusted; read "
            "the index back (python -m release verify) and remove that file from the index if it "
            "is not the audited one"
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


def sealed_upload(path: Path, filename: str, audited: str, upload: Callable[[], T]) -> T:
    """``upload()`` of the staged file, hashed immediately before (a mismatch: nothing is sent) and
    immediately after (a mismatch: the run stops naming the file). Whatever ``upload`` raises
    goes through; the after-check runs only when it returns."""
    check(path, filename, audited, "before its upload")
    result = upload()
    check(path, filename, audited, "after its upload")
    return result
