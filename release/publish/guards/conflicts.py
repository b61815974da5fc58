"""A different file under a name this release uses: whose it is, and the one right thing to do.

When a connection drops mid-upload, an index that does not check uploads keeps what arrived
under the file's name (pypiserver kept 691 bytes of a wheel). The next run then finds "a
different file under this name". :func:`describe_conflict` downloads that file and tells the
two cases apart:

- it is the first bytes of the audited wheel and shorter: a truncated copy left by an
  interrupted upload, never installable. The one right action depends on the index:
  remove it and rerun where the index lets a removed name be uploaded again (the local index,
  a static folder, pypiserver, devpi), bump the build number where it never does (PyPI);
- it is the audited wheel itself (its sha256 is the staged copy's): the listing is wrong, not
  the file, and the advice says that (:func:`release.publish.guards.readback.served_problem`);
- anything else is another file: removed if it was never released, else a new build number.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from release.core.errors import StepFailed
from release.policy.targets import KNOWN_INDEXES, IndexTarget
from release.publish.guards.plan import Conflict, ruled
from release.publish.guards.readback import served_problem
from release.publish.index.client import Auth, IndexFile, Redactor, Served, download
from release.publish.index.static import FILES_DIR, METADATA_SUFFIX


def removal_action(index: IndexTarget, remote_filename: str, local_folder: Path | None) -> str:
    """The one right action for a corrupt file on ``index`` (pure)."""
    rerun = "then rerun the same command: it uploads the audited file"
    if local_folder is not None:
        return f"remove it (this local index allows that): rm {local_folder / remote_filename}; {rerun}"
    if index.upload_url.startswith("file://"):
        files = Path(url2pathname(urlsplit(index.upload_url).path)) / FILES_DIR
        return (
            f"remove it (a static index is a folder): rm {files / remote_filename} "
            f"{files / (remote_filename + METADATA_SUFFIX)}; {rerun}"
        )
    if index.upload_url in KNOWN_INDEXES:
        return (
            f"bump the build number (or the version): {index.upload_url} never accepts a file name "
            "again, even after its file is deleted; rebuild, audit, smoke-test and publish that"
        )
    return (
        f"remove it through the index, {rerun}; only if the index refuses a removed file name for "
        "good (PyPI does; pypiserver and devpi do not), bump the build number and rebuild instead"
    )


@dataclass(frozen=True)
class RemoteCopy:
    """What the index served under a conflicting name, compared with the staged (audited) bytes."""

    sha256: str
    size: int
    prefix: bool  # every byte served is the staged file's byte at that place

    def truncated(self, staged_size: int) -> bool:
        return self.prefix and self.size < staged_size


def inspect_remote(
    staged: Path, remote: IndexFile, *, auth: Auth | None, timeout: tuple[float, float], redactor: Redactor
) -> RemoteCopy:
    """Download the index's file once: its sha256, its length, and whether it is a prefix of ``staged``."""
    digest = hashlib.sha256()
    state = {"seen": 0, "prefix": True}
    with staged.open("rb") as fh:

        def compare(chunk: bytes) -> None:
            digest.update(chunk)
            if state["prefix"] and fh.read(len(chunk)) != chunk:
                state["prefix"] = False
            state["seen"] += len(chunk)

        download(remote.url, auth=auth, timeout=timeout, redactor=redactor, sink=compare)
    return RemoteCopy(digest.hexdigest(), int(state["seen"]), bool(state["prefix"]))


def describe_conflict(
    conflict: Conflict,
    *,
    staged: Path,
    remote: IndexFile | None,
    index: IndexTarget,
    local_folder: Path | None,
    auth: Auth | None,
    timeout: tuple[float, float],
    redactor: Redactor,
) -> str:
    """What the different file under ``conflict.filename`` is, and what to do about it: a truncated
    copy of this wheel, a listing that lies about a file that is this wheel, or another file."""
    copy: RemoteCopy | None = None
    if remote is not None:
        try:
            copy = inspect_remote(staged, remote, auth=auth, timeout=timeout, redactor=redactor)
        except StepFailed:
            copy = None  # cannot read it: say what is known
    size = staged.stat().st_size
    if copy is not None and copy.sha256 == conflict.local_sha256:
        return str(
            served_problem(
                conflict.filename,
                conflict.local_sha256,
                conflict.remote_sha256,
                Served(copy.sha256, copy.size),
                replaced=conflict.describe(),
            )
        )
    if copy is None or not copy.truncated(size):
        return conflict.describe()
    length = copy.size
    return ruled(
        "one-name-one-file",
        f"{conflict.filename}: the index holds a truncated copy of this wheel under its name: the "
        f"first {length} of its {size} bytes (sha256 {conflict.remote_sha256}), what an "
        "interrupted upload leaves on an index that does not check uploads; it never was an "
        f"installable wheel. The one right action: {removal_action(index, conflict.remote_filename, local_folder)}",
    )
