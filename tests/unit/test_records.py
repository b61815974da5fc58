"""The record store (release/records.py): one wheel->row rule, typed records through one writer
and one validating reader, and the chain each step checks. Files only; no process is started.
The same chain through the real steps is tests/integration/test_record_chain.py."""

from __future__ import annotations

import builtins
import dataclasses
import datetime
import hashlib
import json
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Optional

import pytest
from helpers.rows import rows_by_id

from release import records
from release.core.errors import CheckFailed, InputError, SelectionError, StepFailed, WheelwrightError
from release.pipeline import RowReport, exit_code
from release.policy.load import load_policy
from release.policy.matrix import Row
from release.policy.model import Policy
from release.publish.guards.reverify import gpu_evidence_problem
from release.publish.step import check_selection, with_context
from release.smoke.evaluate import evaluate

ROOT = Path(__file__).resolve().parents[2]
PSHA = "a" * 64
CU130 = "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
CPU = "tinyaxpy-0.3.0-cp312-cp312-manylinux_2_28_x86_64.whl"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(ROOT / "rows.toml")


@pytest.fixture(scope="module")
def rows(policy: Policy) -> dict[str, Row]:
    return rows_by_id(policy)


def _wheel(folder: Path, name: str = CU130, body: bytes = b"wheel bytes") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(body)
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _identity(wheel: Path, row: str = "cu130-py312-x86_64") -> dict[str, Any]:
    """The fields every record of ``wheel`` (a cu130 row's) starts with."""
    return {"wheel": wheel.name, "sha256": _sha(wheel), "policy_sha256": PSHA, "row": row, "variant": "cu130"}


def build_record(wheel: Path, row: str = "cu130-py312-x86_64", **over: Any) -> records.BuildRecord:
    fields: dict[str, Any] = {
        **_identity(wheel, row),
        "backend": "host",
        "python": "3.12.9",
        "platform_tag": "manylinux_2_28_x86_64",
        "toolchain": {"version": "13.0"},
        "torch_cuda_arch_list": "8.0;9.0+PTX",
        "cmake_cuda_architectures": "80-real;90-real;90-virtual",
        "kernel_cache": None,
        "policy": "rows.toml",
        "built_at": "2026-01-01T00:00:00Z",
    }
    fields.update(over)
    return records.BuildRecord(**fields)


FINDING_OK = {"check": "libraries", "ok": True, "message": "fine", "library": None, "details": {}}
FINDING_BAD = {"check": "device_code", "ok": False, "message": "no sm_90", "library": "k.so", "details": {}}


def audit_record(wheel: Path, *, passed: bool = True, **over: Any) -> records.AuditRecord:
    fields: dict[str, Any] = {
        **_identity(wheel),
        "passed": passed,
        "findings": (FINDING_OK,) if passed else (FINDING_OK, FINDING_BAD),
    }
    fields.update(over)
    return records.AuditRecord(**fields)


def smoke_record(
    wheel: Path, *, passed: bool = True, executed: bool = False, **over: Any
) -> records.SmokeRecord:
    fields: dict[str, Any] = {
        **_identity(wheel),
        "passed": passed,
        "executed": executed,
        "skipped_reason": None if executed else "no CUDA driver",
        "libcudart": "/v/site-packages/nvidia/cu13/lib/libcudart.so.13",
        "lines": ("✓ imported",) if passed else ("✓ imported", "✗ libcudart came from /usr/lib"),
        "check": None,
        "at": "2026-01-01T00:00:00Z",
    }
    fields.update(over)
    return records.SmokeRecord(**fields)


# --- which row is this wheel: one rule ------------------------------------------------


def test_one_rule_says_which_row_a_wheel_is(rows: dict[str, Row], policy: Policy) -> None:
    row = rows["cu130-py312-x86_64"]
    assert records.row_matches_wheel(row, CU130)
    assert records.row_matches_wheel(
        row, CU130.replace("manylinux_2_28", "manylinux_2_34")
    )  # audit judges the tag
    assert not records.row_matches_wheel(row, CPU)  # no local label: the CPU row
    assert not records.row_matches_wheel(row, CU130.replace("+cu130", "+cu126"))
    assert not records.row_matches_wheel(row, CU130.replace("cp312-cp312", "cp313-cp313"))
    assert not records.row_matches_wheel(row, CU130.replace("x86_64", "aarch64"))
    assert not records.row_matches_wheel(row, "not a wheel.whl")
    every = list(rows.values())
    assert records.row_for_wheel(CU130, every, policy_path=policy.path) is row
    assert records.row_for_wheel(CPU, every, policy_path=policy.path) is rows["cpu-py312-x86_64"]
    with pytest.raises(InputError, match=r"no row of .* has variant 'cu999'"):
        records.row_for_wheel(CU130.replace("+cu130", "+cu999"), every, policy_path=policy.path)
    with pytest.raises(InputError, match=r"no row of .* is variant cu130 .*pass --row or --variant"):
        records.row_for_wheel(CU130.replace("cp312-cp312", "cp39-cp39"), every, policy_path=policy.path)
    assert records.wheel_variant(CU130) == "cu130" and records.wheel_variant(CPU) == "cpu"
    with pytest.raises(InputError, match="not a wheel file name"):
        records.wheel_variant("x.whl")


def test_the_wheel_of_a_row_in_dist(tmp_path: Path, rows: dict[str, Row]) -> None:
    row = rows["cu130-py312-x86_64"]
    with pytest.raises(InputError, match=r"no wheel for cu130-py312-x86_64 .*python -m release build"):
        records.the_wheel(tmp_path, row, "audit")
    wheel = _wheel(tmp_path / "cu130")
    _wheel(tmp_path / "cu130", CU130.replace("cp312-cp312", "cp313-cp313"))  # another row's
    assert records.the_wheel(tmp_path, row, "audit") == wheel
    _wheel(tmp_path / "cu130", CU130.replace("0.3.0", "0.2.0"))
    with pytest.raises(InputError, match=r"2 wheels for cu130-py312-x86_64 .*remove the stale ones"):
        records.the_wheel(tmp_path, row, "audit")


def test_the_policy_sha256_is_the_files(policy: Policy) -> None:
    assert records.policy_sha256(policy) == hashlib.sha256((ROOT / "rows.toml").read_bytes()).hexdigest()


# --- one writer, one validating reader --------------------------------------------------


@pytest.mark.parametrize("make", [build_record, audit_record, smoke_record])
def test_each_record_round_trips_through_the_one_writer_and_reader(tmp_path: Path, make: Any) -> None:
    wheel = _wheel(tmp_path)
    record = make(wheel)
    path = records.write(wheel, record)
    assert path == tmp_path / f"{CU130}.{record.KIND}.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    assert data["version"] == record.VERSION and data["wheel"] == CU130 and data["sha256"] == _sha(wheel)
    assert records.read(wheel, type(record)) == record
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([CU130, path.name])  # no temporary left
    records.remove(wheel, record.KIND)
    assert records.read(wheel, type(record)) is None


def _raw(wheel: Path, kind: records.Kind, data: object) -> None:
    records.record_path(wheel, kind).write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: [], "not a JSON object"),
        (lambda d: {**d, "version": 1}, "version 1; this wheelwright reads version 3"),
        (lambda d: {k: v for k, v in d.items() if k != "at"}, "missing keys ['at']"),
        (lambda d: {**d, "gpu": "H100"}, "unknown keys ['gpu']"),
        (lambda d: {**d, "passed": 1}, "'passed' is 1"),
        (lambda d: {**d, "sha256": "A" * 64}, "'sha256' is not a sha256"),
        (lambda d: {**d, "lines": ["ok", 3]}, "'lines' holds a non-string"),
        (lambda d: {**d, "passed": True, "lines": ["✗ broken"]}, "'passed' contradicts its lines"),
        (lambda d: {**d, "executed": True}, "'executed' contradicts 'skipped_reason'"),
    ],
)
def test_the_reader_refuses_malformed_and_edited_smoke_records(
    tmp_path: Path, edit: Any, expected: str
) -> None:
    wheel = _wheel(tmp_path)
    _raw(wheel, "smoke", edit(records.to_json(smoke_record(wheel))))
    with pytest.raises(InputError) as info:
        records.read(wheel, records.SmokeRecord)
    message = str(info.value)
    assert expected in message and f"{CU130}.smoke.json" in message and "run the smoke step again" in message


@pytest.mark.parametrize(
    ("kind", "make", "edit", "expected"),
    [
        ("build", build_record, {"toolchain": "nvcc"}, "'toolchain' is 'nvcc'"),
        ("build", build_record, {"torch_cuda_arch_list": 8.0}, "'torch_cuda_arch_list' is 8.0"),
        ("build", build_record, {"policy_sha256": None}, "'policy_sha256' is None"),
        ("build", build_record, {"built_at": None}, "'built_at' is None"),
        ("audit", audit_record, {"policy_sha256": "abc"}, "'policy_sha256' is not a sha256"),
        ("audit", audit_record, {"findings": [{"check": "x"}]}, "findings[0] is not a finding"),
        ("audit", audit_record, {"passed": False}, "'passed' contradicts its findings"),
        ("smoke", smoke_record, {"evidence": []}, "'evidence' is []"),
    ],
)
def test_every_field_is_read_by_its_declared_type(
    tmp_path: Path, kind: records.Kind, make: Any, edit: dict[str, Any], expected: str
) -> None:
    wheel = _wheel(tmp_path)
    record = make(wheel)
    good = json.loads(json.dumps(records.to_json(record)))
    assert records.from_json(good, type(record), "x") == record
    _raw(wheel, kind, {**good, **edit})
    with pytest.raises(InputError) as info:
        records.read(wheel, type(record))
    assert expected in str(info.value) and f"{CU130}.{kind}.json" in str(info.value)


def test_an_audit_record_may_name_no_policy_or_row(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    record = audit_record(wheel, policy_sha256=None, row=None)
    data = json.loads(json.dumps(records.to_json(record)))
    assert records.from_json(data, records.AuditRecord, "x") == record


def test_every_record_field_has_a_reader() -> None:
    for cls in (records.BuildRecord, records.AuditRecord, records.SmokeRecord):
        readers = dict(records._readers(cls))
        assert list(readers) == [field.name for field in dataclasses.fields(cls)], cls
        assert records._kind_readers(cls.KIND) == records._readers(cls)
        assert records._kind_readers(cls.KIND) is records._kind_readers(cls.KIND)  # resolved once
    assert dict(records._readers(records.AuditRecord))["policy_sha256"] is records._SHA_READERS[str | None]
    assert dict(records._readers(records.BuildRecord))["policy_sha256"] is records._Fields.sha
    assert dict(records._readers(records.SmokeRecord))["evidence"] is records._Fields.mapping


Text = str
MaybeText = Optional[str]  # noqa: UP045 - the spelling is the point
Findings = tuple[Mapping[str, Any], ...]
Texts = tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _Plain:
    sha256: str
    policy_sha256: str | None
    row: str | None
    passed: bool
    findings: tuple[Mapping[str, Any], ...]
    lines: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class _Aliased:  # the same types as _Plain, spelled otherwise
    sha256: Text
    policy_sha256: MaybeText
    row: None | str  # noqa: RUF036 - the spelling is the point
    passed: builtins.bool
    findings: Findings
    lines: Texts


@dataclasses.dataclass(frozen=True)
class _Foreign:
    row: typing.Mapping[str, Any] | None  # not collections.abc's Mapping: no reader


def test_a_field_is_read_by_the_type_it_names_not_its_spelling() -> None:
    """An alias or another spelling of a field's type gets the reader of the type it names; a type
    with no reader is refused naming the class and field (the annotation text once picked readers:
    ``Optional[str]`` on policy_sha256 read as a required sha256, an alias had no reader)."""
    assert records._readers(_Aliased) == records._readers(_Plain)
    assert dict(records._readers(_Aliased))["policy_sha256"] is records._SHA_READERS[str | None]
    by_text = {"str", "str | None", "bool", "Mapping[str, Any] | None", "tuple[str, ...]", "Any"}
    assert not {str(f.type) for f in dataclasses.fields(_Aliased)} & by_text  # what text keys would miss
    with pytest.raises(TypeError, match=r"_Foreign\.row: no record reader"):
        records._readers(_Foreign)


def _probe(gpu: bool) -> dict[str, Any]:
    site = "/v/lib/python3.12/site-packages"
    return {"python": "3.12", "site": site, "import": "ok", "loaded": [f"{site}/nvidia/cu13/lib/libcudart.so.13"],
            "gpus": 1 if gpu else None, "gpu_name": "NVIDIA H200" if gpu else None,
            "driver_version": "580.159.04" if gpu else None, "no_gpu_reason": None if gpu else "no CUDA driver",
            "run_check": gpu, **({"check": {"max_abs_diff": 0.0, "device": "cuda:0"}} if gpu else {})}  # fmt: skip


def _gpu_record(
    wheel: Path, rows: dict[str, Row], *, gpu: bool = True, at: str = "2026-01-02T00:00:00Z", **probe: Any
) -> records.SmokeRecord:
    """The record the smoke step writes for the probe's report (its verdict by the smoke rules)."""
    report = {**_probe(gpu), **probe}
    outcome = evaluate(rows["cu130-py312-x86_64"], report)
    evidence = records.smoke_evidence(report, sha256=_sha(wheel), at=at)
    return smoke_record(wheel, executed=outcome.executed, passed=outcome.passed, lines=outcome.lines,
                        libcudart=outcome.libcudart, skipped_reason=outcome.skipped_reason, at=at, evidence=evidence)  # fmt: skip


def test_smoke_evidence_is_bound_to_the_verdict_the_wheel_and_the_time(
    tmp_path: Path, rows: dict[str, Row]
) -> None:
    wheel = _wheel(tmp_path)
    record = _gpu_record(wheel, rows)
    records.write(wheel, record)
    assert records.read(wheel, records.SmokeRecord) == record
    data = records.to_json(record)
    v2 = {k: v for k, v in data.items() if k != "evidence"} | {"version": 2}
    _raw(wheel, "smoke", v2)  # an older record reads as one without evidence
    assert records.read(wheel, records.SmokeRecord) == dataclasses.replace(record, evidence=None)
    for edit, expected in (
        ({"at": "2026-01-03T00:00:00Z"}, "'evidence' is of another wheel or another run"),
        (
            {"evidence": {**data["evidence"], "wheel_sha256": "0" * 64}},
            "'evidence' does not match its digest",
        ),
        ({"evidence": {**data["evidence"], "extra": 1}}, "'evidence' has keys"),
        ({"executed": False, "skipped_reason": "no GPU"}, "'executed' contradicts the probe's report"),
    ):
        _raw(wheel, "smoke", {**data, **edit})
        with pytest.raises(InputError, match=re.escape(expected)):
            records.read(wheel, records.SmokeRecord)


def test_the_gpu_gate_needs_a_gpu_run_in_the_evidence_and_a_sane_time(
    tmp_path: Path, rows: dict[str, Row]
) -> None:
    wheel, row = _wheel(tmp_path), rows["cu130-py312-x86_64"]
    now = datetime.datetime(2026, 1, 2, 1, 0, tzinfo=datetime.UTC)
    assert gpu_evidence_problem(row, _gpu_record(wheel, rows), now=now) is None
    assert (
        gpu_evidence_problem(row, _gpu_record(wheel, rows), now=now, built_at="2026-01-01T00:00:00Z") is None
    )
    cases: list[tuple[records.SmokeRecord, dict[str, Any], str]] = [
        (_gpu_record(wheel, rows, gpu=False), {}, "was not executed on a GPU (no CUDA driver)"),
        (dataclasses.replace(_gpu_record(wheel, rows), evidence=None), {}, "carries no evidence of the run"),
        (_gpu_record(wheel, rows, gpu_name=""), {}, "the probe's report names no GPU and driver"),
        (_gpu_record(wheel, rows, gpus=True), {}, "names no GPU and driver (gpus=True"),
        (_gpu_record(wheel, rows, check={"max_abs_diff": 1.0}), {}, "does not show a passing GPU run: ✗"),
        (
            dataclasses.replace(_gpu_record(wheel, rows), lines=("✓ imported",)),
            {},
            "is not the one its probe's report gives",
        ),
        (_gpu_record(wheel, rows, at="2026-01-02T02:00:00Z"), {}, "is in the future"),
        (_gpu_record(wheel, rows, at="yesterday"), {}, "is not a UTC time"),
        (_gpu_record(wheel, rows), {"built_at": "2026-01-02T00:30:00Z"}, "before the wheel was built"),
    ]
    for record, extra, expected in cases:
        assert expected in str(gpu_evidence_problem(row, record, now=now, **extra)), expected


def test_an_audit_record_edited_to_pass_is_refused(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    edited = {**records.to_json(audit_record(wheel, passed=False)), "passed": True}
    _raw(wheel, "audit", edited)
    with pytest.raises(InputError, match="'passed' contradicts its findings; the record was edited"):
        records.read(wheel, records.AuditRecord)
    records.record_path(wheel, "audit").write_text("{not json", encoding="utf-8")
    with pytest.raises(InputError, match="not valid JSON"):
        records.read(wheel, records.AuditRecord)


def test_the_writer_fails_as_a_step_when_the_folder_is_gone(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "gone")
    record = audit_record(wheel)
    wheel.unlink()
    (tmp_path / "gone").rmdir()
    with pytest.raises(StepFailed, match="cannot write the audit record"):
        records.write(wheel, record)


# --- the chain: each link refuses a missing record and changed bytes, and passes ------------

LINKS = [
    # (the record the step needs, the step, a passing record of that kind)
    (records.BuildRecord, "audit", build_record),
    (records.AuditRecord, "smoke", audit_record),
    (records.AuditRecord, "publish", audit_record),
    (records.SmokeRecord, "publish", smoke_record),
]


@pytest.mark.parametrize(("cls", "step", "make"), LINKS)
def test_a_link_refuses_a_missing_record(tmp_path: Path, cls: Any, step: str, make: Any) -> None:
    wheel = _wheel(tmp_path / "mydist" / "cu130")
    with pytest.raises(CheckFailed) as info:
        records.require(wheel, cls, step=step, row_id="cu130-py312-x86_64", policy_sha256=PSHA)
    message = str(info.value)
    assert f"{step} refused: {CU130}: no {cls.KIND} record ({CU130}.{cls.KIND}.json)" in message
    # the command names the user's dist folder, so that run as printed it makes this wheel's record
    assert f"`python -m release {cls.KIND} cu130-py312-x86_64 --dist {tmp_path / 'mydist'}`" in message


@pytest.mark.parametrize(("cls", "step", "make"), LINKS)
def test_a_links_hint_for_a_wheel_outside_a_dist_folder_names_it(
    tmp_path: Path, cls: Any, step: str, make: Any
) -> None:
    wheel = _wheel(tmp_path / "downloads")
    with pytest.raises(CheckFailed) as info:
        records.require(
            wheel, cls, step=step, row_id="cu130-py312-x86_64", policy_sha256=PSHA, policy_path="my/rows.toml"
        )
    wanted = {
        "build": "`python -m release build cu130-py312-x86_64 --policy my/rows.toml`",
        "audit": f"`python -m release audit {wheel} --row cu130-py312-x86_64 --record --policy my/rows.toml`",
        "smoke": f"`python -m release smoke {wheel} --row cu130-py312-x86_64 --policy my/rows.toml`",
    }
    assert wanted[cls.KIND] in str(info.value)


def test_a_link_refuses_a_record_of_a_standalone_audit_saying_so(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "dist" / "cu130")
    records.write(wheel, dataclasses.replace(audit_record(wheel), row=None))
    with pytest.raises(CheckFailed) as info:
        records.require(
            wheel, records.AuditRecord, step="smoke", row_id="cu130-py312-x86_64", policy_sha256=PSHA
        )
    assert "audited standalone, as no row of a policy, not as row cu130-py312-x86_64" in str(info.value)
    assert "None" not in str(info.value)


@pytest.mark.parametrize(("cls", "step", "make"), LINKS)
def test_a_link_refuses_bytes_changed_since_the_record(
    tmp_path: Path, cls: Any, step: str, make: Any
) -> None:
    wheel = _wheel(tmp_path)
    records.write(wheel, make(wheel))
    wheel.write_bytes(b"other bytes")
    with pytest.raises(
        CheckFailed, match=rf"{re.escape(CU130)}: changed since it was \w.* \(sha256 now {_sha(wheel)[:16]}"
    ):
        records.require(wheel, cls, step=step, row_id="cu130-py312-x86_64", policy_sha256=PSHA)


@pytest.mark.parametrize(("cls", "step", "make"), LINKS)
def test_a_link_passes_with_its_bound_passing_record(tmp_path: Path, cls: Any, step: str, make: Any) -> None:
    wheel = _wheel(tmp_path)
    record = make(wheel)
    records.write(wheel, record)
    assert records.require(wheel, cls, step=step, row_id="cu130-py312-x86_64", policy_sha256=PSHA) == record


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda w: audit_record(w, row="cu130-py313-x86_64"), "audited as row 'cu130-py313-x86_64'"),
        (lambda w: audit_record(w, policy_sha256="b" * 64), "audited against another rows.toml"),
        (lambda w: audit_record(w, passed=False), "its audit failed (1 finding(s): no sm_90)"),
        (lambda w: dataclasses.replace(audit_record(w), wheel="other.whl"), "the record is for 'other.whl'"),
    ],
)
def test_a_link_refuses_a_record_of_another_row_policy_or_a_failure(
    tmp_path: Path, make: Any, expected: str
) -> None:
    wheel = _wheel(tmp_path)
    record = make(wheel)
    records.record_path(wheel, "audit").write_text(json.dumps(records.to_json(record)), encoding="utf-8")
    with pytest.raises(CheckFailed, match=re.escape(expected)):
        records.require(
            wheel, records.AuditRecord, step="smoke", row_id="cu130-py312-x86_64", policy_sha256=PSHA
        )


def test_a_failed_smoke_stops_publish(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path)
    records.write(wheel, smoke_record(wheel, passed=False))
    with pytest.raises(CheckFailed, match=r"its smoke test failed \(✗ libcudart came from /usr/lib\)"):
        records.require(
            wheel, records.SmokeRecord, step="publish", row_id="cu130-py312-x86_64", policy_sha256=PSHA
        )


# --- one exit code per rule, through every layer ------------------------------------------


def test_a_partial_selection_to_production_is_bad_input(policy: Policy, rows: dict[str, Row]) -> None:
    every = tuple(rows.values())
    check_selection(policy, "production", every)  # the whole release: fine
    check_selection(policy, "rehearsal", every[:1])  # a part, to a rehearsal target: fine
    with pytest.raises(SelectionError, match="it only takes the whole release") as info:
        check_selection(policy, "production", every[:1])
    assert info.value.return_code == 2


@pytest.mark.parametrize("cls", [CheckFailed, InputError, StepFailed])
def test_context_keeps_the_kind_and_the_exit_code(cls: type[WheelwrightError]) -> None:
    err = with_context(cls("the index does not hold exactly the audited set"), "variants done: cpu")
    assert type(err) is cls and err.return_code == cls.return_code
    assert str(err) == "the index does not hold exactly the audited set\nvariants done: cpu"


def test_release_exits_with_the_code_of_its_first_failure(rows: dict[str, Row]) -> None:
    a, b = RowReport(rows["cpu-py312-x86_64"]), RowReport(rows["cu130-py312-x86_64"])
    assert exit_code([a, b]) == 0
    b.codes["build"] = 4
    a.codes["publish"] = 1
    assert exit_code([a, b]) == 1  # rows in order
    a.codes.clear()
    b.codes["audit"] = 1
    assert exit_code([a, b]) == 4  # steps in order
