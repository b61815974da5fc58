"""Faults on the wire, on loopback: the real local index (pypiserver behind wheelwright's upload
checks), real twine, and a fault proxy of our own in between (helpers.index.FaultProxy).

Each fault ends with the index holding exactly audited files (or nothing), within its deadline
(a few seconds here), and a message that says what happened and what this run did so far.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import functools
import hashlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.index import (
    PROJECT,
    FaultProxy,
    publish_policy,
    release_wheel,
)
from test_publish import publisher_command

from release.core import proc
from release.core.errors import CheckFailed, StepFailed
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.policy.targets import IndexTarget, Target
from release.publish.guards import lock
from release.publish.guards.deadlines import Deadlines
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex
from release.publish.index.server import dispatcher
from release.publish.index.upload_check import multipart_fields, upload_problem
from release.publish.staging import STAGING_PREFIX
from release.publish.upload import publish

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
FAST = Deadlines(request_s=2.0, connect_s=1.0, upload_s=4.0, read_back_s=2.0)


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


def _on_index(index: LocalIndex) -> dict[str, str]:
    return remote_hashes(index.simple_url("cu130"), PROJECT)


def _expected(*wheels: Path) -> dict[str, str]:
    return {w.name: sha256_file(w) for w in wheels}


def _twines(marker: str) -> list[int]:
    """The pids of live twine processes whose command line names ``marker`` (a staging path)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(b"twine" in a for a in args) and any(marker.encode() in a for a in args):
                pids.append(int(entry.name))
    return pids


def _wheels(tmp_path: Path, policy: Policy) -> list[Path]:
    dist = tmp_path / "dist"
    return [release_wheel(dist, policy, f"cu130-py{py}-x86_64") for py in ("311", "312")]


def _publish(wheels: list[Path], target: Target, policy: Policy, index: LocalIndex, **kw: object) -> object:
    return publish(
        wheels, target, variant="cu130", policy=policy, env=index.credentials_env("cu130"),
        deadlines=FAST, log=lambda line: None, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


@dataclasses.dataclass(frozen=True)
class _Run:
    """A child publisher of ``wheels`` (publisher_command's ``args`` and ``env``) to ``target``,
    the fault proxy in front of ``index``."""

    wheels: list[Path]
    target: Target
    index: LocalIndex
    args: list[str]
    env: dict[str, str]
    process: subprocess.Popen[str]

    @property
    def dist(self) -> Path:
        return self.wheels[0].parent


@contextlib.contextmanager
def _stalled_upload(
    tmp_path: Path,
    policy: Policy,
    index: LocalIndex,
    fault_proxy: FaultProxy,
    *,
    stall_bytes: int,
    stall_s: float,
) -> Iterator[_Run]:
    """A child publisher of _wheels through the fault proxy, which stalls each upload ``stall_s``
    after ``stall_bytes``; entered once an upload reached the proxy, killed on the way out if it
    still runs."""
    wheels = _wheels(tmp_path, policy)
    fault_proxy.mode, fault_proxy.stall_bytes, fault_proxy.stall_s = "stall-upload", stall_bytes, stall_s
    target = fault_proxy.target(["cu130"])
    args, env = publisher_command(target, wheels[0].parent, policy, index, tmp_path)
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert fault_proxy.post_seen.wait(60), "the publisher never started uploading"
        yield _Run(wheels, target, index, args, env, process)
    finally:
        if process.poll() is None:  # pragma: no cover
            process.kill()
        process.communicate(timeout=60)  # reap it and close its pipes, whatever happened


StalledUpload = Callable[..., contextlib.AbstractContextManager[_Run]]


@pytest.fixture
def stalled_upload(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, fault_proxy: FaultProxy
) -> StalledUpload:
    """_stalled_upload bound to this test's folder, policy, index and fault proxy: call it with
    ``stall_bytes`` and ``stall_s``."""
    return functools.partial(_stalled_upload, tmp_path, policy, local_index_server, fault_proxy)


def _assert_all_uploaded_by_this_run(uploaded: Iterable[str], wheels: list[Path], index: LocalIndex) -> None:
    """This run uploaded every wheel, and the index holds exactly their audited bytes."""
    assert sorted(uploaded) == sorted(w.name for w in wheels)
    assert _on_index(index) == _expected(*wheels)


# --- the index server's own checks ----------------------------------------------------------


def _post(index: LocalIndex, body: bytes, *, length: int, boundary: str = "b0undary") -> bytes:
    """A raw upload POST, its Content-Length ``length`` (may exceed the body sent)."""
    token = base64.b64encode(f"{index.username}:{index.password}".encode()).decode()
    head = (
        f"POST /cu130/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Basic {token}\r\n"
        f"Content-Type: multipart/form-data; boundary={boundary}\r\nContent-Length: {length}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", index.port), timeout=10) as s:
        s.sendall(head + body)
        if len(body) < length:
            s.shutdown(socket.SHUT_WR)  # the client goes away mid-body
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def _form(fields: dict[str, bytes], filename: str, content: bytes, boundary: str = "b0undary") -> bytes:
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n'.encode() + v + b"\r\n"
        for k, v in fields.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="content"; filename="{filename}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n".encode()
        + content
        + b"\r\n"
    )
    return b"".join(parts) + f"--{boundary}--\r\n".encode()


def test_the_local_index_refuses_a_partial_body_and_a_wrong_digest(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    (wheel,) = _wheels(tmp_path, policy)[:1]
    content = wheel.read_bytes()
    good = hashlib.sha256(content).hexdigest().encode()
    fields = {":action": b"file_upload", "name": PROJECT.encode(), "version": b"1.5.0+cu130"}

    wrong = _form({**fields, "sha256_digest": b"0" * 64}, wheel.name, content)
    answer = _post(index, wrong, length=len(wrong))
    assert b" 400 " in answer.split(b"\r\n")[0] and b"damaged on the way; nothing was stored" in answer
    undeclared = _form(fields, wheel.name, content)
    assert b"carries no sha256_digest" in _post(index, undeclared, length=len(undeclared))
    whole = _form({**fields, "sha256_digest": good}, wheel.name, content)
    _post(index, whole[:700], length=len(whole))  # a dropped connection: 700 bytes of many
    assert list(index.folder("cu130").iterdir()) == []
    log = (index.root_dir / "server.log").read_text(encoding="utf-8")
    assert f"partial upload: 700 of the {len(whole)} bytes" in log

    answer = _post(index, whole, length=len(whole))  # the same upload, whole and right: stored
    assert b" 200 " in answer.split(b"\r\n")[0], answer
    assert _on_index(index) == _expected(wheel)


def _wsgi(app: Any, path: str, *, method: str = "GET", body: bytes = b"", length: int | None = None,
          content_type: str = "") -> tuple[str, dict[str, str], bytes]:  # fmt: skip
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    environ = {"PATH_INFO": path, "SCRIPT_NAME": "", "REQUEST_METHOD": method, "wsgi.input": io.BytesIO(body),
               "CONTENT_LENGTH": str(len(body) if length is None else length), "CONTENT_TYPE": content_type}  # fmt: skip
    out = b"".join(app(environ, start_response))
    return got["status"], got["headers"], out


def test_dispatcher_mounts_one_app_per_variant_checks_uploads_and_serves_manifests(tmp_path: Path) -> None:
    seen: list[tuple[str, str, bytes]] = []

    def variant_app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        seen.append((environ["SCRIPT_NAME"], environ["PATH_INFO"], environ["wsgi.input"].read()))
        start_response("200 OK", [])
        return [b"inner"]

    (tmp_path / "cu130").mkdir()
    (tmp_path / "cu130" / "wwdemo-1.5.0.release.json").write_text("{}\n", encoding="utf-8")
    app = dispatcher({"cu130": variant_app, "cpu": variant_app}, {"cu130": tmp_path / "cu130"})
    assert _wsgi(app, "/cu130/simple/wwdemo/") == ("200 OK", {}, b"inner")
    assert _wsgi(app, "/cpu/")[0] == "200 OK"
    assert seen == [("/cu130", "/simple/wwdemo/", b""), ("/cpu", "/", b"")]
    assert _wsgi(app, "/health")[0::2] == ("200 OK", b"ok")
    assert _wsgi(app, "/cu13/simple/")[0] == "404 Not Found"
    status, headers, _ = _wsgi(app, "/cu130")
    assert status.startswith("301") and headers["Location"] == "/cu130/"
    assert _wsgi(app, "/cu130/+release/wwdemo-1.5.0.release.json")[0::2] == ("200 OK", b"{}\n")
    assert _wsgi(app, "/cu130/+release/../rows.toml")[0] == "404 Not Found"
    assert _wsgi(app, "/cpu/+release/wwdemo-1.5.0.release.json")[2] == b"inner"  # no manifests for cpu here
    content = b"wheel bytes"
    form = _form(
        {":action": b"file_upload", "sha256_digest": hashlib.sha256(content).hexdigest().encode()},
        "w.whl",
        content,
    )
    ctype = "multipart/form-data; boundary=b0undary"
    assert (
        _wsgi(app, "/cu130/", method="POST", body=form[:50], length=len(form), content_type=ctype)[0]
        == "400 Bad Request"
    )
    assert _wsgi(app, "/cu130/", method="POST", body=form, content_type=ctype)[0] == "200 OK"
    assert seen[-1] == ("/cu130", "/", form)  # handed on whole, from memory


def test_upload_problems_are_decided_from_the_body_alone() -> None:
    content = b"\x00PK wheel bytes with -- dashes\r\n"
    good = hashlib.sha256(content).hexdigest().encode()
    ctype = "multipart/form-data; boundary=b0undary"
    form = _form({":action": b"file_upload", "sha256_digest": good}, "w.whl", content)
    assert multipart_fields(ctype, form) == {
        ":action": [b"file_upload"],
        "sha256_digest": [good],
        "content": [content],
    }
    assert upload_problem(ctype, form) is None
    assert "cut short" in str(upload_problem(ctype, form[:-20]))
    assert "damaged on the way" in str(upload_problem(ctype, form.replace(good, b"f" * 64)))
    assert "no sha256_digest" in str(
        upload_problem(ctype, _form({":action": b"file_upload"}, "w.whl", content))
    )
    assert (
        upload_problem(ctype, _form({":action": b"doc_upload"}, "d.zip", b"")) is None
    )  # pypiserver's to answer
    assert multipart_fields("application/json", form) is None


# --- faults between publish and the index -----------------------------------------------------


def test_a_connection_dropped_mid_upload_leaves_nothing_then_rerun_completes(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, fault_proxy: FaultProxy
) -> None:
    index, wheels = local_index_server, _wheels(tmp_path, policy)
    fault_proxy.mode = "drop-upload"
    start = time.monotonic()
    with pytest.raises(StepFailed) as info:
        _publish(wheels, fault_proxy.target(["cu130"]), policy, index)
    message = str(info.value)
    assert time.monotonic() - start < 30
    assert (
        f"uploading {wheels[0].name} to 'faulty' (cu130, {fault_proxy.url('/cu130/simple/')}) failed"
        in message
    )
    assert "0 of 2 file(s) uploaded by this run (none)" in message
    assert f"the index does not hold {wheels[0].name}: rerun the same command to resume" in message
    assert _on_index(index) == {}  # the server refused the partial body: no corrupt file
    assert "partial upload" in (index.root_dir / "server.log").read_text(encoding="utf-8")

    fault_proxy.mode = "pass"
    report = _publish(wheels, fault_proxy.target(["cu130"]), policy, index)
    _assert_all_uploaded_by_this_run(report.uploaded, wheels, index)  # type: ignore[attr-defined]


@pytest.fixture
def bare_pypiserver(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A plain pypiserver (no wheelwright checks, no auth): it keeps what a dropped upload sent."""
    root = tmp_path / "bare"
    root.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port),
         "-a", ".", "-P", ".", "--disable-fallback", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        for _ in range(100):
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port, root
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_a_truncated_file_left_by_our_dropped_upload_is_named_with_the_one_right_action(
    tmp_path: Path, policy: Policy, bare_pypiserver: tuple[int, Path]
) -> None:
    port, root = bare_pypiserver
    proxy = FaultProxy(port)
    try:
        target = Target(
            "bare", True, {"cu130": IndexTarget("cu130", proxy.url("/"), proxy.url("/simple/"), None)}
        )
        wheels = _wheels(tmp_path, policy)[:1]
        proxy.mode, proxy.drop_after = "drop-upload", 4000
        env = {"TWINE_USERNAME": "anyone", "TWINE_PASSWORD": "anything"}
        with pytest.raises((CheckFailed, StepFailed)) as info:
            publish(
                wheels, target, variant="cu130", policy=policy, env=env, deadlines=FAST, log=lambda line: None
            )
        first = str(info.value)
        stored = list(root.iterdir())
        assert [p.name for p in stored] == [wheels[0].name]  # what this kind of index keeps
        assert 0 < stored[0].stat().st_size < wheels[0].stat().st_size
        assert wheels[0].read_bytes().startswith(stored[0].read_bytes())
        action = "The one right action: remove it through the index, then rerun the same command"
        assert (
            f"the index holds a truncated copy of this wheel under its name: the first {stored[0].stat().st_size} of its"
            in first
        )
        assert action in first and "bump the version" not in first and "resume" not in first

        proxy.mode = "pass"  # the rerun says the same, and nothing else
        with pytest.raises(CheckFailed) as again:
            publish(
                wheels, target, variant="cu130", policy=policy, env=env, deadlines=FAST, log=lambda line: None
            )
        assert "truncated copy of this wheel" in str(again.value) and action in str(again.value)
        stored[0].unlink()  # the one right action
        report = publish(
            wheels, target, variant="cu130", policy=policy, env=env, deadlines=FAST, log=lambda line: None
        )
        assert report.uploaded == (wheels[0].name,)
        assert sha256_file(root / wheels[0].name) == sha256_file(wheels[0])
    finally:
        proxy.close()


def test_a_trickling_index_ends_at_the_request_deadline(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, fault_proxy: FaultProxy
) -> None:
    index, wheels = local_index_server, _wheels(tmp_path, policy)
    fault_proxy.mode, fault_proxy.trickle_s = "trickle", 0.5
    start = time.monotonic()
    with pytest.raises(StepFailed) as info:
        _publish(wheels, fault_proxy.target(["cu130"]), policy, index)
    assert time.monotonic() - start < 2.0 + 8.0  # the deadline, plus the audit done before it
    message = str(info.value)
    assert "reading the index failed" in message and "did not answer completely within 2 s" in message
    assert "nothing was uploaded" in message and "[rule: deadline]" in message
    assert _on_index(index) == {}

    # after the uploads, the read-back trickles: the uploads are said, and a rerun completes
    fault_proxy.mode = "pass"

    def trickle_after_the_last(event: str, filename: str) -> None:
        if event == "uploaded" and filename == wheels[-1].name:
            fault_proxy.mode = "trickle"

    with pytest.raises(StepFailed) as info:
        _publish(wheels, fault_proxy.target(["cu130"]), policy, index, hook=trickle_after_the_last)
    message = str(info.value)
    assert "after uploading, reading 'faulty' (cu130, " in message
    assert "2 of 2 file(s) uploaded by this run" in message and "rerun the same command" in message
    assert _on_index(index) == _expected(*wheels)
    fault_proxy.mode = "pass"
    report = _publish(wheels, fault_proxy.target(["cu130"]), policy, index)
    assert report.uploaded == () and len(report.verified) == 2  # type: ignore[attr-defined]


def test_a_post_never_answered_ends_at_the_upload_deadline(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, fault_proxy: FaultProxy
) -> None:
    index, wheels = local_index_server, _wheels(tmp_path, policy)[:1]
    fault_proxy.mode = "blackhole-post"  # nothing reaches the index, no answer comes
    start = time.monotonic()
    with pytest.raises(StepFailed) as info:
        _publish(wheels, fault_proxy.target(["cu130"]), policy, index)
    took = time.monotonic() - start
    message = str(info.value)
    assert 4.0 <= took < 4.0 + 10.0
    assert f"uploading {wheels[0].name} to 'faulty' (cu130, " in message
    assert "did not finish within its 4 s deadline" in message and "twine was stopped" in message
    assert f"the index does not hold {wheels[0].name}: rerun the same command to resume" in message
    assert _twines(f"{STAGING_PREFIX}{os.getpid()}-") == []  # killed with its process group
    assert _on_index(index) == {}

    fault_proxy.mode = "hang-post"  # the index stores it; its answer never comes back
    lines: list[str] = []
    report = publish(wheels, fault_proxy.target(["cu130"]), variant="cu130", policy=policy,
                     env=index.credentials_env("cu130"), deadlines=FAST, log=lines.append)  # fmt: skip
    assert report.uploaded == (wheels[0].name,)  # it is there, with the audited bytes: ours
    assert any(
        "did not finish within its 4 s deadline" in line and "audited sha256" in line for line in lines
    )
    assert _on_index(index) == _expected(*wheels)


def test_kill_9_mid_upload_leaves_no_twine_and_no_file_then_rerun_completes(
    stalled_upload: StalledUpload, fault_proxy: FaultProxy
) -> None:
    with stalled_upload(stall_bytes=256, stall_s=0.5) as run:
        time.sleep(0.5)
        staging = Path(run.env["TMPDIR"])  # the child's private staging folder goes there
        assert _twines(str(staging)), "twine should be uploading now"
        run.process.send_signal(signal.SIGKILL)
        run.process.communicate(timeout=30)
    dist, wheels, index = run.dist, run.wheels, run.index
    deadline = time.monotonic() + 5
    while _twines(str(staging)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _twines(str(staging)) == []  # twine died with its parent (PR_SET_PDEATHSIG)
    time.sleep(0.5)
    assert _on_index(index) == {}  # the cut-short body was refused: nothing half-done
    assert list(staging.glob(f"{STAGING_PREFIX}*"))  # kill -9 ran no cleanup
    assert not (dist / ".publish").exists()  # and nothing was ever staged inside dist/

    fault_proxy.mode = "pass"
    resumed = proc.run(run.args, env=run.env, check=False, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "a staging folder left by an earlier run" in resumed.stderr
    assert list(staging.glob(f"{STAGING_PREFIX}*")) == []
    _assert_all_uploaded_by_this_run(json.loads(resumed.stdout)["uploaded"], wheels, index)


def test_two_concurrent_runs_one_refuses_naming_the_other(
    stalled_upload: StalledUpload, policy: Policy
) -> None:
    # each upload stalls 3 s: the first run still holds the lock when the second asks, however
    # busy the machine is (its own deadlines are the defaults, minutes)
    with stalled_upload(stall_bytes=4096, stall_s=3.0) as run:
        dist, wheels, index, first = run.dist, run.wheels, run.index, run.process
        holder = lock.read_holder(dist)
        assert holder is not None and holder.pid == first.pid
        start = time.monotonic()
        with pytest.raises(StepFailed) as info:
            publish(dist, run.target, variant="cu130", policy=policy, log=lambda line: None, deadlines=FAST,
                    env={**index.credentials_env("cu130"), lock.WAIT_ENV: "1"})  # fmt: skip
        assert time.monotonic() - start < 5
        message = str(info.value)
        assert f"is in use by another wheelwright run: pid {first.pid} on " in message
        assert "(`python -c " in message and "started 20" in message and "changed nothing" in message
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    _assert_all_uploaded_by_this_run(json.loads(out)["uploaded"], wheels, index)  # the first run's: all


def test_a_file_another_uploader_sent_meanwhile_is_not_counted_as_ours(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index, wheels = local_index_server, _wheels(tmp_path, policy)

    def someone_else_first(event: str, filename: str) -> None:
        if event == "before-upload" and filename == wheels[1].name:
            (index.folder("cu130") / filename).write_bytes(wheels[1].read_bytes())

    report = _publish(wheels, index.target(), policy, index, hook=someone_else_first)
    assert report.uploaded == (wheels[0].name,)  # type: ignore[attr-defined]
    assert report.raced == (wheels[1].name,)  # type: ignore[attr-defined]
    assert _on_index(index) == _expected(*wheels)


def test_the_lock_is_reentrant_in_one_process_and_names_its_holder_to_another(tmp_path: Path) -> None:
    with lock.hold(tmp_path, what="dist/", command="python -m release publish") as me:
        with lock.hold(tmp_path, what="dist/"):  # a release holds dist/ and calls publish
            assert lock.read_holder(tmp_path) == me
        code = "from pathlib import Path; from release.publish.guards import lock; import sys\n"
        code += "with lock.hold(Path(sys.argv[1]), what='dist/', wait_s=0.3): pass"
        other = proc.run(
            [sys.executable, "-c", code, str(tmp_path)], env={"PYTHONPATH": str(REPO)}, check=False
        )
        assert (
            other.returncode != 0 and f"in use by another wheelwright run: pid {os.getpid()}" in other.stderr
        )
        assert "(`python -m release publish`)" in other.stderr
    assert lock.read_holder(tmp_path) is None  # free again: the file names no one
