"""Where a release goes: a named target holding one index per variant, and the rules a target obeys.

The loader parses these from rows.toml (``[target.<name>]``) and checks every rule
below there, once; publishing only reads them. A target never holds credentials: those
come from the environment or a keyring at upload time (see :mod:`release.publish`).

Rules (pure functions returning a problem in words, or None):

- an index is a URL or one of :data:`KNOWN_INDEXES` (resolved to a URL by the publish
  stage through pip's and twine's own defaults, so no registry host is written here);
- no credentials anywhere in a URL: no ``user:password@``, no query string, no fragment;
- a non-rehearsal target uses ``https`` only; a rehearsal target (and a dependency
  channel) may also use ``http`` to a loopback host and ``file://``;
- no CUDA variant on a public index (its local version label ``+cu130`` is refused
  there, and pip would mix it with the CPU wheel), no two variants on one index.

URLs are taken apart and joined with :mod:`urllib.parse`, never by string concatenation.
"""

from __future__ import annotations

import difflib
import ipaddress
import posixpath
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal
from urllib.parse import SplitResult, quote, urljoin, urlsplit, urlunsplit

from release.core.errors import InputError

DEFAULT_INDEX = "pypi"  # pip's and twine's default index
KNOWN_INDEXES: tuple[str, ...] = ("pypi", "testpypi")  # names a policy may use instead of a URL
PUBLIC_INDEXES = KNOWN_INDEXES  # shared indexes that refuse local version labels

UrlUse = Literal["production", "rehearsal", "channel"]
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class IndexTarget:
    """One per-variant index: where wheels are uploaded and where the index is read."""

    variant: str  # "cu130", "cpu"
    upload_url: str  # a URL, or a twine repository name like "pypi"
    simple_url: str  # the index's simple API root (PEP 503/691), ending in /simple/ or similar
    max_wheel_mib: int | None  # the index's per-file limit; None: no limit checked

    @property
    def is_repository_name(self) -> bool:
        """True when ``upload_url`` names a twine repository (``pypi``) instead of a URL."""
        return is_index_name(self.upload_url)


@dataclass(frozen=True)
class Target:
    """A named destination: ``rehearsal`` targets may receive a partial release."""

    name: str
    rehearsal: bool
    indexes: Mapping[str, IndexTarget]  # variant -> IndexTarget

    def index_for(self, variant: str) -> IndexTarget:
        """The index for ``variant``; an InputError naming the target's variants otherwise."""
        try:
            return self.indexes[variant]
        except KeyError:
            known = sorted(self.indexes)
            close = difflib.get_close_matches(variant, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(
                f"target {self.name!r} has no index for variant {variant!r} "
                f"(it has: {', '.join(known) or 'none'}){hint}"
            ) from None


# --------------------------------------------------------------------------- rules


def is_index_name(text: str) -> bool:
    """True for a name (``pypi``) rather than a URL: anything without ``://``."""
    return "://" not in text


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _split(url: str) -> tuple[SplitResult, str] | str:
    """(parts, lower-case host) of a URL, or the problem with it in words."""
    if not url.isascii() or not url.isprintable() or any(c.isspace() for c in url):
        return "is not a URL: it has spaces, control or non-ASCII characters (write a host in punycode)"
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        _ = parts.port  # raises ValueError on a port that is not a number in range
    except ValueError as exc:
        return f"is not a valid URL ({exc})"
    return parts, host


def url_problem(url: str, use: UrlUse) -> str | None:
    """Why ``url`` (an index URL or name) may not be used for ``use``, or None.

    The message never repeats the URL: it may hold a secret.
    """
    if is_index_name(url):
        if url in KNOWN_INDEXES:
            return None
        return f"is neither a URL nor a known index name ({', '.join(KNOWN_INDEXES)})"
    split = _split(url)
    if isinstance(split, str):
        return split
    parts, host = split
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "credentials never go in rows.toml; remove them from the URL and set them in the environment"
    if parts.query or "?" in url:
        return (
            "has a query string: an index URL takes none, and credentials never go in rows.toml "
            "(a token in a query is still a credential); remove it and set credentials in the environment"
        )
    if parts.fragment or "#" in url:
        return "has a '#' fragment; an index URL takes none"
    scheme = parts.scheme.lower()
    if scheme not in ("https", "http", "file"):
        return f"uses {ascii(scheme[:20])[1:-1]}://; an index is reached over https:// (a rehearsal also allows loopback http:// and file://)"
    if scheme == "file":
        if use == "production":
            return "is a file:// URL; a non-rehearsal target publishes over https:// only"
        if host not in ("", "localhost") or not parts.path.startswith("/"):
            return "is not a local file:// URL; write file:///absolute/path"
        return None
    if not host:
        return f"has no host; write {scheme}://host/path/"
    if scheme == "http":
        if use == "production":
            return "uses http://; a non-rehearsal target publishes over https:// only"
        if not _is_loopback(host):
            return (
                "uses http:// to a host that is not loopback; use https://, or http:// only to "
                "127.0.0.1, ::1 or localhost"
            )
    return None


def _canonical_host(host: str) -> str:
    """One spelling per host: every loopback name and address (``localhost``, ``127.0.0.1``, any
    127/8 address, ``::1``, ``::ffff:127.0.0.1``) is this machine, written ``127.0.0.1``; an IPv4
    address in any form ``inet_aton`` takes (``127.1``) as a dotted quad; IPv6 compressed."""
    host = host.lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        try:
            address = ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return host
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback:
        return "127.0.0.1"
    return f"[{address.compressed}]" if address.version == 6 else address.compressed


def index_identity(url: str) -> str:
    """One spelling per index, to tell two variants that share one: scheme and host in lower
    case, every loopback name and address as one (:func:`_canonical_host`), the default port
    dropped, '//', '.' and '..' in the path resolved, the path ending in '/'. ``url`` must pass
    url_problem."""
    if is_index_name(url):
        return url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = _canonical_host(parts.hostname or "")
    if scheme == "file" and host == "127.0.0.1":
        host = ""  # file://localhost/x is file:///x
    port = parts.port
    netloc = host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"
    path = posixpath.normpath("/" + parts.path.lstrip("/")) if parts.path else "/"
    path = "/" + path.lstrip("/")  # normpath keeps a leading '//'
    path = path if path.endswith("/") else path + "/"
    return urlunsplit((scheme, netloc, path, "", ""))


def index_root(url: str) -> str:
    """The index an upload or simple URL belongs to: its identity without a last ``simple/``
    segment (an index takes uploads at ``<root>/`` and serves ``<root>/simple/``)."""
    ident = index_identity(url)
    return ident.removesuffix("simple/") if not is_index_name(url) else ident


def join_url(base: str, *segments: str) -> str:
    """``base`` + one path segment per argument, each quoted, ending in '/', joined with
    urllib.parse (``join_url("https://h/simple", "pkg")`` -> ``https://h/simple/pkg/``).
    The base's query and fragment are not carried over."""
    parts = urlsplit(base)
    path = parts.path if parts.path.endswith("/") else parts.path + "/"
    url = urlunsplit((parts.scheme, parts.netloc, path, "", ""))
    for segment in segments:
        url = urljoin(url, quote(segment, safe="") + "/")
    return url


def variant_index_problems(indexes: Mapping[str, IndexTarget]) -> list[tuple[str, str, str]]:
    """Cross-variant rules of one target: (variant, key, problem) for each broken one.

    A CUDA variant on a public index, and two variants on one index (by upload or by
    simple URL), are refused. Each index's own URLs must already pass url_problem.
    """
    problems: list[tuple[str, str, str]] = []
    for variant, index in indexes.items():
        if variant == "cpu":
            continue
        for key, url in (("upload_url", index.upload_url), ("simple_url", index.simple_url)):
            if url in PUBLIC_INDEXES:
                problems.append(
                    (
                        variant,
                        key,
                        f"the CUDA variant {variant} may not go to the public index {url!r}: it is for the "
                        "CPU wheel (it refuses local version labels like +cu130, and pip would take the "
                        "CUDA wheel for a plain install); give each CUDA variant its own index",
                    )
                )
    problems += _shared_index_problems(indexes)
    return problems


SPELLINGS = (
    "spelled alike, they are one index: scheme and host case, every loopback name and address "
    "(localhost, 127.0.0.1, ::1), a default port (80, 443), a trailing '/', '//', '.' and '..' change nothing"
)


def _shared_index_problems(indexes: Mapping[str, IndexTarget]) -> list[tuple[str, str, str]]:
    """Two variants on one index, however the URLs spell it: the same upload or simple URL once
    spelled alike (:func:`index_identity`), or one variant's URL at another's index (``<root>/`` and
    ``<root>/simple/``: :func:`index_root`)."""
    problems: list[tuple[str, str, str]] = []
    seen: dict[tuple[str, str], tuple[str, str]] = {}  # (kind, identity) -> (variant, key)
    for variant, index in indexes.items():
        found: tuple[str, str] | None = None
        for key in ("upload_url", "simple_url"):
            url = getattr(index, key)
            ident, root = index_identity(url), index_root(url)
            for mark in ((key, ident), ("root", root)):
                other = seen.get(mark)
                if other is not None and other[0] != variant and found is None:
                    found = (key, f"index.{other[0]}.{other[1]}")
            seen.setdefault((key, ident), (variant, key))
            seen.setdefault(("root", root), (variant, key))
        if found is not None:
            key, other_key = found
            problems.append(
                (
                    variant,
                    key,
                    f"is the same index as {other_key} ({SPELLINGS}); each variant needs its own index (a "
                    "variant's wheels would land among another's, and a publish would not be all or nothing): "
                    f"give index.{variant} an upload_url and simple_url of its own",
                )
            )
    return problems
