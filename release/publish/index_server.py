"""index_server: split out of its former module."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from release.core.errors import InputError, StepFailed
from release.publish.local_index import (
    HOST,
    LOG_FILE,
    PACKAGES_DIR,
    PASSWORD_FILE,
    START_TIMEOUT_S,
    USERS_FILE,
    _load_users,
    _read_state,
    _state_path,
    check_password,
    start_detached,
    stop,
    wait_until_answers,
)

# ---------------------------------------------------------------------------
# The server process


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def address_string(self) -> str:
        return str(self.client_address[0])

    def log_message(self, format: str, *args: object) -> None:
        # The request line only (no headers, so no Authorization), to the log file.
        sys.stderr.write(f"{self.log_date_time_string()} {format % args}\n")


def _build_app(root: Path, variants: Sequence[str]) -> Any:  # noqa: ANN401 (bottle is untyped)
    import pypiserver
    from pypiserver.bottle_wrapper import Bottle

    users = _load_users(root / USERS_FILE)

    def auther(username: str, password: str) -> bool:
        stored = users.get(username)
        return stored is not None and check_password(stored, password)

    app = Bottle()
    for variant in variants:
        sub = pypiserver.app(
            roots=[root / PACKAGES_DIR / variant],
            authenticate=["update"],
            auther=auther,
            disable_fallback=True,
            overwrite=False,
            hash_algo="sha256",
        )
        app.mount(f"/{variant}/", sub)
    app.route("/health", "GET", lambda: "ok")
    return app


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
        prog="python -m release.publish.index_server", description=__doc__.splitlines()[0]
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
        if args.command == "start":
            index = start_detached(variants, args.root, port=args.port)
            print(
                json.dumps(
                    {
                        "root": str(index.root_dir),
                        "pid": index.pid,
                        "username": index.username,
                        "password_file": str(index.root_dir / PASSWORD_FILE),
                        "indexes": {
                            v: {"upload_url": index.upload_url(v), "simple_url": index.simple_url(v)}
                            for v in index.variants
                        },
                    },
                    indent=2,
                    sort_keys=True,
                )
            )
            return 0
        print("stopped" if stop(args.root) else "no server was running", file=sys.stderr)
        return 0
    except (InputError, StepFailed) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.return_code


if __name__ == "__main__":
    sys.exit(main())
