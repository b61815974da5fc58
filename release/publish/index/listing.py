"""One name, one file, in every listing: a project page that lists a file name twice is wrong.

Installers disagree on which entry of a name they take: uv the first, pip the last. So a
listing (PEP 503 HTML or PEP 691 JSON) that names one file more than once is a read-back
failure, whether its entries agree or not: before the first upload, after the uploads and in
``verify``. Names are compared by wheel identity (:func:`release.publish.guards.plan.file_key`: two
spellings of one wheel's name are one file to an index). Only this release's files are judged
(its project and version): earlier versions on the index are left alone.

Pure: the entries come from :func:`release.publish.index.client.read_listing`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.publish.guards.plan import file_key, release_of, ruled
from release.publish.index.client import IndexFile

ORDINALS = ("1st", "2nd", "3rd")


def _nth(i: int) -> str:
    return ORDINALS[i] if i < len(ORDINALS) else f"{i + 1}th"


@dataclass(frozen=True)
class Duplicate:
    """One file name the listing names more than once: its entries, in the listing's order."""

    filename: str
    entries: tuple[IndexFile, ...]

    @property
    def agree(self) -> bool:
        return len({(e.sha256, e.url) for e in self.entries}) == 1

    def describe(self, *, local_folder: Path | None = None) -> str:
        shown = "; ".join(f"{_nth(i)}: sha256 {e.sha256} at {e.url}" for i, e in enumerate(self.entries))
        first, last = self.entries[0], self.entries[-1]
        verdict = (
            "its entries agree"
            if self.agree
            else "its entries disagree"
            + (" (same sha256, other URLs)" if first.sha256 == last.sha256 else "")
        )
        if local_folder is not None:
            fix = (
                f"the local index lists every file under {local_folder}, subfolders included: keep "
                f"{local_folder / self.filename}, remove the other copies (find {local_folder} -name "
                f"'{self.filename}'), then run the same command again"
            )
        else:
            fix = (
                "have the index list the name once (remove the extra copy or entry from the index's "
                "storage, or purge a stale page in front of it), then run the same command again"
            )
        return ruled(
            "read-back",
            f"{self.filename}: the index lists this name {len(self.entries)} times, and {verdict}: "
            f"{shown}. Installers take different entries: uv the first (sha256 {first.sha256}), pip the "
            f"last (sha256 {last.sha256}); an index lists one file under one name. The listing is what "
            f"is wrong: {fix}",
        )


def duplicates(
    files: Sequence[IndexFile], releases: Collection[tuple[str, str]] | None = None
) -> list[Duplicate]:
    """Every file name listed more than once, among the files of ``releases`` ((project, version)
    pairs; None: every file), in the order of their first entry."""
    groups: dict[str, list[IndexFile]] = {}
    for f in files:
        if releases is not None and release_of(f.filename) not in releases:
            continue
        groups.setdefault(file_key(f.filename), []).append(f)
    return [Duplicate(g[0].filename, tuple(g)) for g in groups.values() if len(g) > 1]


def listing_problems(
    files: Sequence[IndexFile],
    releases: Collection[tuple[str, str]] | None = None,
    *,
    local_folder: Path | None = None,
) -> list[str]:
    """The :meth:`Duplicate.describe` of every name listed more than once (pure)."""
    return [d.describe(local_folder=local_folder) for d in duplicates(files, releases)]
