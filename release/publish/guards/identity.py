"""Indexes are identities, not strings: two variants must never publish to one index.

rows.toml's loader refuses two variants whose URLs name one index once spelled alike
(:func:`release.policy.targets.index_identity`: case, loopback names and addresses, default
ports, '/' and dot segments). What a string cannot show, publish checks by what an index *is*:

- :func:`shared_storage_problems`: where wheelwright knows an index's storage (the local
  server's ``packages/<variant>/``, a ``file://`` static index's folder), two variants whose
  folders are one folder (a symlink, a path the server maps to the same place) or one inside the
  other are refused before anything is uploaded.
- :func:`other_variant_files`: a variant's index that lists a file of this release whose local
  version label names another variant of the release (``+cu130`` on the cu132 index) is another
  variant's index, or holds its files (:func:`unexpected_problems` says so for the plan's files
  that are not audited for this index). Checked when the index is first read, and again
  (:func:`recheck_before_upload`) just before the variant's first upload, after the variants
  before it were published: an alias that slipped past every string check is caught there,
  before anything of this variant is written, naming the file and both variants.

Pure functions, but for :func:`recheck_before_upload`, which reads the index through the
callable it is given.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from release import records
from release.core.errors import CheckFailed, InputError, StepFailed
from release.policy.targets import IndexTarget
from release.publish.guards.plan import LocalWheel, PublishPlan, plan_publish, release_of, ruled
from release.publish.index.client import IndexFile, by_name


def storage_of(index: IndexTarget, local_folder: Path | None) -> Path | None:
    """Where an index keeps its files, when wheelwright knows: the local server's folder for the
    variant, or a ``file://`` upload URL's folder; None for any other index."""
    if local_folder is not None:
        return local_folder
    if index.upload_url.startswith("file://"):
        return Path(url2pathname(urlsplit(index.upload_url).path))
    return None


def shared_storage_problems(storages: Mapping[str, Path | None]) -> list[str]:
    """Two variants whose index storage is one folder, or one inside the other (a server that
    lists subfolders lists the other's files), resolved through symlinks."""
    resolved = {v: Path(os.path.realpath(p)) for v, p in sorted(storages.items()) if p is not None}
    problems: list[str] = []
    names = list(resolved)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pa, pb = resolved[a], resolved[b]
            if pa == pb or pa.is_relative_to(pb) or pb.is_relative_to(pa):
                how = (
                    "is the same folder as" if pa == pb else "is inside" if pa.is_relative_to(pb) else "holds"
                )
                problems.append(
                    ruled(
                        "one-index",
                        f"the {a} index keeps its files in {storages[a]} ({pa}), which {how} the {b} index's "
                        f"{storages[b]} ({pb}): {a} and {b} would publish to one index; give each variant a "
                        "folder of its own (remove the symlink or the mapping), then rerun",
                    )
                )
    return problems


def other_variant_files(
    names: Iterable[str],
    releases: Collection[tuple[str, str]],
    *,
    variant: str,
    variants: Collection[str],
    where: str,
) -> list[str]:
    """Files of this release (project and public version in ``releases``) on ``variant``'s index
    (``where``) whose local version label names another of the release's ``variants``."""
    problems: list[str] = []
    for name in sorted(set(names)):
        if release_of(name) not in releases:
            continue
        try:
            other = records.wheel_variant(name)
        except InputError:
            continue  # an sdist: no variant (the release-set rule judges it)
        if other == variant or other not in variants:
            continue
        problems.append(
            ruled(
                "one-index",
                f"{name}: a {other} file of this release is on the {variant} index ({where}): the {variant} "
                f"and {other} indexes are one index under two names, or {other}'s wheels were uploaded "
                f"here. Give {variant} an index of its own in rows.toml (one that is not {other}'s), then "
                f"remove {name} from this index unless it is {other}'s index",
            )
        )
    return problems


def unexpected_problems(
    unexpected: Sequence[str],
    *,
    variant: str,
    variants: Collection[str],
    where: str,
    local_folder: Path | None = None,
) -> list[str]:
    """The problems of the plan's unexpected files (of this release's version, not audited for
    this index): another variant's file says ``one-index``, naming both variants; any other says
    ``release-set``, with the index's URL (``where``) and, on a local index, the file's path
    (``local_folder``)."""
    releases = {r for name in unexpected if (r := release_of(name)) is not None}
    foreign = other_variant_files(unexpected, releases, variant=variant, variants=variants, where=where)
    named = {p.split(": ", 1)[0] for p in foreign}
    rest = [name for name in unexpected if name not in named]
    return foreign + PublishPlan((), (), (), tuple(rest)).problems(where=where, local_folder=local_folder)


def recheck_before_upload(
    listing: Callable[[], Sequence[IndexFile]],
    local: Sequence[LocalWheel],
    *,
    variant: str,
    variants: Collection[str],
    where: str,
) -> None:
    """Read ``variant``'s index again just before its first upload; CheckFailed when it now holds
    another variant's file of this release, or anything else of this release the plan did not
    expect (another file under one of its names, a file not in the audited set). Nothing of
    ``variant`` has been uploaded when this raises."""
    try:
        files = listing()
    except StepFailed as exc:
        raise StepFailed(
            f"reading {where} again before its first upload failed: {exc}\nnothing of {variant} was "
            "uploaded; rerun when the index answers"
        ) from None
    now = plan_publish(local, {n: str(f.sha256) for n, f in by_name(files).items()})
    problems = [c.describe() for c in now.conflicts]
    problems += unexpected_problems(now.unexpected, variant=variant, variants=variants, where=where)
    if problems:
        raise CheckFailed(
            f"refusing to upload to {where}: read again just before its first upload, the index holds "
            "what it did not when the release was planned:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + f"\nnothing of {variant} was uploaded"
        )
