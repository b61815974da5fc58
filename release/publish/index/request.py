"""One GET to an index: one deadline for the whole request, redirects included, followed within
the URL's own origin only (an index must answer for itself), with basic auth when given.

Every failure is a :class:`~release.core.errors.StepFailed` naming the URL through the caller's
redactor (:class:`release.publish.index.client.Redactor`), so no credential reaches a message. The
socket work, one deadline for every read, is :mod:`release.publish.index.transport`'s.
"""

from __future__ import annotations

import base64
import http.client
from collections.abc import Callable
from urllib.parse import urljoin, urlsplit

from release.core.errors import StepFailed
from release.publish.guards.deadlines import Clock
from release.publish.index import transport

MAX_REDIRECTS = 5


def _origin(url: str) -> tuple[str, str | None, int | None]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname, parts.port


def _auth_header(auth: tuple[str, str] | None) -> dict[str, str]:
    if auth is None:
        return {}
    token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


def get(
    url: str,
    *,
    auth: tuple[str, str] | None,
    timeout: tuple[float, float],
    accept: str,
    redactor: Callable[[str], str],
    sink: Callable[[bytes], None] | None = None,
    restart: Callable[[], None] | None = None,
    max_body: int = transport.MAX_BODY,
) -> transport.Response:
    """GET within one deadline (``timeout[1]`` seconds for the whole request, redirects included),
    following redirects only within one origin (an index must answer for itself). ``restart()``
    is called before each request (a redirect's body reached ``sink`` too: start again)."""
    clock = Clock(timeout[1])
    current = url
    headers = {"Accept": accept, "User-Agent": "wheelwright", **_auth_header(auth)}
    for _ in range(MAX_REDIRECTS + 1):
        if restart is not None:
            restart()
        try:
            response = transport.get(
                current, headers=headers, clock=clock, connect_s=timeout[0], sink=sink, max_body=max_body
            )
        except transport.DeadlinePassed:
            raise StepFailed(
                f"{redactor(current)}: the index did not answer completely within {timeout[1]:g} s "
                f"(the deadline for one index request: {clock.elapsed():.1f} s spent); check that it "
                "is up and not overloaded, and retry [rule: deadline]"
            ) from None
        except (OSError, http.client.HTTPException, ValueError) as exc:
            raise StepFailed(
                f"{redactor(current)}: cannot read the index ({type(exc).__name__}: {redactor(str(exc))}); "
                "check the URL and that the server is running"
            ) from None
        if response.status in (301, 302, 303, 307, 308) and "location" in response.headers:
            target = urljoin(current, response.headers["location"])
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
