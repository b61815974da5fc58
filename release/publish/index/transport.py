"""One HTTP GET with one deadline for its whole life: connect, send, headers and body.

``requests`` (and ``urllib3`` under it) bound each socket read, never a request: an index
trickling a byte at a time keeps a 60 s read timeout happy forever. Here every read from
the socket gets what is left of the request's deadline as its timeout, so the request ends
at its deadline whatever the server does. Built on :mod:`http.client` (its parsing of status,
headers, chunked and sized bodies) with a socket reader of ours; no private API is touched.

Proxies: the ``http_proxy`` / ``https_proxy`` / ``no_proxy`` environment variables, as pip and
requests read them (:func:`urllib.request.getproxies`); https goes through a CONNECT tunnel.
Redirects are not followed here: the caller decides (an index must answer for itself).
"""

from __future__ import annotations

import base64
import http.client
import io
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import unquote, urlsplit, urlunsplit
from urllib.request import getproxies, proxy_bypass

from release.publish.guards.deadlines import Clock

MAX_BODY = 256 * 1024 * 1024  # a project page, or a wheel downloaded to hash it


class DeadlinePassed(TimeoutError):
    """The request's deadline passed before it completed."""


@dataclass(frozen=True)
class Response:
    status: int
    reason: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes = field(repr=False)
    url: str

    @property
    def content_type(self) -> str:
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    def text(self) -> str:
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            key, _, value = part.strip().partition("=")
            if key.lower() == "charset" and value:
                charset = value.strip('"')
        try:
            return self.body.decode(charset, errors="replace")
        except LookupError:
            return self.body.decode("utf-8", errors="replace")


class _DeadlineReader(io.RawIOBase):
    """The socket, read with what is left of the deadline as each read's timeout."""

    def __init__(self, sock: Any, clock: Clock) -> None:  # noqa: ANN401 - socket or SSLSocket
        super().__init__()
        self._sock, self._clock = sock, clock

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:  # noqa: ANN401 - a writable buffer
        left = self._clock.left()
        if left <= 0:
            raise DeadlinePassed("the deadline passed while reading the answer")
        self._sock.settimeout(left)
        try:
            return int(self._sock.recv_into(buffer))
        except TimeoutError:
            raise DeadlinePassed("the deadline passed while reading the answer") from None


class _DeadlineSocket:
    """What :class:`http.client.HTTPConnection` sees as its socket."""

    def __init__(self, sock: Any, clock: Clock) -> None:  # noqa: ANN401
        self._sock, self._clock = sock, clock

    def makefile(self, mode: str = "rb", *args: object, **kwargs: object) -> io.BufferedReader:
        return io.BufferedReader(_DeadlineReader(self._sock, self._clock))

    def sendall(self, data: bytes) -> None:
        left = self._clock.left()
        if left <= 0:
            raise DeadlinePassed("the deadline passed while sending the request")
        self._sock.settimeout(left)  # sendall's timeout bounds the whole call (Python >= 3.5)
        try:
            self._sock.sendall(data)
        except TimeoutError:
            raise DeadlinePassed("the deadline passed while sending the request") from None

    def close(self) -> None:
        """http.client closes its socket while the answer is still being read from it (a plain
        socket counts its readers for that); the real socket is closed once, by :func:`get`."""

    def __getattr__(self, name: str) -> Any:  # noqa: ANN401 - everything else is the socket's
        return getattr(self._sock, name)


def _connect(conn: _HTTP | _HTTPS, connect: Callable[[], None]) -> None:
    left = conn.clock.left()
    if left <= 0:
        raise DeadlinePassed("the deadline passed before connecting")
    conn.timeout = min(conn.connect_s, left)
    try:
        connect()
    except TimeoutError:
        raise DeadlinePassed("connecting timed out") from None
    conn.raw_sock = conn.sock
    conn.sock = cast("socket.socket", _DeadlineSocket(conn.sock, conn.clock))


class _HTTP(http.client.HTTPConnection):
    def __init__(self, host: str, port: int | None, *, clock: Clock, connect_s: float) -> None:
        super().__init__(host, port)
        self.clock, self.connect_s = clock, connect_s
        self.raw_sock: socket.socket | None = None

    def connect(self) -> None:
        _connect(self, super().connect)


class _HTTPS(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int | None, *, clock: Clock, connect_s: float) -> None:
        super().__init__(host, port, context=ssl.create_default_context())
        self.clock, self.connect_s = clock, connect_s
        self.raw_sock: socket.socket | None = None

    def connect(self) -> None:
        _connect(self, super().connect)


def _connection(url: str, clock: Clock, connect_s: float) -> tuple[_HTTP | _HTTPS, str]:
    """A connection for ``url`` (through the environment's proxy, if any) and the request target."""
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port
    target = urlunsplit(("", "", parts.path or "/", parts.query, ""))
    proxy = getproxies().get(parts.scheme)
    conn: _HTTP | _HTTPS
    if proxy and not proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        headers = {}
        if p.username is not None:
            token = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
            headers["Proxy-Authorization"] = "Basic " + base64.b64encode(token).decode()
        if parts.scheme == "https":
            conn = _HTTPS(p.hostname or "", p.port or 8080, clock=clock, connect_s=connect_s)
            conn.set_tunnel(host, port or 443, headers=headers)
        else:
            conn = _HTTP(p.hostname or "", p.port or 8080, clock=clock, connect_s=connect_s)
            target = urlunsplit((parts.scheme, parts.netloc, parts.path or "/", parts.query, ""))
    elif parts.scheme == "https":
        conn = _HTTPS(host, port, clock=clock, connect_s=connect_s)
    else:
        conn = _HTTP(host, port, clock=clock, connect_s=connect_s)
    return conn, target


def get(
    url: str,
    *,
    headers: Mapping[str, str],
    clock: Clock,
    connect_s: float,
    sink: Callable[[bytes], None] | None = None,
    max_body: int = MAX_BODY,
) -> Response:
    """GET ``url`` within ``clock``'s deadline; the body in the response, or fed to ``sink``
    (then the response's body is empty). Raises :class:`DeadlinePassed`, OSError or
    :class:`http.client.HTTPException`; ValueError when the body exceeds ``max_body``."""
    conn, target = _connection(url, clock, connect_s)
    try:
        conn.request("GET", target, headers={**headers, "Connection": "close"})
        response = conn.getresponse()
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = response.read(1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_body:
                raise ValueError(f"the answer is larger than {max_body} bytes")
            if sink is None:
                chunks.append(chunk)
            else:
                sink(chunk)
        return Response(
            response.status,
            response.reason,
            {k.lower(): v for k, v in response.getheaders()},
            b"".join(chunks),
            url,
        )
    except DeadlinePassed:
        raise
    except TimeoutError:
        raise DeadlinePassed("the deadline passed") from None
    finally:
        conn.close()
        if conn.raw_sock is not None:
            conn.raw_sock.close()
