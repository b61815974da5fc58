"""The check behind ``python -m release verify --target NAME`` (:mod:`release.commands.verify`): a
target's indexes against the release manifest.

For every variant the manifest names: every file it lists is on the target's index for that
variant, listed once, with its sha256, and downloaded: the bytes the index serves have the
manifest's sha256; the index holds no other file of this release's project and version. Where
wheelwright placed the manifest beside the wheels (the local index, a static index), the index's
copy must be the manifest's bytes. ``--listing-only`` compares the listing alone (fast, nothing
downloaded; an index that serves other bytes than it lists passes it, and the output says so).
Exit 0 when every index agrees, 1 when one does not (each problem named, with its rule), 2 for
bad input, 4 when an index cannot be read.

The manifest: ``--manifest FILE``, else the one ``<dist>/*.release.json`` that publish wrote. Its
signature (``<manifest>.sig``, :mod:`release.publish.signing`) is checked before any of its
digests is trusted: a missing or wrong signature exits 1 (``[rule: signed-manifest]``) unless
``--allow-unsigned``; the trusted key is ``--public-key FILE``, ``$WHEELWRIGHT_SIGNING_PUBLIC_KEY``
or this user's own signing key. ``--rebuild ROW`` rebuilds a row instead of reading an index
(:mod:`release.publish.rebuild`).
A local-server target (the rehearsal index) is verified where it runs (``--index-root``); it is
never started or changed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import Version

from release.core.errors import InputError
from release.policy.targets import IndexTarget, Target, join_url
from release.publish import manifest as mf
from release.publish.guards.deadlines import Deadlines, deadlines_for
from release.publish.guards.plan import (
    LocalWheel,
    file_key,
    plan_publish,
    read_auth,
    resolve_credentials,
    ruled,
)
from release.publish.guards.readback import download_limit, served_problem
from release.publish.index.client import (
    Auth,
    IndexFile,
    Redactor,
    Served,
    by_name,
    download,
    fetch_digest,
    read_listing,
)
from release.publish.index.listing import listing_problems
from release.publish.index.local import LocalIndex


def find_manifest(dist: Path, given: str | None) -> Path:
    """The manifest to verify against: ``given``, else the one ``dist/*.release.json``."""
    if given:
        return Path(given)
    found = sorted(dist.glob(f"*{mf.SUFFIX}"))
    if len(found) == 1:
        return found[0]
    if not found:
        raise InputError(
            f"no release manifest (*{mf.SUFFIX}) in {dist}; publish writes one there, or pass --manifest FILE"
        )
    raise InputError(
        f"{len(found)} release manifests in {dist} ({', '.join(p.name for p in found)}); pass --manifest"
    )


REPLACED = "the file was replaced"


def index_problems(
    manifest: mf.Manifest,
    variant: str,
    remote: Mapping[str, str],
    served: Mapping[str, Served] | None = None,
) -> list[str]:
    """Where the index's files (``filename -> sha256`` listed; ``served``: what downloading a file
    gave, by its name on the index; None: listing only) disagree with the manifest's for
    ``variant`` (pure)."""
    wanted = [
        LocalWheel(Path(f.filename), f.filename, f.sha256, f.row, f.size)
        for f in manifest.for_variant(variant)
    ]
    plan = plan_publish(wanted, remote)
    problems = [
        ruled("read-back", f"{w.filename}: listed by the manifest but not on the index")
        for w in plan.to_upload
    ]
    got = served or {}
    for c in plan.conflicts:
        shown = served_problem(
            c.filename, c.local_sha256, c.remote_sha256, got.get(c.remote_filename), replaced=REPLACED,
            ours="the manifest says",
        )  # fmt: skip
        problems.append(str(shown))
    for w in plan.skip_same if served is not None else ():
        name = next((n for n in remote if file_key(n) == file_key(w.filename)), w.filename)
        shown = served_problem(w.filename, w.sha256, w.sha256, got.get(name), replaced=REPLACED)
        if shown is not None:
            problems.append(shown)
    problems += plan.problems()[len(plan.conflicts) :]  # files of this version the manifest does not list
    return problems


def _copy_on_index(
    manifest: mf.Manifest, index: IndexTarget, local: LocalIndex | None, *, auth: Auth | None, red: Redactor
) -> tuple[str, bytes | None] | None:
    """(where, the index's copy of the manifest or None when missing); None when the index has no place for one."""
    if local is not None:
        url = join_url(local.upload_url(index.variant), "+release") + manifest.name
        chunks: list[bytes] = []
        found = download(url, auth=auth, redactor=red, sink=chunks.append, missing_ok=True)
        return url, b"".join(chunks) if found else None
    folder = mf.folder_on_index(index, None)
    if folder is None:
        return None
    path = folder / manifest.name
    return str(path), (path.read_bytes() if path.is_file() else None)


def _download_all(
    manifest: mf.Manifest, variant: str, files: Mapping[str, IndexFile], *, auth: Auth | None,
    deadlines: Deadlines, red: Redactor,
) -> dict[str, Served]:  # fmt: skip
    """Download every file of the manifest the index lists (under its name there) and hash it."""
    listed = {file_key(n): f for n, f in files.items()}
    out: dict[str, Served] = {}
    for f in manifest.for_variant(variant):
        there = listed.get(file_key(f.filename))
        if there is None:
            continue
        out[there.filename] = fetch_digest(
            there.url, limit=download_limit(f.size), auth=auth,
            timeout=(deadlines.connect_s, deadlines.for_upload(f.size)), redactor=red,
        )  # fmt: skip
    return out


def verify_target(
    manifest: mf.Manifest,
    target: Target,
    *,
    env: Mapping[str, str],
    local: LocalIndex | None,
    listing_only: bool = False,
) -> tuple[list[str], list[str]]:
    """(what agrees, what does not) for every variant of the manifest on ``target``: each name
    listed once, each file of the manifest listed, downloaded (unless ``listing_only``) and its
    bytes' sha256 the manifest's, nothing else of this release's version."""
    good: list[str] = []
    problems: list[str] = []
    releases = {(canonicalize_name(manifest.project), Version(manifest.release).public)}
    for variant in manifest.variants:
        index = target.index_for(variant)
        red = Redactor()
        creds = resolve_credentials(variant, env)
        auth = None if local is not None else read_auth(index, creds)  # the local index reads anonymously
        red.add_auth(auth)
        deadlines = deadlines_for(variant, env)
        listing = read_listing(
            index.simple_url, manifest.project, auth=auth, timeout=deadlines.timeout, redactor=red
        )
        found = listing_problems(
            listing, releases, local_folder=local.folder(variant) if local is not None else None
        )
        files = by_name(listing)
        served = None
        if not listing_only:
            served = _download_all(manifest, variant, files, auth=auth, deadlines=deadlines, red=red)
        found += index_problems(manifest, variant, {n: str(f.sha256) for n, f in files.items()}, served)
        where = f"{variant} ({red(index.simple_url)})"
        copy = _copy_on_index(manifest, index, local, auth=auth, red=red)
        if copy is not None and copy[1] is None:
            found.append(
                ruled(
                    "read-back", f"{manifest.name}: the index does not carry the release manifest ({copy[0]})"
                )
            )
        elif copy is not None and copy[1] != manifest.text().encode():
            found.append(
                ruled("read-back", f"{manifest.name}: the index's copy ({copy[0]}) is not this manifest")
            )
        if found:
            problems += [f"{where}: {p}" for p in found]
        else:
            how = (
                "each listed with its sha256 (listing only: not downloaded)"
                if listing_only
                else "each downloaded, its bytes' sha256 the manifest's"
            )
            good.append(f"{where}: {len(manifest.for_variant(variant))} file(s), {how}, nothing else")
    return good, problems
