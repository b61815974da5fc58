"""Publishing against a real pypiserver, real twine and real pip, with real wheels the real audit
passes (the audit's fixture wheels, rewrapped); interruptions included.

Every test ends by comparing the index with the audited set, and by checking that no credential
reached any captured output. Faults on the wire (dropped, trickling, unanswered) are in
test_publish_faults.py; forged and edited records in test_publish_forged.py.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from helpers.index import (
    PROJECT,
    InstallVenv,
    TinyWheelFactory,
    build_tiny_wheel,
    publish_policy,
    release_wheel,
    write_audit_record,
)

from release.core import proc
from release.core.errors import CheckFailed, StepFailed, ToolError
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.policy.targets import IndexTarget, Target
from release.publish.channels import ChannelRule, check_channels
from release.publish.guards.plan import STOP_AFTER_ENV, PublishReport
from release.publish.index.client import read_project, remote_hashes, resolve_simple_url
from release.publish.index.local import LocalIndex, attach, local_index, start_detached, stop
from release.publish.index.static import build_static_index
from release.publish.staging import STAGING_PREFIX, publish_session
from release.publish.upload import execute_publish, prepare_publish, publish

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _index_state(index: LocalIndex, variant: str) -> dict[str, str]:
    return remote_hashes(index.simple_url(variant), PROJECT)


def _expected(wheels: Iterable[Path]) -> dict[str, str]:
    return {w.name: sha256_file(w) for w in wheels}


def _assert_no_secret(index: LocalIndex, *texts: str) -> None:
    server_log = (index.root_dir / "server.log").read_text(encoding="utf-8", errors="replace")
    for text in (*texts, server_log):
        assert index.password not in text
        assert index.username not in text


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


def _cu130_set(dist: Path, policy: Policy, version: str = "1.5.0") -> list[Path]:
    return [release_wheel(dist, policy, f"cu130-py{py}-x86_64", version=version) for py in ("311", "312")]


def test_publish_then_pip_install_then_rerun_skips(
    tmp_path: Path,
    policy: Policy,
    local_index_server: LocalIndex,
    install_venv: InstallVenv,
    capsys: pytest.CaptureFixture[str],
) -> None:
    index = local_index_server
    dist = tmp_path / "dist"
    wheels = _cu130_set(dist, policy)
    cpu = release_wheel(dist, policy, "cpu-py312-x86_64")  # another variant, another folder
    lines: list[str] = []

    def publish_cu130(**kwargs: Any) -> PublishReport:
        return publish(
            dist / "cu130",
            index.target(),
            variant="cu130",
            policy=policy,
            dist=dist,
            log=lines.append,
            **kwargs,
        )

    report = publish_cu130(expected_files=[w.name for w in wheels], env=index.credentials_env("cu130"))
    assert sorted(report.uploaded) == sorted(w.name for w in wheels)
    assert _index_state(index, "cu130") == _expected(wheels)
    assert _index_state(index, "cpu") == {}
    assert cpu.name not in os.listdir(index.folder("cu130"))
    assert any(line.startswith("  re-auditing ") for line in lines)  # the staged bytes, audited again
    assert not (dist / ".publish").exists()  # nothing of the run is staged inside dist/
    assert not list(Path(tempfile.gettempdir()).glob(f"{STAGING_PREFIX}{os.getpid()}-*"))  # and it is gone

    result = install_venv.install(index.simple_url("cu130"), f"{PROJECT}==1.5.0+cu130")
    assert result.returncode == 0, result.stderr
    shown = install_venv.run("import importlib.metadata as m; print(m.version('wwdemo'))").stdout.strip()
    assert shown == "1.5.0+cu130"

    again = publish_cu130(env=index.credentials_env(None))  # TWINE_USERNAME/TWINE_PASSWORD work too
    assert again.uploaded == ()
    assert sorted(again.skipped) == sorted(w.name for w in wheels)
    assert _index_state(index, "cu130") == _expected(wheels)
    captured = capsys.readouterr()
    _assert_no_secret(index, *lines, captured.out, captured.err, result.stdout, result.stderr)


def test_refuses_unaudited_tampered_failed_foreign_and_misfiled_wheels_uploading_nothing(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    dist = tmp_path / "dist"
    good = release_wheel(dist, policy, "cu130-py312-x86_64", version="1.5.0")
    unaudited = release_wheel(dist, policy, "cu130-py311-x86_64", version="1.5.1", audit=False)
    tampered = release_wheel(dist, policy, "cu130-py311-x86_64", version="1.5.2")
    with tampered.open("ab") as fh:
        fh.write(b"\0")  # changed after the audit
    failed = release_wheel(dist, policy, "cu130-py311-x86_64", version="1.5.3", audit=False)
    write_audit_record(
        failed, row="cu130-py311-x86_64", variant="cu130", passed=False, policy_sha256=policy.sha256
    )
    foreign = release_wheel(dist, policy, "cu130-py311-x86_64", version="1.5.4", audit=False)
    write_audit_record(foreign, row="cu130-py311-x86_64", variant="cu130", policy_sha256="0" * 64)
    misfiled = release_wheel(dist, policy, "cu130-py311-x86_64", version="1.5.5", audit=False)
    write_audit_record(misfiled, row="cu130-py312-x86_64", variant="cu130", policy_sha256=policy.sha256)

    with pytest.raises(CheckFailed) as info:
        publish(dist / "cu130", index.target(), variant="cu130", policy=policy, dist=dist,
                env=index.credentials_env("cu130"), log=lambda line: None)  # fmt: skip
    message = str(info.value)
    assert f"{unaudited.name}: no audit record" in message
    assert (
        f"{tampered.name}: changed since it was audited: its bytes are not the ones audited (sha256 now"
        in message
    )
    assert f"{failed.name}: its audit failed" in message
    assert f"{foreign.name}: audited against another rows.toml" in message
    assert f"{misfiled.name}: audited as row 'cu130-py312-x86_64', not as row cu130-py311-x86_64" in message
    assert message.count("[rule: record-chain]") == 5
    assert good.name not in message
    assert message.endswith("nothing was uploaded")
    assert list(index.folder("cu130").iterdir()) == []
    _assert_no_secret(index, message)


def test_conflict_and_stray_files_on_the_index_stop_before_any_upload(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    wheels = _cu130_set(tmp_path / "dist", policy)
    other = release_wheel(
        tmp_path / "other", policy, "cu130-py312-x86_64", extra={"wwdemo-x/x": b"x"}, audit=False
    )
    assert other.name == wheels[1].name
    shutil.copy(other, index.folder("cu130") / other.name)  # same name, different bytes
    stray = build_tiny_wheel(index.folder("cu130"), version="1.5.0+cu126")  # another variant's: one index?
    unknown = build_tiny_wheel(index.folder("cu130"), version="1.5.0+cu999")  # of no variant of the release
    old = build_tiny_wheel(index.folder("cu130"), version="1.4.0+cu130")  # an earlier release: fine
    before = _index_state(index, "cu130")

    with pytest.raises(CheckFailed) as info:
        publish(wheels, index.target(), variant="cu130", policy=policy, env=index.credentials_env("cu130"),
                log=lambda line: None)  # fmt: skip
    message = str(info.value)
    assert f"{wheels[1].name}: the index already holds" in message
    assert (
        "if that file was never released, remove it from the index; if it was, bump the build number"
        in message
    )
    assert "truncated" not in message  # a whole other wheel, not a cut-short upload of ours
    assert f"{stray.name}: a cu126 file of this release is on the cu130 index" in message
    assert f"{unknown.name}: on the index for this release's version" in message
    assert "[rule: one-name-one-file]" in message and "[rule: release-set]" in message
    assert "[rule: one-index]" in message
    assert old.name not in message
    assert _index_state(index, "cu130") == before  # nothing uploaded


def test_server_stopped_mid_release_then_rerun_completes(tmp_path: Path, policy: Policy) -> None:
    wheels = _cu130_set(tmp_path / "dist", policy)
    root = tmp_path / "index"
    lines: list[str] = []
    with local_index(["cu130"], root) as first:

        def stop_server_after_first(event: str, filename: str) -> None:
            if event == "uploaded":
                stop(first.root_dir)

        with pytest.raises(StepFailed) as info:
            publish(wheels, first.target(), variant="cu130", policy=policy, env=first.credentials_env("cu130"),
                    log=lines.append, hook=stop_server_after_first)  # fmt: skip
        message = str(info.value)
        assert "the index could not be read back" in message
        assert f"1 of 2 file(s) uploaded by this run ({wheels[0].name})" in message
        assert "rerun the same command" in message
        assert len(os.listdir(first.folder("cu130"))) == 1
        _assert_no_secret(first, message, *lines)

    with local_index(["cu130"], root, password=first.password) as second:  # same folder, new port
        report = publish(wheels, second.target(), variant="cu130", policy=policy,
                         env=second.credentials_env("cu130"), log=lines.append)  # fmt: skip
        assert report.skipped == (wheels[0].name,) and report.uploaded == (wheels[1].name,)
        assert _index_state(second, "cu130") == _expected(wheels)


def test_index_refuses_one_upload_midway_then_rerun_completes(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    wheels = _cu130_set(tmp_path / "dist", policy)
    placed: list[Path] = []

    def race_a_different_file(event: str, filename: str) -> None:
        # Another publisher wins the race for the second name: the server must refuse ours.
        if event == "before-upload" and not placed and any(index.folder("cu130").iterdir()):
            rogue = release_wheel(
                tmp_path / "rogue", policy, "cu130-py312-x86_64", extra={"r/r": b"r"}, audit=False
            )
            assert rogue.name == filename
            placed.append(Path(shutil.copy(rogue, index.folder("cu130") / rogue.name)))

    lines: list[str] = []
    with pytest.raises(CheckFailed) as info:
        publish(wheels, index.target(), variant="cu130", policy=policy, env=index.credentials_env("cu130"),
                log=lines.append, hook=race_a_different_file)  # fmt: skip
    message = str(info.value)
    assert f"uploading {placed[0].name} to 'local' (cu130, " in message
    assert f"{placed[0].name}: the index already holds" in message
    assert f"1 of 2 file(s) uploaded by this run ({wheels[0].name})" in message
    assert "rerun the same command to resume" not in message  # never advice that contradicts the fix
    _assert_no_secret(index, message, *lines)

    placed[0].unlink()  # the operator removes the file that was never released
    report = publish(wheels, index.target(), variant="cu130", policy=policy, env=index.credentials_env("cu130"),
                     log=lines.append)  # fmt: skip
    assert report.uploaded == (wheels[1].name,)
    assert _index_state(index, "cu130") == _expected(wheels)


PUBLISH_SCRIPT = """
import json, sys
from pathlib import Path
from typing import Any
from release.policy.load import load_policy
from release.publish.upload import publish
from release.policy.targets import IndexTarget, Target
from release.publish.guards.deadlines import Deadlines
t = json.loads(sys.argv[1])
target = Target(t["name"], t["rehearsal"], {v: IndexTarget(**i) for v, i in t["indexes"].items()})
deadlines = Deadlines(**json.loads(sys.argv[4])) if len(sys.argv) > 4 else None
report = publish(Path(sys.argv[2]), target, variant="cu130", policy=load_policy(sys.argv[3]), deadlines=deadlines)
print(json.dumps(report.to_json()))
"""


def target_json(target: Target) -> str:
    return json.dumps(
        {
            "name": target.name,
            "rehearsal": target.rehearsal,
            "indexes": {
                v: {
                    "variant": i.variant,
                    "upload_url": i.upload_url,
                    "simple_url": i.simple_url,
                    "max_wheel_mib": i.max_wheel_mib,
                }
                for v, i in target.indexes.items()
            },
        }
    )


def publisher_command(
    target: Target, dist: Path, policy: Policy, index: LocalIndex, home: Path, **extra_env: str
) -> tuple[list[str], dict[str, str]]:
    """A child Python that publishes ``dist`` to ``target`` (PUBLISH_SCRIPT), and its environment:
    this PATH, this repo, ``home`` as HOME, ``home/tmp`` as TMPDIR (where its private staging
    folder goes), ``extra_env`` and the index's cu130 credentials."""
    (home / "tmp").mkdir(exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(REPO),
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        **extra_env,
        **index.credentials_env("cu130"),
    }
    return [sys.executable, "-c", PUBLISH_SCRIPT, target_json(target), str(dist), policy.path], env


def test_publisher_killed_between_two_files_then_rerun_completes(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    dist = tmp_path / "dist"
    wheels = _cu130_set(dist, policy)
    args, env = publisher_command(
        index.target(), dist / "cu130", policy, index, tmp_path, **{STOP_AFTER_ENV: "1"}
    )
    killed = proc.run(args, env=env, check=False, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert len(_index_state(index, "cu130")) == 1
    staging = tmp_path / "tmp"
    assert len(list(staging.glob(f"{STAGING_PREFIX}*"))) == 1  # kill -9 cleans nothing up

    del env[STOP_AFTER_ENV]
    resumed = proc.run(args, env=env, check=False, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "already on the index with the same sha256; skipped" in resumed.stderr
    assert "a staging folder left by an earlier run" in resumed.stderr
    assert list(staging.glob(f"{STAGING_PREFIX}*")) == []
    assert json.loads(resumed.stdout)["uploaded"] == [wheels[1].name]  # only what this run sent
    assert _index_state(index, "cu130") == _expected(wheels)
    _assert_no_secret(index, killed.stdout, killed.stderr, resumed.stdout, resumed.stderr)


def test_wrong_password_fails_without_showing_it(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    wheel = release_wheel(tmp_path / "dist", policy, "cu130-py312-x86_64")
    wrong = "not-the-password-" + "s3cr3t" * 3
    lines: list[str] = []
    with pytest.raises(StepFailed) as info:
        publish([wheel], index.target(), variant="cu130", policy=policy, log=lines.append,
                env={"WHEELWRIGHT_CU130_USERNAME": index.username, "WHEELWRIGHT_CU130_PASSWORD": wrong})  # fmt: skip
    message = str(info.value)
    assert "403" in message
    assert (
        "refused the upload credentials from WHEELWRIGHT_CU130_USERNAME/WHEELWRIGHT_CU130_PASSWORD" in message
    )
    for text in (message, *lines):
        assert wrong not in text
    assert _index_state(index, "cu130") == {}


def test_static_index_installs_with_pip_and_reads_back(
    tmp_path: Path, policy: Policy, install_venv: InstallVenv
) -> None:
    wheels = _cu130_set(tmp_path / "dist", policy)
    static_root = tmp_path / "whl" / "cu130"
    built = build_static_index(static_root, wheels[:1])
    assert (static_root / PROJECT / "index.json").exists()
    page = (static_root / PROJECT / "index.html").read_text(encoding="utf-8")
    assert "data-core-metadata=" in page and "data-dist-info-metadata=" in page

    result = install_venv.install(built.url, f"{PROJECT}==1.5.0+cu130")
    assert result.returncode == 0, result.stderr

    # publish() to a file:// target: the same checks, audit, plan and read-back, no twine
    target = Target("static", False, {"cu130": IndexTarget("cu130", built.url, built.url, None)})
    report = publish(wheels, target, variant="cu130", policy=policy, env={}, log=lambda line: None)
    assert report.skipped == (wheels[0].name,) and report.uploaded == (wheels[1].name,)
    assert remote_hashes(built.url, PROJECT) == _expected(wheels)
    assert {f.filename for f in read_project(built.url, PROJECT)} == {w.name for w in wheels}


def test_check_channels_against_a_channel_with_x86_64_only(
    local_index_server: LocalIndex, tiny_wheel_factory: TinyWheelFactory
) -> None:
    index = local_index_server
    channel = index.folder("cu126")
    for py in ("cp311", "cp312"):
        tiny_wheel_factory(channel, version="0.9.0", tag=f"{py}-{py}-manylinux_2_28_x86_64")
    # file names only matter here; the package is "wwdemo" standing in for torchao
    rule = ChannelRule(PROJECT, index.simple_url("cu126"))
    ok = check_channels([rule], "x86_64", python_tag="cp312")
    assert ok[0].usable and ok[0].arches_seen == ("x86_64",)
    with pytest.raises(CheckFailed) as info:
        check_channels([rule], "aarch64")
    assert "publishes no wheel usable on aarch64 (it has: x86_64)" in str(info.value)
    plain = ChannelRule(PROJECT, index.simple_url("cpu"), platforms=("aarch64",))
    tiny_wheel_factory(index.folder("cpu"), version="0.9.0", tag="cp312-cp312-manylinux_2_28_aarch64")
    cuda_x86 = ChannelRule(PROJECT, index.simple_url("cu126"), platforms=("x86_64",))
    assert [f.index_url for f in check_channels([cuda_x86, plain], "aarch64")] == [plain.index_url]


def test_detached_server_survives_its_starter_and_stops(tmp_path: Path) -> None:
    root = tmp_path / "rehearsal"
    started = start_detached(["cu130"], root)
    try:
        again = attach(root)
        assert again.port == started.port and again.password == started.password
        assert (root / "upload-password").stat().st_mode & 0o777 == 0o600
        assert remote_hashes(again.simple_url("cu130"), PROJECT) == {}
        with pytest.raises(StepFailed, match="already running there"):
            start_detached(["cu130"], root)
        assert attach(root).password == started.password  # the refused start changed nothing
    finally:
        assert stop(root)
    assert not (root / "server.json").exists()
    assert not stop(root)


class _Pep691Handler(http.server.BaseHTTPRequestHandler):
    """A PEP 691 server in miniature: JSON when asked for it, a redirect elsewhere for 'away'."""

    root: Path
    seen_accept: list[str]

    def do_GET(self) -> None:
        self.seen_accept.append(self.headers.get("Accept", ""))
        project = self.path.strip("/").split("/")[-1]
        if project == "away":
            self.send_response(302)
            self.send_header("Location", "http://127.0.0.2:9/simple/away/")
            self.end_headers()
            return
        page = self.root / project / "index.json"
        if not page.exists():
            self.send_error(404)
            return
        body = page.read_bytes()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_json_simple_api_is_preferred_and_foreign_redirects_refused(tmp_path: Path, policy: Policy) -> None:
    wheels = _cu130_set(tmp_path / "dist", policy)
    static = build_static_index(tmp_path / "static", wheels)
    seen_accept: list[str] = []

    class Handler(_Pep691Handler):
        root = static.root

    Handler.seen_accept = seen_accept
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/simple/"
        files = read_project(base, PROJECT)
        assert {f.filename: f.sha256 for f in files} == _expected(wheels)
        assert files[0].url.startswith(f"{base}files/")  # relative URLs resolved against the page
        assert seen_accept[0].startswith("application/vnd.pypi.simple.v1+json")
        assert remote_hashes(base, "nothing-here") == {}
        with pytest.raises(StepFailed, match="redirected to another server"):
            read_project(base, "away")
    finally:
        server.shutdown()
        server.server_close()


def test_a_release_prepares_every_variant_before_any_upload(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    dist = tmp_path / "dist"
    _cu130_set(dist, policy)
    release_wheel(dist, policy, "cpu-py312-x86_64", audit=False)  # never audited
    env = {**index.credentials_env("cu130"), **index.credentials_env("cpu")}
    quiet = lambda line: None  # noqa: E731
    with (
        publish_session(dist, env=env, log=quiet) as session,
        pytest.raises(CheckFailed, match=r"(?s)\(cpu\).*no audit record"),
    ):
        prepared = [
            prepare_publish(
                dist / v, index.target(), variant=v, policy=policy, session=session, env=env, log=quiet
            )
            for v in ("cu130", "cpu")
        ]
        for p in prepared:  # pragma: no cover (never reached)
            execute_publish(p, log=quiet)
    assert _index_state(index, "cu130") == {} and _index_state(index, "cpu") == {}


def test_pypi_resolves_through_pips_own_command_line() -> None:
    """`pypi` in rows.toml is pip's default index as `pip install --help` documents it (pip's
    configuration ignored), so no registry host name is written in wheelwright."""
    url = resolve_simple_url("pypi")
    assert url.startswith("https://") and url.endswith("/simple/"), url
    help_text = proc.run([sys.executable, "-m", "pip", "--isolated", "install", "--help"]).stdout
    assert url.rstrip("/") in " ".join(help_text.split())


def test_a_missing_pypiserver_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypiserver", None)  # what `import pypiserver` meets when absent
    with pytest.raises(ToolError, match=r"the local rehearsal index needs pypiserver.*pip install"):
        local_index(["cu130"], tmp_path / "index").__enter__()
    assert not (tmp_path / "index").exists()
