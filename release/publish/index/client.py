"""Read what a package index holds, through its simple API, and keep secrets out of messages.

- :func:`read_project` asks for PEP 691 JSON (``application/vnd.pypi.simple.v1+json``)
  and falls back to PEP 503 HTML when the server only speaks HTML (pypiserver 2.4
  does). ``file://`` roots (a static index written by :mod:`release.publish.index.static`)
  are read from disk: ``<project>/index.json``, else ``<project>/index.html``.
- :func:`remote_hashes` turns that into ``filename -> sha256``, the one view
  publishing needs. A file listed without a sha256 is downloaded and hashed.
  :func:`download` fetches one file's bytes (to tell a truncated upload from another file).
- Every request has one deadline for its whole life (``timeout=(connect, whole request)``),
  not a per-read timeout, and follows redirects within one origin only:
  :mod:`release.publish.index.request` over :mod:`release.publish.index.transport`.
- :func:`resolve_simple_url` turns the index name ``pypi`` into pip's default index
  (:mod:`release.publish.index.pip_default`).
- :class:`Redactor` and :func:`redact_url` remove credentials (passwords, tokens,
  URL userinfo) from every line a person or a log will see.

Every failure is a :class:`~release.core.errors.StepFailed` whose message names the
index (credentials removed) and what to do; no credential ever reaches it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import TypedDict, Unpack
from urllib.parse import quote, quote_plus, unquote, urljoin, urlsplit, urlunsplit
from urllib.request import url2pathname

from packaging.utils import (
    canonicalize_name,
)

from release.core.errors import InputError, StepFailed
from release.policy.targets import DEFAULT_INDEX, KNOWN_INDEXES, is_index_name, join_url
from release.publish.index import request
from release.publish.index.pip_default import pip_default_index

JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_CONTENT_TYPE = "application/vnd.pypi.simple.v1+html"
ACCEPT = f"{JSON_CONTENT_TYPE}, {HTML_CONTENT_TYPE};q=0.2, text/html;q=0.01"
DEFAULT_TIMEOUT: tuple[float, float] = (10.0, 60.0)  # (connect, whole request) seconds
REDACTED = "***"

Auth = tuple[str, str]

# ---------------------------------------------------------------------------
# Redaction

_USERINFO_RE = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<userinfo>[^/@\s'\"<>]+)@")


def redact_url(text: str) -> str:
    """Replace the ``user:password@`` part of every URL in ``text`` by ``***@``."""
    return _USERINFO_RE.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)


def split_userinfo(url: str) -> tuple[str, Auth | None]:
    """``https://u:p@host/x`` -> (``https://host/x``, (u, p)); URLs without userinfo unchanged."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    netloc = parts.hostname or ""
    if ":" in netloc:  # IPv6 literal
        netloc = f"[{netloc}]"
    if parts.port is not None:
        netloc = f"{netloc}:{parts.port}"
    clean = urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
    return clean, (unquote(parts.username or ""), unquote(parts.password or ""))


@dataclass
class Redactor:
    """Remove known secrets (and their URL-quoted and basic-auth forms) from text.

    Calling the redactor on any text returns it with every secret replaced by
    ``***`` and every URL userinfo removed. Usernames are redacted too: a
    masked path in a log is a small price; a leaked token is not.
    """

    secrets: set[str] = field(default_factory=set)

    def add(self, *secrets: str | None) -> None:
        for secret in secrets:
            if not secret:
                continue
            self.secrets.update({secret, quote(secret, safe=""), quote_plus(secret)})

    def add_auth(self, auth: Auth | None) -> None:
        if auth is None:
            return
        user, password = auth
        self.add(user, password)
        if password:
            self.add(base64.b64encode(f"{user}:{password}".encode()).decode())

    def __call__(self, text: str) -> str:
        out = redact_url(text)
        for secret in sorted(self.secrets, key=len, reverse=True):
            out = out.replace(secret, REDACTED)
        return out


# ---------------------------------------------------------------------------
# Reading an index


@dataclass(frozen=True)
class IndexFile:
    """One file a project page lists."""

    filename: str
    url: str  # absolute
    sha256: str | None  # lower-case hex, when the index gives it


def resolve_simple_url(simple_url: str) -> str:
    """A simple-API root: a URL as given, or ``pypi`` (:data:`~release.policy.targets.DEFAULT_INDEX`),
    pip's default index as pip documents it, so that no registry host name is written in rows.toml
    or in wheelwright. Another known name (``testpypi``) is an upload repository twine knows; pip
    documents no simple URL for it, so its ``simple_url`` must be written as a URL."""
    if not is_index_name(simple_url):
        return simple_url
    if simple_url == DEFAULT_INDEX:
        return pip_default_index()
    if simple_url in KNOWN_INDEXES:
        raise InputError(
            f"simple_url {simple_url!r}: pip documents the URL of its default index ({DEFAULT_INDEX!r}) "
            f"only; write the simple URL of {simple_url!r} instead of its name"
        )
    raise InputError(
        f"{simple_url!r} is neither a URL nor a known index name ({', '.join(KNOWN_INDEXES)}); "
        "write the index's simple URL"
    )


def project_url(simple_url: str, project: str) -> str:
    """The PEP 503 project page: ``<simple root>/<normalized name>/``, joined as a URL."""
    return join_url(simple_url, canonicalize_name(project))


class _LinkParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.base: str | None = None
        self.links: list[tuple[str, str]] = []  # (href, text)
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "base" and attributes.get("href") and self.base is None:
            self.base = attributes["href"]
        elif tag == "a" and attributes.get("href"):
            self._href = attributes["href"]
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _sha256_from_fragment(url: str) -> str | None:
    fragment = urlsplit(url).fragment
    if "=" not in fragment:
        return None
    algo, _, value = fragment.partition("=")
    if algo.lower() == "sha256" and re.fullmatch(r"[0-9a-fA-F]{64}", value):
        return value.lower()
    return None


def parse_html_project(text: str, page_url: str) -> tuple[IndexFile, ...]:
    """Files on a PEP 503 project page. ``page_url`` resolves relative links."""
    parser = _LinkParser()
    parser.feed(text)
    parser.close()
    base = urljoin(page_url, parser.base) if parser.base else page_url
    files: list[IndexFile] = []
    for href, anchor in parser.links:
        url = urljoin(base, href)
        name = anchor or unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        files.append(IndexFile(name, url.split("#", 1)[0], _sha256_from_fragment(url)))
    return tuple(files)


def parse_json_project(data: object, page_url: str, *, where: str) -> tuple[IndexFile, ...]:
    """Files in a PEP 691 project response (api-version 1.x)."""
    if not isinstance(data, dict):
        raise StepFailed(f"{where}: the JSON answer is not an object")
    meta = data.get("meta")
    version = meta.get("api-version") if isinstance(meta, dict) else None
    if not isinstance(version, str) or not version.startswith("1."):
        raise StepFailed(f"{where}: unsupported simple API version {version!r}; wheelwright reads 1.x")
    raw_files = data.get("files")
    if not isinstance(raw_files, list):
        raise StepFailed(f"{where}: the JSON answer has no 'files' list")
    files: list[IndexFile] = []
    for i, item in enumerate(raw_files):
        if not isinstance(item, dict):
            raise StepFailed(f"{where}: files[{i}] is not an object")
        filename, url, hashes = item.get("filename"), item.get("url"), item.get("hashes", {})
        if not isinstance(filename, str) or not isinstance(url, str) or not isinstance(hashes, dict):
            raise StepFailed(f"{where}: files[{i}] lacks a filename, url or hashes")
        sha = hashes.get("sha256")
        files.append(
            IndexFile(filename, urljoin(page_url, url), sha.lower() if isinstance(sha, str) else None)
        )
    return tuple(files)


def _read_file_project(page_url: str) -> tuple[IndexFile, ...]:
    folder = Path(url2pathname(urlsplit(page_url).path))
    json_page, html_page = folder / "index.json", folder / "index.html"
    try:
        if json_page.is_file():
            data = json.loads(json_page.read_text(encoding="utf-8"))
            return parse_json_project(data, page_url, where=str(json_page))
        if html_page.is_file():
            return parse_html_project(html_page.read_text(encoding="utf-8"), page_url)
    except (OSError, ValueError) as exc:
        raise StepFailed(f"{folder}: cannot read the static index page: {exc}") from None
    return ()


class Access(TypedDict, total=False):
    """How a call reaches an index: ``auth`` (else the URL's own credentials), ``timeout``
    ((connect, whole request) seconds, :data:`DEFAULT_TIMEOUT`), ``redactor`` (what to hide in
    messages)."""

    auth: Auth | None
    timeout: tuple[float, float]
    redactor: Redactor | None


def _reach(
    simple_url: str, auth: Auth | None, redactor: Redactor | None
) -> tuple[str, Auth | None, Redactor]:
    """The simple URL resolved (an index name too) without its credentials, the auth to use
    (the given one, else the URL's), and a redactor that hides the URL's credentials."""
    red = redactor or Redactor()
    clean, url_auth = split_userinfo(resolve_simple_url(simple_url))
    red.add_auth(url_auth)
    return clean, auth or url_auth, red


def read_project(
    simple_url: str,
    project: str,
    *,
    auth: Auth | None = None,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    redactor: Redactor | None = None,
) -> tuple[IndexFile, ...]:
    """Every file the index lists for ``project``; () when the project does not exist there.
    ``timeout``: (connect, whole request) seconds."""
    clean, auth, red = _reach(simple_url, auth, redactor)
    page = project_url(clean, project)
    if urlsplit(page).scheme == "file":
        return _read_file_project(page)
    response = request.get(page, auth=auth, timeout=timeout, accept=ACCEPT, redactor=red)
    if response.status == 404:
        return ()
    if response.status in (401, 403):
        raise StepFailed(
            f"{red(page)}: the index refused to list {project!r} (HTTP {response.status}); it needs "
            "read credentials: set them in the environment (see docs/publishing.md)"
        )
    if response.status >= 400:
        raise StepFailed(
            f"{red(page)}: the index answered HTTP {response.status} {red(response.reason or '')} "
            f"while listing {project!r}"
        )
    final = response.url or page
    if response.content_type == JSON_CONTENT_TYPE:
        try:
            data = json.loads(response.body)
        except ValueError:
            raise StepFailed(f"{red(page)}: the index sent invalid JSON") from None
        return parse_json_project(data, final, where=red(page))
    if response.content_type in (HTML_CONTENT_TYPE, "text/html", ""):
        return parse_html_project(response.text(), final)
    raise StepFailed(
        f"{red(page)}: unexpected content type {response.content_type!r}; "
        "is this a simple index root (it usually ends in /simple/)?"
    )


def download(
    url: str,
    *,
    auth: Auth | None = None,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    redactor: Redactor | None = None,
    sink: Callable[[bytes], None],
    missing_ok: bool = False,
) -> bool:
    """Feed one file's bytes to ``sink`` (``file://`` read from disk), within one deadline.
    False when the file does not exist and ``missing_ok``; StepFailed otherwise."""
    red = redactor or Redactor()
    if urlsplit(url).scheme == "file":
        path = Path(url2pathname(urlsplit(url).path))
        if missing_ok and not path.exists():
            return False
        try:
            with path.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    sink(chunk)
        except OSError as exc:
            raise StepFailed(f"{url}: cannot read: {exc.strerror}") from None
        return True
    chunks: list[bytes] = []
    response = request.get(
        url, auth=auth, timeout=timeout, accept="*/*", redactor=red, sink=chunks.append, restart=chunks.clear
    )
    if response.status == 404 and missing_ok:
        return False
    if response.status != 200:
        raise StepFailed(f"{red(url)}: download failed with HTTP {response.status}")
    for chunk in chunks:
        sink(chunk)
    return True


@dataclass(frozen=True)
class Served:
    """What an index served for one file's URL: the bytes' sha256 and length; ``sha256`` None when
    more bytes came than the file can have (reading stopped there)."""

    sha256: str | None
    size: int

    def describe(self) -> str:
        if self.sha256 is None:
            return f"more than {self.size - 1} bytes"
        return f"sha256 {self.sha256}, {self.size} bytes"


class _TooLong(Exception):
    """More bytes came than the caller's limit: the download stops there."""


class _Digest:
    """A download's running sha256 and length, reset when a redirect starts it again."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.restart()

    def restart(self) -> None:
        self.hash = hashlib.sha256()
        self.seen = 0

    def update(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        if self.seen > self.limit:
            raise _TooLong
        self.hash.update(chunk)


def fetch_digest(url: str, *, limit: int, **access: Unpack[Access]) -> Served:
    """Download ``url`` (streamed, never held whole) and hash it; at most ``limit`` bytes are read
    (one more says there were more). StepFailed when it cannot be downloaded."""
    red = access.get("redactor") or Redactor()
    timeout = access.get("timeout", DEFAULT_TIMEOUT)
    digest = _Digest(limit)
    try:
        if urlsplit(url).scheme == "file":
            download(url, sink=digest.update, redactor=red)
            return Served(digest.hash.hexdigest(), digest.seen)
        response = request.get(
            url, auth=access.get("auth"), timeout=timeout, accept="*/*", redactor=red, sink=digest.update,
            restart=digest.restart, max_body=limit + 1,
        )  # fmt: skip
    except _TooLong:
        return Served(None, limit + 1)
    if response.status != 200:
        raise StepFailed(f"{red(url)}: download failed with HTTP {response.status}")
    return Served(digest.hash.hexdigest(), digest.seen)


def read_listing(simple_url: str, project: str, **access: Unpack[Access]) -> tuple[IndexFile, ...]:
    """Every entry the index lists for ``project``, in its order, duplicates kept
    (:mod:`release.publish.index.listing` judges them); an entry without a sha256 is downloaded and hashed."""
    clean, auth, red = _reach(simple_url, access.get("auth"), access.get("redactor"))
    timeout = access.get("timeout", DEFAULT_TIMEOUT)
    out: list[IndexFile] = []
    for f in read_project(clean, project, auth=auth, timeout=timeout, redactor=red):
        if f.sha256 is None:
            digest = hashlib.sha256()
            download(f.url, auth=auth, timeout=timeout, redactor=red, sink=digest.update)
            f = IndexFile(f.filename, f.url, digest.hexdigest())
        out.append(f)
    return tuple(out)


def by_name(files: Iterable[IndexFile]) -> dict[str, IndexFile]:
    """``filename -> IndexFile``; of a name listed twice, the last entry (what pip takes). Judge
    duplicates first (:mod:`release.publish.index.listing`): this view hides them."""
    return {f.filename: f for f in files}


def remote_files(simple_url: str, project: str, **access: Unpack[Access]) -> dict[str, IndexFile]:
    """``filename -> IndexFile`` of every file the index holds for ``project`` (:func:`by_name` of
    :func:`read_listing`: a name listed twice shows its last entry)."""
    return by_name(read_listing(simple_url, project, **access))


def remote_hashes(simple_url: str, project: str, **access: Unpack[Access]) -> dict[str, str]:
    """``filename -> sha256`` of every file the index holds for ``project`` (:func:`remote_files`,
    with the same ``auth``, ``timeout`` and ``redactor``)."""
    files = remote_files(simple_url, project, **access)
    return {name: str(f.sha256) for name, f in files.items()}


Fetch = Callable[[str, str], Iterable[str]]
