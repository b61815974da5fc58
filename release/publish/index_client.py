"""Read what a package index holds, through its simple API, and keep secrets out of messages.

- :func:`read_project` asks for PEP 691 JSON (``application/vnd.pypi.simple.v1+json``)
  and falls back to PEP 503 HTML when the server only speaks HTML (pypiserver 2.4
  does). ``file://`` roots (a static index written by :mod:`release.publish.static_index`)
  are read from disk: ``<project>/index.json``, else ``<project>/index.html``.
- :func:`remote_hashes` turns that into ``filename -> sha256``, the one view
  publishing needs. A file listed without a sha256 is downloaded and hashed.
- :class:`Redactor` and :func:`redact_url` remove credentials (passwords, tokens,
  URL userinfo) from every line a person or a log will see.
- :func:`check_channels`: before a build, ask each dependency channel whether it
  publishes anything for the row's CPU arch.

Every failure is a :class:`~release.core.errors.StepFailed` whose message names the
index (credentials removed) and what to do; no credential ever reaches it.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote, quote_plus, unquote, urljoin, urlsplit, urlunsplit
from urllib.request import url2pathname

import requests
from packaging.utils import (
    canonicalize_name,
)

from release.core.errors import InputError, StepFailed, ToolError

JSON_CONTENT_TYPE = "application/vnd.pypi.simple.v1+json"
HTML_CONTENT_TYPE = "application/vnd.pypi.simple.v1+html"
ACCEPT = f"{JSON_CONTENT_TYPE}, {HTML_CONTENT_TYPE};q=0.2, text/html;q=0.01"
DEFAULT_TIMEOUT: tuple[float, float] = (10.0, 60.0)  # (connect, read) seconds
MAX_REDIRECTS = 5
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


KNOWN_INDEXES = ("pypi", "testpypi")


def resolve_simple_url(simple_url: str) -> str:
    """A simple-API root: a URL as given, or a well-known index name (``pypi``,
    ``testpypi``) resolved through pip's own defaults, so that no registry host
    name has to be written in rows.toml.
    """
    if "://" in simple_url:
        return simple_url
    if simple_url not in KNOWN_INDEXES:
        raise InputError(
            f"{simple_url!r} is neither a URL nor a known index name ({', '.join(KNOWN_INDEXES)})"
        )
    try:
        models = importlib.import_module("pip._internal.models.index")
        url = getattr(models, "PyPI" if simple_url == "pypi" else "TestPyPI").simple_url
    except (ImportError, AttributeError) as exc:
        raise ToolError(
            f"cannot resolve the index name {simple_url!r} through pip ({exc}); write the index URL instead"
        ) from None
    return str(url).rstrip("/") + "/"


def project_url(simple_url: str, project: str) -> str:
    """The PEP 503 project page: ``<simple root>/<normalized name>/``."""
    return simple_url.rstrip("/") + "/" + canonicalize_name(project) + "/"


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


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


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


def _get(
    session: requests.Session,
    url: str,
    *,
    auth: Auth | None,
    timeout: tuple[float, float],
    accept: str,
    redactor: Redactor,
    stream: bool = False,
) -> requests.Response:
    """GET following redirects only within one origin (an index must answer for itself)."""
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        try:
            response = session.get(
                current,
                headers={"Accept": accept},
                auth=auth,
                timeout=timeout,
                allow_redirects=False,
                stream=stream,
            )
        except requests.Timeout:
            raise StepFailed(
                f"{redactor(current)}: the index did not answer within {timeout[1]:g} s; "
                "check that it is up and retry"
            ) from None
        except requests.RequestException as exc:
            raise StepFailed(
                f"{redactor(current)}: cannot reach the index ({type(exc).__name__}); "
                "check the URL and that the server is running"
            ) from None
        if response.is_redirect:
            target = urljoin(current, response.headers.get("Location", ""))
            response.close()
            if _origin(target) != _origin(url):
                raise StepFailed(
                    f"{redactor(url)}: the index redirected to another server "
                    f"({redactor(target)}); an index must answer for itself "
                    "(a local pypiserver needs --disable-fallback)"
                )
            current = target
            continue
        return response
    raise StepFailed(f"{redactor(url)}: more than {MAX_REDIRECTS} redirects")


def read_project(
    simple_url: str,
    project: str,
    *,
    auth: Auth | None = None,
    session: requests.Session | None = None,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    redactor: Redactor | None = None,
) -> tuple[IndexFile, ...]:
    """Every file the index lists for ``project``; () when the project does not exist there."""
    red = redactor or Redactor()
    clean, url_auth = split_userinfo(resolve_simple_url(simple_url))
    red.add_auth(url_auth)
    auth = auth or url_auth
    page = project_url(clean, project)
    if urlsplit(page).scheme == "file":
        return _read_file_project(page)
    own_session = session is None
    sess = session or requests.Session()
    try:
        response = _get(sess, page, auth=auth, timeout=timeout, accept=ACCEPT, redactor=red)
        with response:
            if response.status_code == 404:
                return ()
            if response.status_code in (401, 403):
                raise StepFailed(
                    f"{red(page)}: the index refused to list {project!r} (HTTP "
                    f"{response.status_code}); it needs read credentials: set them in the "
                    "environment (see docs/publishing.md)"
                )
            if response.status_code >= 400:
                raise StepFailed(
                    f"{red(page)}: the index answered HTTP {response.status_code} "
                    f"{red(response.reason or '')} while listing {project!r}"
                )
            content_type = response.headers.get("Content-Type", "").split(";")[0].strip().lower()
            final = response.url or page
            if content_type == JSON_CONTENT_TYPE:
                try:
                    data = response.json()
                except ValueError:
                    raise StepFailed(f"{red(page)}: the index sent invalid JSON") from None
                return parse_json_project(data, final, where=red(page))
            if content_type in (HTML_CONTENT_TYPE, "text/html", ""):
                return parse_html_project(response.text, final)
            raise StepFailed(
                f"{red(page)}: unexpected content type {content_type!r}; "
                "is this a simple index root (it usually ends in /simple/)?"
            )
    finally:
        if own_session:
            sess.close()


def _download_sha256(
    session: requests.Session,
    url: str,
    *,
    auth: Auth | None,
    timeout: tuple[float, float],
    redactor: Redactor,
) -> str:
    response = _get(session, url, auth=auth, timeout=timeout, accept="*/*", redactor=redactor, stream=True)
    with response:
        if response.status_code != 200:
            raise StepFailed(f"{redactor(url)}: download failed with HTTP {response.status_code}")
        digest = hashlib.sha256()
        for chunk in response.iter_content(chunk_size=1 << 20):
            digest.update(chunk)
        return digest.hexdigest()


def remote_hashes(
    simple_url: str,
    project: str,
    *,
    auth: Auth | None = None,
    timeout: tuple[float, float] = DEFAULT_TIMEOUT,
    redactor: Redactor | None = None,
    fetch_missing: bool = True,
) -> dict[str, str]:
    """``filename -> sha256`` of every file the index holds for ``project``.

    A file listed without a sha256 is downloaded and hashed (``fetch_missing``);
    otherwise that is an error, since publishing cannot compare it.
    """
    red = redactor or Redactor()
    clean, url_auth = split_userinfo(resolve_simple_url(simple_url))
    red.add_auth(url_auth)
    auth = auth or url_auth
    with requests.Session() as session:
        files = read_project(clean, project, auth=auth, session=session, timeout=timeout, redactor=red)
        out: dict[str, str] = {}
        for f in files:
            if f.sha256 is not None:
                out[f.filename] = f.sha256
            elif fetch_missing and urlsplit(f.url).scheme != "file":
                out[f.filename] = _download_sha256(session, f.url, auth=auth, timeout=timeout, redactor=red)
            elif fetch_missing:
                out[f.filename] = _file_sha256(Path(url2pathname(urlsplit(f.url).path)))
            else:
                raise StepFailed(
                    f"{red(project_url(clean, project))}: {f.filename} is listed without a sha256"
                )
        return out


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    try:
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    except OSError as exc:
        raise StepFailed(f"{path}: cannot read: {exc.strerror}") from None
    return digest.hexdigest()


Fetch = Callable[[str, str], Iterable[str]]
