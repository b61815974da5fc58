"""What publish hands from its checks to its uploads: :class:`PreparedPublish` and the index reader it holds.

Made by :func:`release.publish.upload.prepare_publish`, used by :func:`release.publish.upload.execute_publish`
and :func:`release.publish.twine_upload.upload_one`. It lives below both so neither imports the other.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from release.policy.targets import IndexTarget, Target
from release.publish.guards.deadlines import Deadlines
from release.publish.guards.plan import Credentials, LocalWheel, PublishPlan
from release.publish.guards.readback import download_limit
from release.publish.guards.reverify import Reaudited
from release.publish.index.client import (
    Auth,
    IndexFile,
    Redactor,
    Served,
    by_name,
    fetch_digest,
    read_listing,
)

__all__ = ["IndexReader", "PreparedPublish"]


@dataclass
class IndexReader:
    """Reads one index's view of this release's projects, each request under its deadline."""

    index: IndexTarget
    projects: tuple[str, ...]
    auth: Auth | None
    redactor: Redactor
    timeout: tuple[float, float]  # (connect, whole request)

    def listing(self) -> tuple[IndexFile, ...]:
        """Every entry of every project page, in the index's order, duplicates kept."""
        out: list[IndexFile] = []
        for project in self.projects:
            out += read_listing(
                self.index.simple_url, project, auth=self.auth, timeout=self.timeout, redactor=self.redactor
            )
        return tuple(out)

    def files(self) -> dict[str, IndexFile]:
        return by_name(self.listing())

    def read(self) -> dict[str, str]:
        return {name: str(f.sha256) for name, f in self.files().items()}

    def served(self, f: IndexFile, size: int, deadlines: Deadlines) -> Served:
        """Download the file the listing names (deadline: an upload's, for its size) and hash it."""
        return fetch_digest(
            f.url,
            limit=download_limit(size),
            auth=self.auth,
            timeout=(deadlines.connect_s, deadlines.for_upload(size)),
            redactor=self.redactor,
        )


@dataclass
class PreparedPublish:
    """Everything checked, every wheel staged and audited again, the index read and the plan
    made; nothing uploaded yet. Made by :func:`prepare_publish`, run by :func:`execute_publish`
    inside the same session (the staged copies live in its folder). Holds credentials: repr shows none.
    """

    target: Target
    variant: str
    index: IndexTarget
    local: tuple[LocalWheel, ...]  # path: the staged, re-audited copy
    verified: tuple[Reaudited, ...]
    plan: PublishPlan
    deadlines: Deadlines
    local_folder: Path | None  # where a local index keeps this variant's files (removal advice)
    creds: Credentials | None = field(repr=False)
    environ: Mapping[str, str] = field(repr=False)
    redactor: Redactor = field(repr=False)
    remote: IndexReader = field(repr=False)

    @property
    def where(self) -> str:
        return f"{self.target.name!r} ({self.variant}, {self.redactor(self.index.simple_url)})"
