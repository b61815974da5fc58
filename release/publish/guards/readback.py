"""Verified means downloaded: what the index lists, what it serves, and the audited bytes, compared.

A listing's sha256 is the index's word about a file; the file it serves is the fact. After
uploading (for the files this run uploaded) and in ``verify``, publish downloads each file and
compares the bytes' sha256 with the audited one (``verify --listing-only`` keeps the listing's
word, and says so). :func:`served_problem` names what is wrong, and the advice fits the fault it
saw: a listing that lies about a file that is fine is not "remove it or bump the build number".

Pure: the download is :func:`release.publish.index.client.fetch_digest`'s.
"""

from __future__ import annotations

from release.publish.guards.plan import ruled
from release.publish.index.client import Served

AGAIN = "read it back again (rerun the same command, or python -m release verify)"
SLACK = 1 << 20  # bytes read past a file's expected size before a download is called too long


def download_limit(size: int) -> int:
    """How many bytes to read of a file that should have ``size``: a little more, to see a longer one."""
    return size + SLACK


def served_problem(
    filename: str,
    audited: str,
    listed: str,
    served: Served | None,
    *,
    replaced: str,
    ours: str = "the audited bytes have",
) -> str | None:
    """Why the index's copy of ``filename`` is not the audited bytes (sha256 ``audited``), given its
    listing's sha256 (``listed``) and what a download got (``served``; None: not downloaded, the
    listing is taken at its word). ``replaced``: the advice for a file that really is another one.
    None when the index lists and serves the audited bytes."""
    got = None if served is None else served.sha256
    if served is None:
        if listed == audited:
            return None
        return ruled(
            "read-back",
            f"{filename}: on the index with sha256 {listed}, {ours} {audited} (the listing says so; "
            f"not downloaded): {replaced}",
        )
    assert served is not None
    if listed == audited and got == audited:
        return None
    if listed == audited:
        return ruled(
            "read-back",
            f"{filename}: the index lists the audited sha256 {audited}, but the file it serves is other "
            f"bytes ({served.describe()}): the listing is right and the file served is not. pip and uv "
            "check the listed sha256, so installing it fails. Whatever stores or serves it (the index's "
            "storage, a CDN or a proxy in front of it) holds other bytes under this name: restore the "
            f"file there or purge that cache, then {AGAIN}",
        )
    if got == audited:
        return ruled(
            "read-back",
            f"{filename}: the index lists sha256 {listed}, but the file it serves is the audited one "
            f"({audited}): the listing is wrong, not the file. Do not remove the file and do not bump "
            "the build number: have the index rewrite its listing (a stale project page, a page a CDN "
            f"keeps), then {AGAIN}",
        )
    if got == listed:
        return ruled(
            "read-back",
            f"{filename}: on the index with sha256 {listed} (downloaded: the bytes it serves are what it "
            f"lists), {ours} {audited}: {replaced}",
        )
    return ruled(
        "read-back",
        f"{filename}: the index lists sha256 {listed} and serves other bytes again ({served.describe()}); "
        f"neither is the audited {audited}: {replaced}",
    )
