"""The release-level publish guards (release/publish/step.py) against a real local index:
every refusal uploads nothing, and each guard has a case that must fail it and one that passes."""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.index import PROJECT, probe_report, publish_policy, release_wheel, row_of, write_smoke_record

from release import records
from release.cli import main
from release.core.errors import CheckFailed, InputError, SelectionError
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.publish.guards.plan import PublishReport
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex, local_index
from release.publish.step import publish_rows

pytestmark = pytest.mark.integration


def _targets(cpu: tuple[str, str], cu130: tuple[str, str]) -> str:
    """``production`` (https, as the loader requires; unreachable) and ``loopback``, a rehearsal
    target on the given (upload, simple) URLs."""
    return f"""
[target.production]
rehearsal = false
index.cpu = {{ upload_url = "https://wheels.example.invalid/cpu/", simple_url = "https://wheels.example.invalid/cpu/simple/" }}
index.cu130 = {{ upload_url = "https://wheels.example.invalid/cu130/", simple_url = "https://wheels.example.invalid/cu130/simple/" }}
[target.loopback]
rehearsal = true
index.cpu = {{ upload_url = "{cpu[0]}", simple_url = "{cpu[1]}" }}
index.cu130 = {{ upload_url = "{cu130[0]}", simple_url = "{cu130[1]}" }}
"""


def _urls(index: LocalIndex, variant: str) -> tuple[str, str]:
    return index.upload_url(variant), index.simple_url(variant)


def _production(policy: Policy) -> Policy:
    """The policy with its production target standing on the loopback indexes. The loader lets a
    non-rehearsal target use https only (tests/unit/test_policy_targets.py); publish's guards
    for such a target are what these tests exercise, against a real local index."""
    loopback = policy.targets["loopback"]
    production = dataclasses.replace(loopback, name="production", rehearsal=False)
    return dataclasses.replace(policy, targets={**policy.targets, "production": production})


@pytest.fixture
def index(tmp_path: Path) -> Iterator[LocalIndex]:
    with local_index(("cpu", "cu130"), tmp_path / "index") as idx:
        yield idx


def _setup(
    tmp_path: Path, index: LocalIndex, *, gpu_ran: bool, cu130: tuple[str, str] | None = None
) -> tuple[Policy, tuple[Row, ...], Path]:
    """One real wheel per row (cpu, cu130; Python 3.12) with its audit and smoke records."""
    targets = _targets(_urls(index, "cpu"), cu130 or _urls(index, "cu130"))
    policy = publish_policy(tmp_path / "policy", targets=targets, pythons=("3.12",))
    dist = tmp_path / "dist"
    for row in expand(policy):
        wheel = release_wheel(dist, policy, row.id, version="0.3.0")
        write_smoke_record(wheel, row, policy_sha256=policy.sha256, gpu=gpu_ran and row.is_cuda)
    return policy, expand(policy), dist


def _on_index(index: LocalIndex) -> set[str]:
    return {f for v in ("cpu", "cu130") for f in remote_hashes(index.simple_url(v), PROJECT)}


def _env(index: LocalIndex) -> dict[str, str]:
    return {**index.credentials_env("cpu"), **index.credentials_env("cu130"), "PATH": "/usr/bin:/bin"}


def _production_release(
    tmp_path: Path, index: LocalIndex, *, gpu_ran: bool
) -> tuple[Policy, tuple[Row, ...], Path]:
    """_setup's release, with its production target on the loopback indexes (_production)."""
    policy, rows, dist = _setup(tmp_path, index, gpu_ran=gpu_ran)
    return _production(policy), rows, dist


def _to_production(
    policy: Policy, rows: tuple[Row, ...], dist: Path, index: LocalIndex, **kwargs: Any
) -> list[PublishReport]:
    return publish_rows(policy, rows, target_name="production", dist=dist, env=_env(index), **kwargs)


def _refused(
    policy: Policy,
    rows: tuple[Row, ...],
    dist: Path,
    index: LocalIndex,
    match: str | None = None,
    kind: type[Exception] = CheckFailed,
) -> str:
    """Publishing to production fails a check (or with ``kind``; its message matching ``match``)
    and uploads nothing; the message."""
    with pytest.raises(kind, match=match) as info:
        _to_production(policy, rows, dist, index)
    assert _on_index(index) == set()
    return str(info.value)


def test_production_needs_a_gpu_run_per_cuda_variant(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=False)
    _refused(policy, rows, dist, index, "no wheel of cu130 was smoke-tested on a GPU")


def test_production_publishes_the_whole_verified_release(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=True)
    with pytest.raises(CheckFailed, match="not on the index yet"):
        _to_production(policy, rows, dist, index, mode="verify")
    reports = _to_production(policy, rows, dist, index)
    assert sorted(r.variant for r in reports) == ["cpu", "cu130"]
    assert len(_on_index(index)) == 2
    # verify mode now passes: every audited file is on its index with its sha256
    assert _to_production(policy, rows, dist, index, mode="verify") == []


@pytest.mark.parametrize("kind", ["audit", "smoke"])
def test_a_row_without_its_audit_or_smoke_record_is_refused(
    tmp_path: Path, index: LocalIndex, kind: str
) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=True)
    for record in (dist / "cu130").glob(f"*.{kind}.json"):
        record.unlink()
    _refused(policy, rows, dist, index, rf"(?s)1 of 2 row\(s\) are not ready.*no {kind} record")


def test_a_wheel_changed_after_its_smoke_is_refused(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=True)
    # rebuilt (other bytes, same name) and audited again, but not smoke-tested again
    wheel = release_wheel(dist, policy, "cu130-py312-x86_64", version="0.3.0", extra={"wwdemo/x": b"x"})
    message = _refused(policy, rows, dist, index, r"changed since it was smoke-tested")
    assert (
        f"{wheel.name}: changed since it was smoke-tested: its bytes are not the ones smoke-tested" in message
    )


def test_two_wheels_for_one_row_refused(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=True)
    release_wheel(dist, policy, "cu130-py312-x86_64", version="0.2.0")
    _refused(
        policy, rows, dist, index, "2 wheels for cu130-py312-x86_64", kind=InputError
    )  # bad input, as in audit


def test_production_refuses_a_selection_and_unknown_skip_variant(tmp_path: Path, index: LocalIndex) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=True)
    with pytest.raises(SelectionError, match="only takes the whole release"):
        publish_rows(policy, rows[:1], target_name="production", dist=dist, env=_env(index))
    with pytest.raises(InputError, match="--skip-variant cu999"):
        publish_rows(
            policy, rows, target_name="production", dist=dist, env=_env(index), skip_variants=["cu999"]
        )
    assert _on_index(index) == set()


# --- one exit code per rule, through every layer --------------------------------------------


def test_a_partial_selection_to_production_exits_2_through_publish_and_release(
    tmp_path: Path, index: LocalIndex, capsys: pytest.CaptureFixture[str]
) -> None:
    policy, _rows, dist = _setup(tmp_path, index, gpu_ran=True)
    common = ["--policy", policy.path, "--dist", str(dist), "cu130-py312-x86_64"]
    for argv in (
        ["publish", "--target", "production", *common],
        ["release", "--target", "production", "--allow-dirty", *common],
        ["release", "--target", "production", "--publish-only", *common],
    ):
        assert main(argv) == 2, argv
        assert "it only takes the whole release (2 rows), not a selection of 1" in capsys.readouterr().err
    # the same selection to a rehearsal target passes every guard (nothing uploaded in --check-only)
    assert main(["publish", "--target", "loopback", "--check-only", *common]) == 0
    assert _on_index(index) == set()


class _ForgetfulIndex(http.server.BaseHTTPRequestHandler):
    """An index that accepts an upload, then lists a file this release never uploaded beside it."""

    files: dict[str, str]

    def do_GET(self) -> None:
        if self.path.rstrip("/") != f"/simple/{PROJECT}":
            self.send_error(404)
            return
        body = json.dumps(
            {
                "meta": {"api-version": "1.1"},
                "name": PROJECT,
                "files": [
                    {"filename": n, "url": f"/files/{n}", "hashes": {"sha256": h}}
                    for n, h in self.files.items()
                ],
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0"))).decode("latin-1")
        name = re.search(r'filename="([^"]+)"', body)
        sha = re.search(r'name="sha256_digest"\r\n\r\n([0-9a-f]{64})', body)
        assert name and sha, body[:500]
        self.files[name[1]] = sha[1]
        self.files[f"{PROJECT}-0.3.0+cu130-cp313-cp313-manylinux_2_28_x86_64.whl"] = "0" * 64
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_a_read_back_check_failure_keeps_exit_code_1(
    tmp_path: Path, index: LocalIndex, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Publish used to wrap every error of the upload step as "step failed" (4)."""

    class Handler(_ForgetfulIndex):
        files: dict[str, str] = {}  # noqa: RUF012 (one index per test)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        policy, rows, dist = _setup(tmp_path, index, gpu_ran=True, cu130=(f"{base}/", f"{base}/simple/"))
        with pytest.raises(CheckFailed, match="does not hold exactly the audited set") as info:
            publish_rows(_production(policy), rows, target_name="production", dist=dist, env=_env(index))
        assert "variants already published completely: cpu" in str(info.value)
        for name, value in _env(index).items():
            monkeypatch.setenv(name, value)
        Handler.files.clear()
        argv = ["publish", "--target", "loopback", "--policy", policy.path, "--dist", str(dist)]
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert "on the index for this release's version but not in the audited set" in err
        assert "variants already published completely: cpu" in err
    finally:
        server.shutdown()
        server.server_close()


# --- the production GPU gate: evidence, not a record's word ---------------------------------


def _edit(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _ran(data: dict[str, Any]) -> None:
    data.update(executed=True, skipped_reason=None)


def _ran_on_a_gpu(data: dict[str, Any]) -> None:
    _ran(data)
    data["evidence"]["probe"].update(
        gpus=1, gpu_name="NVIDIA H200", driver_version="580.159.04", run_check=True
    )


def _ran_no_evidence(data: dict[str, Any]) -> None:
    _ran(data)
    data["evidence"] = None


def _ran_version_2(data: dict[str, Any]) -> None:
    _ran(data)
    data["version"] = 2
    del data["evidence"]


# an edit the one record reader sees is bad input (exit 2, rule record-chain); one it cannot see
# leaves a readable record that the GPU gate refuses (exit 1, rule gpu-evidence)
EDITS: dict[str, tuple[Callable[[dict[str, Any]], None], str, type[Exception]]] = {
    "executed alone": (lambda d: d.update(executed=True), "'executed' contradicts 'skipped_reason'", InputError),
    "executed, no skipped_reason": (_ran, "'executed' contradicts the probe's report in 'evidence'", InputError),
    "and a GPU written into the probe's report": (_ran_on_a_gpu, "'evidence' does not match its digest", InputError),
    "and the evidence dropped": (_ran_no_evidence, "carries no evidence of the run", CheckFailed),
    "as a version 2 record (no evidence)": (_ran_version_2, "carries no evidence of the run", CheckFailed),
}  # fmt: skip


@pytest.mark.parametrize("edit", list(EDITS))
def test_a_gpu_gate_satisfied_only_by_an_edited_smoke_record_is_refused(
    tmp_path: Path, index: LocalIndex, edit: str
) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=False)
    (wheel,) = (dist / "cu130").glob("*.whl")
    change, expected, kind = EDITS[edit]
    _edit(records.record_path(wheel, "smoke"), change)
    message = _refused(policy, rows, dist, index, kind=kind)
    assert expected in message
    rule = "[rule: record-chain]" if kind is InputError else "[rule: gpu-evidence]"
    assert rule in message


def test_a_gpu_run_whose_probe_shows_a_failure_is_refused_even_with_its_verdict_edited(
    tmp_path: Path, index: LocalIndex
) -> None:
    policy, rows, dist = _production_release(tmp_path, index, gpu_ran=True)
    (wheel,) = (dist / "cu130").glob("*.whl")
    row = row_of(policy, "cu130-py312-x86_64")
    probe = {**probe_report(row, gpu=True), "check": {"max_abs_diff": 0.5, "device": "cuda:0"}}
    at = "2026-01-02T00:00:00Z"
    sha = records.read(wheel, records.AuditRecord).sha256  # type: ignore[union-attr]
    honest = records.SmokeRecord(
        wheel=wheel.name, sha256=sha, policy_sha256=policy.sha256, row=row.id, variant="cu130", passed=True,
        executed=True, skipped_reason=None, libcudart=f"{probe['site']}/nvidia/cu13/lib/libcudart.so.13",
        lines=("✓ installed and imported in a fresh Python 3.12 venv",
               f"✓ libcudart came from the environment's CUDA package: {probe['site']}/nvidia/cu13/lib/libcudart.so.13",
               "✓ check computation ran on cuda:0: max |diff| vs CPU reference = 0"),  # the ✗ line, rewritten
        check=probe["check"], at=at, evidence=records.smoke_evidence(probe, sha256=sha, at=at),
    )  # fmt: skip
    records.write(wheel, honest)
    message = _refused(policy, rows, dist, index)
    assert "the probe's report does not show a passing GPU run: ✗ the check computation returned" in message
    assert "[rule: gpu-evidence]" in message
    # the same release with the GPU run's true record passes the gate and publishes
    write_smoke_record(wheel, row, policy_sha256=policy.sha256, gpu=True)
    assert len(_to_production(policy, rows, dist, index)) == 2
