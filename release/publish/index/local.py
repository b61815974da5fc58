"""A real local package index for tests and rehearsals: pypiserver, one process, one path per variant.

One server process on 127.0.0.1 holds every variant under its own path, the
shape a per-CUDA index has in production (``<base>/cu130/simple/``)::

    upload:    http://127.0.0.1:<port>/<variant>/
    read:      http://127.0.0.1:<port>/<variant>/simple/
    manifests: http://127.0.0.1:<port>/<variant>/+release/<name>
    files:     <root_dir>/packages/<variant>/, <root_dir>/releases/<variant>/

It refuses a second file under an existing name (pypiserver without
``--overwrite``), refuses an upload whose body is cut short or whose sha256 is not
the declared one (:mod:`release.publish.index.upload_check`), lists files with their
sha256 (PEP 503 HTML; pypiserver 2.4 has no PEP 691 JSON), never redirects to
another index (fallback disabled), and asks for a username and password on upload
only (reads are anonymous).

Upload users live in ``<root_dir>/upload-users`` as salted PBKDF2-SHA256 hashes,
checked by the server itself: pypiserver's own htpasswd support needs passlib,
which wheelwright does not depend on.

- :func:`local_index` (context manager): start, wait until it answers, stop on
  exit. The server also stops if the process that started it dies.
- :func:`start_detached` / :func:`stop`: leave a server running for a rehearsal,
  with its state in ``<root_dir>/server.json`` (pid, port, variants) and its log
  in ``<root_dir>/server.log``; a generated password is kept in
  ``<root_dir>/upload-password`` (mode 0600). :func:`attach` reads them back.

The server itself runs as ``python -m release.publish.index.server serve ...`` (started
through :func:`release.core.proc.run`; it daemonizes once it answers).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.util
import json
import os
import secrets
import signal
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

from release.core import proc
from release.core.errors import InputError, StepFailed, ToolError
from release.policy.targets import IndexTarget, Target

DEFAULT_USERNAME = "ww-upload"
HOST = "127.0.0.1"
STATE_FILE = "server.json"
USERS_FILE = "upload-users"
PASSWORD_FILE = "upload-password"  # noqa: S105 (a file name)
LOG_FILE = "server.log"
PACKAGES_DIR = "packages"
RELEASES_DIR = "releases"  # release manifests, served at /<variant>/+release/<name>
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0
PBKDF2_ITERATIONS = 100_000


@dataclass(frozen=True)
class LocalIndex:
    """A running local index. ``password`` is never shown by repr."""

    root_dir: Path
    host: str
    port: int
    pid: int
    variants: tuple[str, ...]
    username: str
    password: str = field(repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _check(self, variant: str) -> None:
        if variant not in self.variants:
            raise InputError(f"the local index serves {', '.join(self.variants)}, not {variant!r}")

    def upload_url(self, variant: str) -> str:
        self._check(variant)
        return f"{self.base_url}/{variant}/"

    def simple_url(self, variant: str) -> str:
        self._check(variant)
        return f"{self.base_url}/{variant}/simple/"

    def folder(self, variant: str) -> Path:
        """Where the server keeps ``variant``'s files."""
        self._check(variant)
        return self.root_dir / PACKAGES_DIR / variant

    def releases(self, variant: str) -> Path:
        """Where the server keeps ``variant``'s release manifests (served, read-only)."""
        self._check(variant)
        return self.root_dir / RELEASES_DIR / variant

    def index_target(self, variant: str, *, max_wheel_mib: int | None = None) -> IndexTarget:
        return IndexTarget(variant, self.upload_url(variant), self.simple_url(variant), max_wheel_mib)

    def target(self, name: str = "local", *, rehearsal: bool = True) -> Target:
        return Target(name, rehearsal, {v: self.index_target(v) for v in self.variants})

    def credentials_env(self, variant: str | None = None) -> dict[str, str]:
        """Environment entries publish reads: the variant's own, or twine's when None."""
        if variant is None:
            return {"TWINE_USERNAME": self.username, "TWINE_PASSWORD": self.password}
        stem = "".join(c if c.isalnum() else "_" for c in variant.upper())
        return {f"WHEELWRIGHT_{stem}_USERNAME": self.username, f"WHEELWRIGHT_{stem}_PASSWORD": self.password}


def require_pypiserver() -> None:
    """pypiserver runs the local index; ToolError (exit 3) naming it when it is not installed.

    Checked without importing it: the server process imports it, this one only starts that.
    """
    if importlib.util.find_spec("pypiserver") is None:
        raise ToolError(
            f"the local rehearsal index needs pypiserver, which is not installed for this Python "
            f"({sys.executable}); install wheelwright with its dependencies (`pip install .`), or "
            "`pip install pypiserver` into this environment"
        )


# ---------------------------------------------------------------------------
# Users


def hash_password(password: str, *, salt: bytes | None = None) -> str:
    salt = salt or secrets.token_bytes(16)
    digest = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, PBKDF2_ITERATIONS)
    return f"pbkdf2_sha256${PBKDF2_ITERATIONS}${salt.hex()}${digest.hex()}"


def check_password(stored: str, password: str) -> bool:
    try:
        scheme, iterations, salt, digest = stored.split("$")
        if scheme != "pbkdf2_sha256":
            return False
        got = hashlib.pbkdf2_hmac("sha256", password.encode(), bytes.fromhex(salt), int(iterations))
    except ValueError:
        return False
    return hmac.compare_digest(got.hex(), digest)


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    path.chmod(0o600)


def _load_users(path: Path) -> dict[str, str]:
    users: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and ":" in line:
            user, _, stored = line.partition(":")
            users[user] = stored
    return users


# ---------------------------------------------------------------------------
# State


def _state_path(root_dir: Path) -> Path:
    return root_dir / STATE_FILE


def _read_state(root_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(_state_path(root_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_our_server(pid: int) -> bool:
    """True when ``pid`` is alive and is a wheelwright index server (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.exists():
        return True  # no /proc: trust the state file
    try:
        args = cmdline.read_bytes().split(b"\0")
    except OSError:
        return False
    return b"release.publish.index.server" in args and b"serve" in args


# ---------------------------------------------------------------------------
# Starting and stopping


def _prepare(root_dir: Path, variants: Sequence[str], username: str, password: str) -> Path:
    if not variants:
        raise InputError("a local index needs at least one variant")
    for v in variants:
        if not v or not all(c.isalnum() or c in "-_." for c in v):
            raise InputError(f"{v!r} is not a variant name (letters, digits, '-', '_', '.')")
    if ":" in username or not username:
        raise InputError(f"{username!r} is not a username (non-empty, no ':')")
    root = root_dir.resolve()
    state = _read_state(root)
    if state is not None:
        pid = int(state.get("pid", 0))
        if pid and _is_our_server(pid):
            raise StepFailed(
                f"{root}: a local index is already running there (pid {pid}, port {state.get('port')}); "
                "stop it first (python -m release index stop --root ...)"
            )
        _state_path(root).unlink(missing_ok=True)
    for v in variants:
        (root / PACKAGES_DIR / v).mkdir(parents=True, exist_ok=True)
    _write_private(root / USERS_FILE, f"{username}:{hash_password(password)}\n")
    return root


class IndexOptions(TypedDict, total=False):
    """How :func:`local_index` and :func:`start_detached` start a server."""

    port: int  # 0 (the default) picks a free port
    username: str  # DEFAULT_USERNAME
    password: str | None  # None (the default): a fresh random one


def _launch(
    variants: Sequence[str],
    root_dir: Path,
    *,
    owner_pid: int | None,
    port: int = 0,
    username: str = DEFAULT_USERNAME,
    password: str | None = None,
) -> LocalIndex:
    require_pypiserver()  # here, not in the server process: the message reaches the user
    password = password or secrets.token_urlsafe(24)
    root = _prepare(root_dir, variants, username, password)
    # the folder holding release/ (this module is release/publish/index/local.py)
    package_root = str(Path(__file__).resolve().parents[3])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH", "")) if p)
    args = [
        sys.executable,
        "-m",
        "release.publish.index.server",
        "serve",
        "--root",
        str(root),
        "--variants",
        ",".join(variants),
        "--port",
        str(port),
    ]
    if owner_pid is not None:
        args += ["--owner-pid", str(owner_pid)]
    result = proc.run(args, env=env, check=False, timeout=START_TIMEOUT_S + 10)
    if result.returncode != 0:
        log_tail = _log_tail(root)
        raise StepFailed(
            f"the local index did not start (exit {result.returncode}):\n"
            + "\n".join(x for x in (result.stderr.strip(), log_tail) if x)
        )
    state = json.loads(result.stdout)
    return LocalIndex(
        root, state["host"], int(state["port"]), int(state["pid"]), tuple(variants), username, password
    )


def _log_tail(root: Path, lines: int = 20) -> str:
    try:
        text = (root / LOG_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


@contextlib.contextmanager
def local_index(
    variants: Sequence[str], root_dir: Path, **options: Unpack[IndexOptions]
) -> Iterator[LocalIndex]:
    """Start a local index for ``variants`` with its files under ``root_dir``; stop it on exit.

    ``options``: :class:`IndexOptions`; read a generated password from the yielded
    :class:`LocalIndex`. Files stay in ``root_dir`` after the server stops, so a later server
    on the same folder serves them again.
    """
    index = _launch(variants, root_dir, owner_pid=os.getpid(), **options)
    try:
        yield index
    finally:
        stop(index.root_dir)


def start_detached(variants: Sequence[str], root_dir: Path, **options: Unpack[IndexOptions]) -> LocalIndex:
    """Start a local index that outlives this process (for a rehearsal); stop it with :func:`stop`.

    ``options``: :class:`IndexOptions`. A generated password is written to
    ``<root_dir>/upload-password`` (mode 0600) so :func:`attach` can find it; a given one is
    not written anywhere.
    """
    index = _launch(variants, root_dir, owner_pid=None, **options)
    if options.get("password") is None:
        _write_private(index.root_dir / PASSWORD_FILE, index.password + "\n")
    else:
        (index.root_dir / PASSWORD_FILE).unlink(missing_ok=True)  # never a stale one
    return index


def attach(root_dir: Path, *, password: str | None = None, username: str = DEFAULT_USERNAME) -> LocalIndex:
    """The running server of ``root_dir`` (from ``server.json``); StepFailed when none runs."""
    root = root_dir.resolve()
    state = _read_state(root)
    if state is None or not _is_our_server(int(state.get("pid", 0))):
        raise StepFailed(
            f"{root}: no local index is running there (start one: python -m release index start --root ROOT)"
        )
    if password is None:
        try:
            password = (root / PASSWORD_FILE).read_text(encoding="utf-8").strip()
        except OSError:
            raise InputError(
                f"{root}: the server was started with a password of the caller's; pass it"
            ) from None
    return LocalIndex(
        root,
        state["host"],
        int(state["port"]),
        int(state["pid"]),
        tuple(state["variants"]),
        username,
        password,
    )


def stop(root_dir: Path) -> bool:
    """Stop the server of ``root_dir``. True when one was running. Files are kept."""
    root = root_dir.resolve()
    state = _read_state(root)
    if state is None:
        return False
    pid = int(state.get("pid", 0))
    running = bool(pid) and _is_our_server(pid)
    if running:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while _is_our_server(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_our_server(pid):
            os.kill(pid, signal.SIGKILL)
            while _is_our_server(pid) and time.monotonic() < deadline + STOP_TIMEOUT_S:
                time.sleep(0.05)
    _state_path(root).unlink(missing_ok=True)
    return running


def wait_until_answers(base_url: str, *, timeout_s: float = START_TIMEOUT_S) -> None:
    """Poll ``<base_url>/health`` until it answers 200."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as response:  # noqa: S310
                if response.status == 200:
                    return
                last = f"HTTP {response.status}"
        except (urllib.error.URLError, OSError) as exc:
            last = type(exc).__name__
        time.sleep(0.05)
    raise StepFailed(f"{base_url}: the local index did not answer within {timeout_s:g} s ({last})")
