"""Helpers for publishing tests: real wheels that pass (or fail) the real audit,
their records, a real local index (pypiserver), a fault proxy, and a fresh venv to install into.

Publish audits every wheel again before it uploads it, so the wheels here are real: the
audit's committed fixture wheels (tests/fixtures/wheels, built by make_fixtures.py) rewrapped
under this test's project name, version and tag (:func:`rewrap_wheel`: same libraries, a new
dist-info and RECORD), audited against :func:`publish_policy` (the fixture policy, Pythons 3.11
and 3.12). ``build_tiny_wheel`` still makes a pure-Python wheel for what never goes through
publish (a stray or rogue file dropped on an index, a channel's contents).

The fixtures built on these (``local_index_server``, ``tiny_wheel_factory``, ``install_venv``,
``fault_proxy``) are defined in tests/conftest.py:

- ``local_index_server``: a running :class:`release.publish.index.local.LocalIndex` for
  variants cpu, cu126 and cu130, files under ``tmp_path/index``; stopped after the test.
- ``tiny_wheel_factory(dest, version=..., tag=..., payload=...)``: a pure-Python wheel.
- ``install_venv``: a fresh venv (no pip inside); ``install_venv.install(index_url, req)``
  installs with this venv's pip through ``--python``, isolated from any pip config.
- ``fault_proxy``: a :class:`FaultProxy` in front of ``local_index_server``; closed after the test.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import socket
import sys
import threading
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from helpers.policy import stub_project
from release import records
from release.core import proc
from release.core.hashing import sha256_file
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.policy.targets import IndexTarget, Target
from release.smoke.evaluate import evaluate
from release.smoke.record import write_record

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures"
POLICY_SHA256 = hashlib.sha256(b"rows.toml used by the publishing tests\n").hexdigest()
PROJECT = "wwdemo"
VARIANTS = ("cpu", "cu126", "cu130")
DATE = (2026, 1, 1, 0, 0, 0)
GOOD = {"cu130": "fx_good_cu130", "cpu": "fx_good_cpu"}  # the audit's passing fixture wheels


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def fixture_wheel_path(case: str) -> Path:
    """A committed fixture wheel by its case id (``fx_good_cu130``, ``fx_grafted``, ...)."""
    (path,) = (FIXTURES / "wheels").glob(f"{case}-*.whl")
    return path


def _put(zf: zipfile.ZipFile, lines: list[str], arcname: str, data: bytes, mode: int = 0o644) -> None:
    info = zipfile.ZipInfo(arcname, date_time=DATE)
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)
    lines.append(f"{arcname},{_record_hash(data)},{len(data)}")


def rewrap_wheel(
    src: Path,
    dest: Path,
    *,
    name: str = PROJECT,
    version: str,
    tag: str = "cp312-cp312-manylinux_2_28_x86_64",
    extra: dict[str, bytes] | None = None,
) -> Path:
    """``src``'s members (libraries, headers, modules: modes kept) in a new wheel named
    ``name``/``version``/``tag``: a renamed dist-info with Name, Version and Tag rewritten, a
    fresh RECORD, plus ``extra`` members (to make a different file under the same name)."""
    dest.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    path = dest / f"{name}-{version}-{tag}.whl"
    lines: list[str] = []
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(path, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info)
            mode = (info.external_attr >> 16) & 0o777
            top, _, rest = info.filename.partition("/")
            if not top.endswith(".dist-info"):
                _put(zout, lines, info.filename, data, mode)
                continue
            if rest == "RECORD":
                continue
            text = data.decode()
            if rest == "METADATA":
                text = "\n".join(
                    f"Name: {name}" if line.startswith("Name: ") else
                    f"Version: {version}" if line.startswith("Version: ") else line
                    for line in text.split("\n")
                )  # fmt: skip
            elif rest == "WHEEL":
                text = "\n".join(
                    f"Tag: {tag}" if line.startswith("Tag: ") else line for line in text.split("\n")
                )
            _put(zout, lines, f"{dist_info}/{rest}", text.encode(), mode)
        for arcname, data in (extra or {}).items():
            _put(zout, lines, arcname, data)
        record = "\n".join([*lines, f"{dist_info}/RECORD,,"]) + "\n"
        info = zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=DATE)
        info.external_attr = 0o100644 << 16
        zout.writestr(info, record, compress_type=zipfile.ZIP_DEFLATED)
    return path


def publish_policy(folder: Path, *, targets: str = "", pythons: tuple[str, ...] = ("3.11", "3.12")) -> Policy:
    """The audit's fixture policy (CUDA 13.0, ``8.0;9.0+PTX``, a CPU row) for ``pythons``, plus ``targets``."""
    text = (FIXTURES / "policy.toml").read_text(encoding="utf-8")
    text = text.replace('pythons = ["3.12"]', f"pythons = {list(pythons)!r}".replace("'", '"'))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "rows.toml"
    path.write_text(text + targets, encoding="utf-8")
    stub_project(folder, "project")  # the fixture policy's stand-in source folder
    return load_policy(path)


def row_of(policy: Policy, row_id: str) -> Row:
    (row,) = [r for r in expand(policy) if r.id == row_id]
    return row


def write_audit_record(
    wheel: Path,
    *,
    row: str,
    variant: str,
    passed: bool = True,
    policy_sha256: str = POLICY_SHA256,
    sha256: str | None = None,
) -> Path:
    """A record as the audit step writes it (``<wheel>.audit.json``), through the one writer.
    Its ``passed`` is what the test says, not what the wheel is: publish audits again."""
    failed = {"check": "device_code", "ok": False, "message": "missing sm_90", "library": None, "details": {}}
    record = records.AuditRecord(
        wheel=wheel.name,
        sha256=sha256 or sha256_file(wheel),
        policy_sha256=policy_sha256,
        row=row,
        variant=variant,
        passed=passed,
        findings=() if passed else (failed,),
    )
    return records.write(wheel, record)


def probe_report(row: Row, *, gpu: bool) -> dict[str, object]:
    """What the smoke probe reports from a fresh venv: with ``gpu``, a run on one H200."""
    site = f"/tmp/ww-smoke/venv/lib/python{row.python}/site-packages"
    loaded = [f"{site}/nvidia/cu13/lib/libcudart.so.13"] if row.is_cuda else []
    report: dict[str, object] = {
        "python": row.python,
        "site": site,
        "import": "ok",
        "loaded": [*loaded, "/usr/lib/x86_64-linux-gnu/libc.so.6"],
        "gpus": 1 if gpu else None,
        "gpu_name": "NVIDIA H200" if gpu else None,
        "driver_version": "580.159.04" if gpu else None,
        "no_gpu_reason": None if gpu else "no CUDA driver (libcuda.so.1 cannot be loaded)",
        "run_check": gpu or not row.is_cuda,
    }
    if report["run_check"]:
        report["check"] = {"max_abs_diff": 0.0, "device": "cuda:0" if gpu else "cpu"}
    return report


def write_smoke_record(
    wheel: Path, row: Row, *, policy_sha256: str = POLICY_SHA256, gpu: bool = False
) -> Path:
    """A smoke record as the smoke step writes it (release.smoke.run.write_record): the verdict the
    smoke stage's own rules give probe_report's report, that report bound to the wheel's sha256."""
    return write_record(wheel, row, evaluate(row, probe_report(row, gpu=gpu)), policy_sha256=policy_sha256)


def release_wheel(
    dist: Path,
    policy: Policy,
    row_id: str,
    *,
    version: str = "1.5.0",
    case: str | None = None,
    extra: dict[str, bytes] | None = None,
    audit: bool = True,
) -> Path:
    """A row's real wheel in ``dist/<variant>/`` (from the fixture ``case``, default the passing
    one), with a passing audit record of this policy when ``audit``."""
    row = row_of(policy, row_id)
    full = f"{version}+{row.variant}" if row.is_cuda else version
    src = fixture_wheel_path(case or GOOD[row.variant])
    wheel = rewrap_wheel(
        src,
        dist / row.variant,
        version=full,
        tag=f"{row.python_tag}-{row.python_tag}-{row.platform_tag}",
        extra=extra,
    )
    if audit:
        write_audit_record(wheel, row=row.id, variant=row.variant, policy_sha256=policy.sha256)
    return wheel


def build_tiny_wheel(
    dest: Path,
    *,
    name: str = PROJECT,
    version: str = "1.5.0+cu130",
    tag: str = "py3-none-any",
    payload: str = "",
) -> Path:
    """A real, installable pure-Python wheel: a module reporting its version, METADATA, WHEEL, RECORD."""
    dest.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\nTAG = {tag!r}\nPAYLOAD = {payload!r}\n".encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: a tiny wheel for wheelwright's publishing tests\nRequires-Python: >=3.8\n\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: wheelwright-tests\n"
            f"Root-Is-Purelib: {'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n"
        ).encode(),
    }
    path = dest / f"{name}-{version}-{tag}.whl"
    lines: list[str] = []
    with zipfile.ZipFile(path, "w") as zf:
        for arcname, data in files.items():
            _put(zf, lines, arcname, data)
        zf.writestr(
            zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=DATE),
            "\n".join([*lines, f"{dist_info}/RECORD,,"]) + "\n",
        )
    return path


class TinyWheelFactory(Protocol):
    def __call__(self, dest: Path, *, version: str = ..., tag: str = ..., payload: str = ...) -> Path: ...


@dataclass(frozen=True)
class InstallVenv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def install(self, index_url: str, *requirements: str) -> proc.Result:
        """pip install into this venv from ``index_url`` only, ignoring every pip config."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.root),
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        return proc.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(self.python),
                "install",
                "--isolated",
                "--no-cache-dir",
                "--no-deps",
                "--index-url",
                index_url,
                *requirements,
            ],
            env=env,
            check=False,
            timeout=120,
        )

    def run(self, code: str) -> proc.Result:
        return proc.run(
            [str(self.python), "-c", code], env={"PATH": "/usr/bin:/bin"}, check=False, timeout=60
        )


# --------------------------------------------------------------------------- a fault proxy

FaultMode = Literal["pass", "drop-upload", "trickle", "hang-post", "blackhole-post", "stall-upload"]


class FaultProxy:
    """A TCP proxy on 127.0.0.1 in front of a real index, with one fault for new connections:

    - ``pass``: both ways as they come;
    - ``drop-upload``: a POST's first ``drop_after`` bytes reach the index, then both sides are cut;
    - ``trickle``: answers reach the client one byte per ``trickle_s``;
    - ``hang-post``: a POST reaches the index whole, its answer never reaches the client;
    - ``blackhole-post``: a POST is read and never forwarded nor answered;
    - ``stall-upload``: a POST reaches the index ``stall_bytes`` per ``stall_s``.

    A connection's method is read from its first bytes (each of twine's uploads and each of
    publish's index reads is one connection). ``posts`` counts the POSTs seen; ``post_seen`` is set
    at the first.
    """

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.mode: FaultMode = "pass"
        self.drop_after = 1500
        self.trickle_s = 0.5
        self.stall_bytes, self.stall_s = 512, 0.25
        self.posts = 0
        self.post_seen = threading.Event()
        self._stop = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.2)
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def target(self, variants: Sequence[str], name: str = "faulty") -> Target:
        return Target(
            name,
            True,
            {v: IndexTarget(v, self.url(f"/{v}/"), self.url(f"/{v}/simple/"), None) for v in variants},
        )

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._listener.close()
        for s in list(self._sockets):
            with contextlib.suppress(OSError):
                s.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        self._sockets.append(client)
        mode = self.mode
        upstream: socket.socket | None = None
        try:
            first = client.recv(65536)
            if not first:
                return
            is_post = first.startswith(b"POST ")
            if is_post:
                self.posts += 1
                self.post_seen.set()
            if is_post and mode == "blackhole-post":
                while not self._stop.is_set() and client.recv(65536):
                    pass
                self._stop.wait()
                return
            upstream = socket.create_connection(self.upstream)
            self._sockets.append(upstream)
            if is_post and mode == "drop-upload":
                upstream.sendall(first[: self.drop_after])
                sent = min(len(first), self.drop_after)
                while sent < self.drop_after and (chunk := client.recv(min(65536, self.drop_after - sent))):
                    upstream.sendall(chunk)
                    sent += len(chunk)
                return  # finally: both sides cut mid-body
            down = threading.Thread(target=self._down, args=(upstream, client, mode, is_post), daemon=True)
            down.start()
            self._up(client, upstream, first, slow=is_post and mode == "stall-upload")
            down.join()
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.close()
            if upstream is not None:
                with contextlib.suppress(OSError):
                    upstream.close()

    def _up(self, client: socket.socket, upstream: socket.socket, first: bytes, *, slow: bool) -> None:
        data = first
        while data:
            if slow:
                for i in range(0, len(data), self.stall_bytes):
                    upstream.sendall(data[i : i + self.stall_bytes])
                    if self._stop.wait(self.stall_s):
                        return
            else:
                upstream.sendall(data)
            data = client.recv(65536)
        with contextlib.suppress(OSError):
            upstream.shutdown(socket.SHUT_WR)

    def _down(self, upstream: socket.socket, client: socket.socket, mode: FaultMode, is_post: bool) -> None:
        with contextlib.suppress(OSError):
            while data := upstream.recv(65536):
                if is_post and mode == "hang-post":
                    continue  # the index answered; the client never hears it
                if mode == "trickle":
                    for i in range(len(data)):
                        client.sendall(data[i : i + 1])
                        if self._stop.wait(self.trickle_s):
                            return
                else:
                    client.sendall(data)
            if is_post and mode == "hang-post":
                self._stop.wait()
            client.shutdown(socket.SHUT_WR)
