"""The local index server process: pypiserver's public WSGI app, one per variant, under one port.

``python -m release.publish.index.server start|stop|serve``; see :mod:`release.publish.index.local`
for the layout and the Python API (:func:`~release.publish.index.local.local_index`).

In front of pypiserver, the dispatcher checks every upload (:mod:`release.publish.index.upload_check`:
the whole body arrived, its sha256 is the one twine declared) and serves each variant's release
manifests read-only at ``/<variant>/+release/<name>`` (:mod:`release.publish.manifest`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

from release.core.errors import InputError, StepFailed
from release.publish.guards import lock
from release.publish.index.lease import in_use_problem
from release.publish.index.local import (
    HOST,
    LOG_FILE,
    PACKAGES_DIR,
    PASSWORD_FILE,
    RELEASES_DIR,
    START_TIMEOUT_S,
    USERS_FILE,
    _load_users,
    _read_state,
    _state_path,
    check_password,
    require_pypiserver,
    start_detached,
    stop,
    wait_until_answers,
)
from release.publish.index.upload_check import checked_uploads

SOCKET_TIMEOUT_S = 60.0  # a client that stops sending mid-upload is dropped after this

# ---------------------------------------------------------------------------
# The server process


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    timeout = SOCKET_TIMEOUT_S

    def address_string(self) -> str:
        return str(self.client_address[0])

    def log_message(self, format: str, *args: object) -> None:
        # The request line only (no headers, so no Authorization), to the log file.
        sys.stderr.write(f"{self.log_date_time_string()} {format % args}\n")


def _health(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", "2")])
    return [b"ok"]


def _not_found(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
    body = b"not found: this local index serves /<variant>/ and /health\n"
    start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


def _release_file(folder: Path, name: str, start_response: StartResponse) -> Iterable[bytes]:
    """A release manifest, read-only; a name that is not a plain file name is not found."""
    path = folder / name
    if (
        not name.endswith((".release.json", ".release.json.sig"))
        or "/" in name
        or name.startswith(".")
        or not path.is_file()
    ):
        body = b"no such release manifest\n"
        start_response("404 Not Found", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
        return [body]
    data = path.read_bytes()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def dispatcher(
    apps: Mapping[str, WSGIApplication], releases: Mapping[str, Path] | None = None
) -> WSGIApplication:
    """One WSGI app serving ``apps[prefix]`` under ``/<prefix>/`` (PATH_INFO moved into SCRIPT_NAME,
    as a mount does), ``/health``, and a 404 for anything else. Every POST to a variant goes
    through :func:`~release.publish.index.upload_check.checked_uploads`; ``/<prefix>/+release/<name>``
    serves ``releases[prefix]/<name>`` (a release manifest) when ``releases`` names a folder."""
    checked = {prefix: checked_uploads(inner) for prefix, inner in apps.items()}

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or "/"
        if path == "/health":
            return _health(environ, start_response)
        prefix, sep, rest = path.lstrip("/").partition("/")
        target = checked.get(prefix)
        if target is None:
            return _not_found(environ, start_response)
        if releases is not None and prefix in releases and rest.startswith("+release/"):
            return _release_file(releases[prefix], rest.removeprefix("+release/"), start_response)
        if not sep:  # /cu130 -> /cu130/
            location = f"{environ.get('SCRIPT_NAME', '')}/{prefix}/"
            start_response("301 Moved Permanently", [("Location", location), ("Content-Length", "0")])
            return [b""]
        inner = dict(environ)
        inner["SCRIPT_NAME"] = f"{environ.get('SCRIPT_NAME', '')}/{prefix}"
        inner["PATH_INFO"] = f"/{rest}"
        return target(inner, start_response)

    return app


def _build_app(root: Path, variants: Sequence[str]) -> WSGIApplication:
    """pypiserver's public ``pypiserver.app(...)`` once per variant, behind :func:`dispatcher`."""
    require_pypiserver()
    import pypiserver

    users = _load_users(root / USERS_FILE)

    def auther(username: str, password: str) -> bool:
        stored = users.get(username)
        return stored is not None and check_password(stored, password)

    apps: dict[str, WSGIApplication] = {}
    for variant in variants:
        apps[variant] = pypiserver.app(
            roots=[root / PACKAGES_DIR / variant],
            authenticate=["update"],
            auther=auther,
            disable_fallback=True,
            overwrite=False,
            hash_algo="sha256",
        )
    return dispatcher(apps, {v: root / RELEASES_DIR / v for v in variants})


def _serve(root: Path, variants: Sequence[str], port: int, owner_pid: int | None) -> None:
    """Run in the daemonized child: bind, write server.json, serve until SIGTERM."""
    app = _build_app(root, variants)
    server = make_server(HOST, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    state = {"pid": os.getpid(), "host": HOST, "port": server.server_port, "variants": list(variants)}
    tmp = _state_path(root).with_suffix(".tmp")
    tmp.write_text(json.dumps(state, sort_keys=True), encoding="utf-8")
    tmp.replace(_state_path(root))

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    if owner_pid is not None:

        def watch_owner() -> None:
            while True:
                time.sleep(0.5)
                try:
                    os.kill(owner_pid, 0)
                except ProcessLookupError:
                    os.kill(os.getpid(), signal.SIGTERM)
                    return
                except PermissionError:
                    pass

        threading.Thread(target=watch_owner, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        current = _read_state(root)
        if current is not None and current.get("pid") == os.getpid():
            _state_path(root).unlink(missing_ok=True)


def _daemonize_and_serve(root: Path, variants: Sequence[str], port: int, owner_pid: int | None) -> int:
    """Fork a server child, wait until it answers, print its state as JSON, return."""
    _state_path(root).unlink(missing_ok=True)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:  # the server
        os.setsid()
        log_fd = os.open(root / LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        null_fd = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null_fd, 0)
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        os.close(null_fd)
        os.close(log_fd)
        code = 0
        try:
            _serve(root, variants, port, owner_pid)
        except SystemExit:
            code = 0
        except BaseException as exc:
            print(f"local index failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            code = 1
        os._exit(code)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(child, os.WNOHANG)
        if done:
            print(f"the server exited at start (status {status}); see {root / LOG_FILE}", file=sys.stderr)
            return 1
        state = _read_state(root)
        if state is not None and state.get("pid") == child:
            try:
                wait_until_answers(
                    f"http://{state['host']}:{state['port']}", timeout_s=deadline - time.monotonic()
                )
            except StepFailed as exc:
                os.kill(child, signal.SIGKILL)
                print(str(exc), file=sys.stderr)
                return 1
            print(json.dumps(state, sort_keys=True))
            return 0
        time.sleep(0.02)
    os.kill(child, signal.SIGKILL)
    print(f"the server did not start within {START_TIMEOUT_S:g} s; see {root / LOG_FILE}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m release.publish.index.server", description=__doc__.splitlines()[0]
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("serve", help="(internal) start a server; prints its state as JSON once it answers")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--variants", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--owner-pid", type=int)
    p = sub.add_parser("start", help="start a detached local index for a rehearsal")
    p.add_argument("--root", type=Path, required=True)
    p.add_argument("--variants", required=True, help="comma-separated, e.g. cpu,cu126,cu130")
    p.add_argument("--port", type=int, default=0)
    p = sub.add_parser("stop", help="stop the local index of a folder (its files are kept)")
    p.add_argument("--root", type=Path, required=True)
    args = parser.parse_args(argv)
    variants = [v for v in getattr(args, "variants", "").split(",") if v]
    try:
        if args.command == "serve":
            return _daemonize_and_serve(args.root.resolve(), variants, args.port, args.owner_pid)
        return start_or_stop(args.command, args.root, variants, getattr(args, "port", 0))  # stop has none
    except (InputError, StepFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.return_code


def start_or_stop(command: str, root: Path, variants: Sequence[str], port: int = 0) -> int:
    """``start`` / ``stop`` (``python -m release index``), holding the index root's lock (a publish to
    it holds it too); a stop while another run holds a lease on the index is refused, naming it. A
    stop where no index folder is writes nothing (no lock file is made to say so)."""
    if command == "stop" and not root.is_dir():
        print(f"no server was running (no local index at {root})", file=sys.stderr)
        return 0
    with lock.hold(root, what="the local index", wait_s=lock.wait_from_env(os.environ)):
        return _start_or_stop(command, root, variants, port)


def _start_or_stop(command: str, root: Path, variants: Sequence[str], port: int) -> int:
    if command == "stop":
        problem = in_use_problem(root, "stop the local index")
        if problem is not None:
            raise StepFailed(problem)
        print("stopped" if stop(root) else "no server was running", file=sys.stderr)
        return 0
    if not variants:
        raise InputError("index start: no variants to serve (give --variants, or a policy with rows)")
    index = start_detached(variants, root, port=port)
    indexes = {
        v: {"upload_url": index.upload_url(v), "simple_url": index.simple_url(v)} for v in index.variants
    }
    state = {
        "root": str(index.root_dir),
        "pid": index.pid,
        "username": index.username,
        "password_file": str(index.root_dir / PASSWORD_FILE),
        "indexes": indexes,
    }
    print(json.dumps(state, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
