"""Forged and edited audit records: a record is a cache and a report, never a permission.

A wheel with a grafted libcudart (the audit's fixture fx_grafted, which the audit fails) is
brought to publish with every kind of record a person can write: its own failing record edited
to pass, a passing record written from scratch with the right sha256, and a good wheel's record
kept while the wheel is swapped for the grafted one (the record's sha256 rewritten to match).
Publish audits the bytes it would send again and refuses each, naming the finding; nothing is
uploaded. The same good wheel with its true record publishes (the case that must pass).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
from helpers.index import (
    PROJECT,
    fixture_wheel_path,
    publish_policy,
    release_wheel,
    row_of,
    write_audit_record,
    write_smoke_record,
)

from release import records
from release.audit.model import Expectation
from release.audit.report.record import write_record
from release.audit.run import audit_wheel
from release.cli import main
from release.core.errors import CheckFailed, InputError
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.publish.guards.plan import RULES
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex
from release.publish.step import publish_rows
from release.publish.upload import publish

pytestmark = pytest.mark.integration
ROW = "cu130-py312-x86_64"
GRAFTED = "a renamed copy of libcudart.so.13 (a repair grafted it into the wheel)"


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


def _real_audit(wheel: Path, policy: Policy, row: str = ROW) -> records.AuditRecord:
    """What `python -m release audit` writes for the wheel: the real audit's record."""
    exp = dataclasses.replace(Expectation.from_row(row_of(policy, row)), policy_sha256=policy.sha256)
    write_record(audit_wheel(wheel, exp))
    record = records.read(wheel, records.AuditRecord)
    assert record is not None
    return record


def _publish(wheel: Path, policy: Policy, index: LocalIndex, kind: type[Exception] = CheckFailed) -> str:
    """Publishing ``wheel`` is refused with ``kind`` (CheckFailed: exit 1; InputError: bad input,
    exit 2), nothing uploaded; the message."""
    with pytest.raises((CheckFailed, InputError)) as info:
        publish([wheel], index.target(), variant="cu130", policy=policy, env=index.credentials_env("cu130"),
                log=lambda line: None)  # fmt: skip
    assert type(info.value) is kind, info.value
    assert remote_hashes(index.simple_url("cu130"), PROJECT) == {}  # nothing uploaded
    assert str(info.value).endswith("nothing was uploaded")
    return str(info.value)


def _edit(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_a_failing_record_edited_to_pass_is_refused(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    wheel = release_wheel(tmp_path / "dist", policy, ROW, case="fx_grafted", audit=False)
    record = _real_audit(wheel, policy)
    assert not record.passed and any(GRAFTED in f["message"] for f in record.findings)
    path = records.record_path(wheel, "audit")

    _edit(path, passed=True)  # the one-field edit: the reader sees it contradict the findings
    message = _publish(wheel, policy, local_index_server, InputError)  # an edited record is bad input
    assert "'passed' contradicts its findings; the record was edited" in message
    assert "[rule: record-chain]" in message

    _edit(path, passed=True, findings=[])  # a careful edit: only the audit run again can tell
    message = _publish(wheel, policy, local_index_server)
    assert f"{wheel.name}: publish ran the audit again on the exact bytes it would upload" in message
    assert GRAFTED in message
    assert "Its audit record says it passed: the record was edited, forged" in message
    assert "[rule: re-audit]" in message


def test_a_record_written_from_scratch_with_the_right_sha256_is_refused(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    wheel = release_wheel(tmp_path / "dist", policy, ROW, case="fx_grafted", audit=False)
    write_audit_record(wheel, row=ROW, variant="cu130", policy_sha256=policy.sha256)  # "passed", no findings
    assert records.read(wheel, records.AuditRecord).sha256 == sha256_file(wheel)  # type: ignore[union-attr]
    message = _publish(wheel, policy, local_index_server)
    assert GRAFTED in message and "[rule: re-audit]" in message


def test_a_swapped_wheel_with_its_record_rewritten_is_refused_and_the_true_one_publishes(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    dist = tmp_path / "dist"
    good = release_wheel(dist, policy, ROW, audit=False)
    assert _real_audit(good, policy).passed
    true_bytes, true_record = (
        good.read_bytes(),
        records.record_path(good, "audit").read_text(encoding="utf-8"),
    )
    bad = release_wheel(tmp_path / "other", policy, ROW, case="fx_grafted", audit=False)
    assert bad.name == good.name
    good.write_bytes(bad.read_bytes())  # the swap: same name, the grafted bytes
    _edit(records.record_path(good, "audit"), sha256=sha256_file(good))  # the record follows the swap
    message = _publish(good, policy, local_index_server)
    assert GRAFTED in message and f"(sha256 {sha256_file(good)})" in message

    good.write_bytes(true_bytes)  # the wheel the audit passed, with its true record: published
    records.record_path(good, "audit").write_text(true_record, encoding="utf-8")
    report = publish([good], local_index_server.target(), variant="cu130", policy=policy,
                     env=local_index_server.credentials_env("cu130"), log=lambda line: None)  # fmt: skip
    assert report.uploaded == (good.name,)
    assert remote_hashes(local_index_server.simple_url("cu130"), PROJECT) == {good.name: sha256_file(good)}


def test_the_release_command_refuses_a_forged_record_with_exit_1(
    tmp_path: Path,
    local_index_server: LocalIndex,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m release publish --target NAME`: every row ready by its records, one forged."""
    index = local_index_server
    targets = "\n[target.loopback]\nrehearsal = true\n" + "".join(
        f'index.{v} = {{ upload_url = "{index.upload_url(v)}", simple_url = "{index.simple_url(v)}" }}\n'
        for v in ("cpu", "cu130")
    )
    policy = publish_policy(tmp_path / "policy", targets=targets, pythons=("3.12",))
    dist = tmp_path / "dist"
    cpu = release_wheel(dist, policy, "cpu-py312-x86_64")
    write_smoke_record(cpu, row_of(policy, "cpu-py312-x86_64"), policy_sha256=policy.sha256)
    forged = release_wheel(dist, policy, ROW, case="fx_grafted")  # a passing record, written by hand
    write_smoke_record(forged, row_of(policy, ROW), policy_sha256=policy.sha256)
    for name, value in {**index.credentials_env("cpu"), **index.credentials_env("cu130")}.items():
        monkeypatch.setenv(name, value)
    assert main(["publish", "--target", "loopback", "--policy", policy.path, "--dist", str(dist)]) == 1
    err = capsys.readouterr().err
    assert f"{forged.name}: publish ran the audit again" in err and GRAFTED in err
    assert {f for v in ("cpu", "cu130") for f in remote_hashes(index.simple_url(v), PROJECT)} == set()
    assert not list(dist.glob("*.release.json"))  # no manifest for a release that was refused
    with pytest.raises(CheckFailed, match="publish ran the audit again"):
        publish_rows(policy, (row_of(policy, "cpu-py312-x86_64"), row_of(policy, ROW)), target_name="loopback",
                     dist=dist, env=dict(index.credentials_env("cu130"), **index.credentials_env("cpu")))  # fmt: skip


def test_every_rule_a_refusal_names_is_documented() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "publishing.md").read_text(encoding="utf-8")
    assert re.findall(r"^\| `([a-z-]+)` \|", text, flags=re.MULTILINE) == list(RULES)


def test_a_file_that_is_no_wheel_with_a_passing_record_is_refused(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    name = f"{PROJECT}-1.5.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    (tmp_path / "dist").mkdir()
    wheel = Path(shutil.copy(fixture_wheel_path("fx_not_a_zip"), tmp_path / "dist" / name))
    write_audit_record(wheel, row=ROW, variant="cu130", policy_sha256=policy.sha256)
    message = _publish(wheel, policy, local_index_server)
    assert f"{name}: the audit cannot read the bytes publish would upload" in message
    assert "[rule: re-audit]" in message


def test_an_edited_record_is_bad_input_exit_2_with_its_rule_through_the_command(
    tmp_path: Path,
    local_index_server: LocalIndex,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`python -m release publish`: a record the one reader refuses (edited: its verdict contradicts
    its findings) is bad input, exit 2, its line tagged with its rule; the same release with the
    record the audit wrote publishes (exit 0)."""
    index = local_index_server
    targets = "\n[target.loopback]\nrehearsal = true\n" + "".join(
        f'index.{v} = {{ upload_url = "{index.upload_url(v)}", simple_url = "{index.simple_url(v)}" }}\n'
        for v in ("cpu", "cu130")
    )
    policy = publish_policy(tmp_path / "policy", targets=targets, pythons=("3.12",))
    dist = tmp_path / "dist"
    for row in ("cpu-py312-x86_64", ROW):
        wheel = release_wheel(dist, policy, row, audit=False)
        assert _real_audit(wheel, policy, row).passed
        write_smoke_record(wheel, row_of(policy, row), policy_sha256=policy.sha256)
    (cu130,) = (dist / "cu130").glob("*.whl")
    path = records.record_path(cu130, "audit")
    true_record = path.read_text(encoding="utf-8")
    _edit(path, findings=[{"check": "loader", "ok": False, "message": "x", "library": None, "details": {}}])
    for name, value in {**index.credentials_env("cpu"), **index.credentials_env("cu130")}.items():
        monkeypatch.setenv(name, value)
    argv = ["publish", "--target", "loopback", "--policy", policy.path, "--dist", str(dist)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    line = next(x for x in err.splitlines() if "not a valid audit record" in x)
    assert f"{cu130.name}.audit.json" in line and "'passed' contradicts its findings" in line
    assert line.endswith("[rule: record-chain]")
    assert {f for v in ("cpu", "cu130") for f in remote_hashes(index.simple_url(v), PROJECT)} == set()

    path.write_text(true_record, encoding="utf-8")  # the record the audit wrote: published
    assert main(argv) == 0
    assert set(remote_hashes(index.simple_url("cu130"), PROJECT)) == {cu130.name}
