"""What the local index checks before it stores an upload: the whole body, and its sha256.

pypiserver stores whatever body arrives: a connection dropped mid-upload left a truncated file
under the release's name, and it never compares the ``sha256_digest`` twine sends. The local
index (:mod:`release.publish.index.server`) runs :func:`checked_uploads` in front of it:

- a body shorter than its ``Content-Length`` (the client went away, or stalled past the
  server's socket timeout) is refused, 400, and nothing is stored;
- a ``file_upload`` must be complete ``multipart/form-data`` (its closing boundary present),
  carry one ``content`` file and a ``sha256_digest`` equal to that file's sha256; else 400.

Pure parts (:func:`multipart_fields`, :func:`upload_problem`) are separate from the WSGI wrapper.
"""

from __future__ import annotations

import hashlib
import io
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment


def _param(header: str, key: str) -> str | None:
    """``key``'s value in a header's ``; key=value`` parameters (quotes removed)."""
    for part in header.split(";")[1:]:
        name, sep, value = part.strip().partition("=")
        if sep and name.strip().lower() == key:
            return value.strip().strip('"')
    return None


def multipart_fields(content_type: str, body: bytes) -> dict[str, list[bytes]] | None:
    """``name -> values`` of a ``multipart/form-data`` body; None when it is not one, or is cut
    short (no closing boundary). Pure."""
    if content_type.split(";")[0].strip().lower() != "multipart/form-data":
        return None
    boundary = _param(content_type, "boundary")
    if not boundary:
        return None
    segments = body.split(b"--" + boundary.encode("latin-1"))
    if len(segments) < 3 or not segments[-1].startswith(b"--"):
        return None  # no part, or no closing delimiter: the body was cut short
    fields: dict[str, list[bytes]] = {}
    for segment in segments[1:-1]:
        if not segment.startswith(b"\r\n") or not segment.endswith(b"\r\n"):
            return None
        head, sep, value = segment[2:-2].partition(b"\r\n\r\n")
        if not sep:
            return None
        disposition = next(
            (
                line.decode("latin-1").partition(":")[2]
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-disposition:")
            ),
            "",
        )
        name = _param(disposition, "name")
        if name is not None:
            fields.setdefault(name, []).append(value)
    return fields


def upload_problem(content_type: str, body: bytes) -> str | None:
    """Why the local index must not store this (complete) POST body; None when it may. Pure."""
    fields = multipart_fields(content_type, body)
    if fields is None:
        return "not a complete multipart/form-data body (cut short, or malformed); nothing was stored"
    if fields.get(":action", [b""])[0] != b"file_upload":
        return None  # not an upload: pypiserver answers it
    content = fields.get("content", [])
    if len(content) != 1:
        return f"an upload needs exactly one 'content' file, this one has {len(content)}; nothing was stored"
    declared = [v.decode("latin-1").strip().lower() for v in fields.get("sha256_digest", [])]
    if len(declared) != 1:
        return (
            "the upload carries no sha256_digest field; this index stores only a file whose digest "
            "it can check (twine sends one); nothing was stored"
        )
    actual = hashlib.sha256(content[0]).hexdigest()
    if declared[0] != actual:
        return (
            f"the uploaded file's sha256 is {actual}, but the upload says {declared[0]}: the file was "
            "damaged on the way; nothing was stored"
        )
    return None


def _refuse(start_response: StartResponse, status: str, why: str) -> Iterable[bytes]:
    body = (why + "\n").encode()
    print(f"refused an upload: {why}", file=sys.stderr, flush=True)
    start_response(status, [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def checked_uploads(app: WSGIApplication, *, max_body: int = 8 * 1024**3) -> WSGIApplication:
    """``app`` behind the checks: every POST is read whole, checked, then handed on from memory."""

    def wrapped(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD", "GET").upper() != "POST":
            return app(environ, start_response)
        try:
            length = int(environ.get("CONTENT_LENGTH") or "")
        except ValueError:
            return _refuse(start_response, "411 Length Required", "an upload needs a Content-Length")
        if not 0 <= length <= max_body:
            return _refuse(start_response, "413 Content Too Large", f"an upload over {max_body} bytes")
        stream, chunks, got = environ["wsgi.input"], [], 0
        try:
            while got < length:
                chunk = stream.read(min(1 << 20, length - got))
                if not chunk:
                    break
                chunks.append(chunk)
                got += len(chunk)
        except OSError:  # reset, or the server's socket timeout: the body stays short
            pass
        if got != length:
            return _refuse(
                start_response,
                "400 Bad Request",
                f"partial upload: {got} of the {length} bytes its Content-Length announced arrived; "
                "nothing was stored",
            )
        body = b"".join(chunks)
        problem = upload_problem(str(environ.get("CONTENT_TYPE", "")), body)
        if problem is not None:
            return _refuse(start_response, "400 Bad Request", problem)
        inner = dict(environ)
        inner["wsgi.input"] = io.BytesIO(body)
        return app(inner, start_response)

    return wrapped
