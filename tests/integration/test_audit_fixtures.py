"""Every check fails on a wheel that should fail it, and passes on one that should pass.

The wheels are real (nvcc 13.0 and g++ built them, see tests/fixtures/make_fixtures.py)
and committed under tests/fixtures/wheels/ with manifest.json saying, per case, the
CLI arguments, the exit code, the checks that must fail and the checks that must pass.
Each case runs the real ``audit`` command (auditwheel in a child process, g++ for the
C++ consumer).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.proc import python_m

from release.audit.registry import CHECKS
from release.commands import audit as audit_command
from release.core.errors import WheelwrightError

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
WHEELS = FIXTURES / "wheels"
MANIFEST = json.loads((WHEELS / "manifest.json").read_text(encoding="utf-8"))
CASES = MANIFEST["cases"]
DOC = ROOT / "docs" / "audit.md"


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """The audit command as ``python -m release audit`` runs it, in process."""
    parser = argparse.ArgumentParser(prog="python -m release")
    audit_command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["audit", *argv])
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code: int = args.func(args)
        except WheelwrightError as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = exc.return_code
    return code, out.getvalue(), err.getvalue()


def audit_case(case: dict[str, Any], *, wheels: Path = WHEELS) -> tuple[int, dict[str, Any]]:
    code, out, _ = run_cli(
        [
            str(wheels / case["wheel"]),
            "--policy",
            str(FIXTURES / "policy.toml"),
            "--json",
            "--no-record",
            *case["args"],
        ]
    )
    return code, json.loads(out)


def verdicts(case: dict[str, Any], code: int, doc: dict[str, Any]) -> list[str]:
    """What is wrong with the audit's verdict on a case (empty: as the manifest says)."""
    problems = []
    if code != case["exit"]:
        problems.append(f"exit {code}, expected {case['exit']}")
    if case["exit"] == 2:
        if doc["results"] or len(doc["errors"]) != 1:
            problems.append("bad input must be an error, not a result")
        return problems
    failed = set(doc["results"][0]["failed_checks"])
    problems += [f"{c} did not fail" for c in case["must_fail"] if c not in failed]
    problems += [f"{c} failed" for c in case["must_pass"] if c in failed]
    return problems


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_fixture_case(case: dict[str, Any]) -> None:
    code, doc = audit_case(case)
    failures = [f["message"] for r in doc["results"] for f in r["findings"] if not f["ok"]]
    assert not verdicts(case, code, doc), (
        f"{case['id']} ({case['why']}): {verdicts(case, code, doc)}\n{failures}"
    )


def coverage() -> dict[str, tuple[int, int]]:
    """Per check: (cases that must fail it, cases that must pass it)."""
    return {
        check: (
            sum(check in c["must_fail"] for c in CASES),
            sum(check in c["must_pass"] for c in CASES),
        )
        for check in CHECKS
    }


def coverage_table() -> str:
    lines = ["| check | must fail | must pass |", "| --- | --- | --- |"]
    lines += [f"| `{check}` | {fail} | {ok} |" for check, (fail, ok) in coverage().items()]
    return "\n".join(lines)


def test_every_check_can_fail_and_pass() -> None:
    counts = coverage()
    report = "; ".join(f"{c}: {f} must-fail / {p} must-pass" for c, (f, p) in counts.items())
    weak = [c for c, (f, p) in counts.items() if f < 1 or p < 1]
    assert not weak, f"checks without a failing or a passing fixture: {weak} ({report})"
    assert set(MANIFEST["checks"]) == set(CHECKS), "the manifest names the audit's checks"


def test_docs_table_is_current() -> None:
    text = DOC.read_text(encoding="utf-8")
    m = re.search(r"<!-- fixture-coverage -->\n(.*?)\n<!-- /fixture-coverage -->", text, re.S)
    assert m is not None, "docs/audit.md has no <!-- fixture-coverage --> table"
    assert m[1].strip() == coverage_table(), f"update docs/audit.md's fixture table to:\n{coverage_table()}"


def test_manifest_wheels_exist_and_are_small() -> None:
    files = {c["wheel"] for c in CASES}
    assert all((WHEELS / f).is_file() for f in files)
    total = sum(p.stat().st_size for p in WHEELS.glob("*.whl"))
    assert total < 5 * 1024 * 1024, f"fixture wheels take {total} bytes"


def test_text_report_of_the_good_wheel() -> None:
    good = next(c for c in CASES if c["id"] == "fx_good_cu130")
    code, out, _ = run_cli(
        [str(WHEELS / good["wheel"]), "--policy", str(FIXTURES / "policy.toml"), "--no-record"]
    )
    assert code == 0
    assert "  ✓ device code covers every claimed GPU architecture ['80', '90']" in out
    assert "device code found, as a claim: 8.0;9.0+PTX" in out
    assert re.search(r"H100 / H200\s+9\.0\s+yes\s+native\s+native", out)
    assert "PASSED" in out


def test_several_wheels_worst_exit_code() -> None:
    by_id = {c["id"]: c for c in CASES}
    wheels = [str(WHEELS / by_id[i]["wheel"]) for i in ("fx_good_cu130", "fx_missing_arch", "fx_not_a_zip")]
    code, out, err = run_cli([*wheels, "--policy", str(FIXTURES / "policy.toml"), "--no-record"])
    assert code == 2
    assert "PASSED" in out and "FAILED" in out and "not a readable zip archive" in err


def test_bad_arguments_are_bad_input() -> None:
    good = str(WHEELS / next(c for c in CASES if c["id"] == "fx_good_cu130")["wheel"])
    policy = ["--policy", str(FIXTURES / "policy.toml"), "--no-record"]
    code, _, err = run_cli([good, *policy, "--variant", "cu130", "--gpu-archs", "8.0;9.0+ptx"])
    assert code == 2 and "'+PTX' in upper case" in err
    code, _, err = run_cli([good, *policy, "--row", "cu130-py31-x86_64"])
    assert code == 2 and "did you mean 'cu130-py312-x86_64'" in err
    for args, message in (
        (["--gpu-archs", "8.0", "--runs-on", "9.9"], "9.9 is not a real compute capability"),
        (["--gpu-archs", "8.0", "--driver", "13.7"], "not a CUDA release wheelwright knows"),
        (["--checks", "devicecode"], "did you mean 'device_code'"),
        (["--gpu-archs", "libk.so=8.0 libk.so=9.0"], "two lists"),
        (["--variant", "cuda13", "--gpu-archs", "8.0"], "not 'cpu' or a CUDA variant"),
        (["--row", "cu130-py312-x86_64", "--gpu-archs", "8.0"], "a row brings its own arch list"),
    ):
        code, _, err = run_cli([good, *policy, *args])
        assert code == 2 and message in err, (args, err)


def test_gpu_arch_list_without_variant_is_a_standalone_claim() -> None:
    good = str(WHEELS / next(c for c in CASES if c["id"] == "fx_good_cu130")["wheel"])
    code, out, _ = run_cli([good, "--gpu-archs", "8.0;9.0+PTX", "--json", "--no-record"])
    (result,) = json.loads(out)["results"]
    assert code == 0 and result["standalone"] and result["train"] == "13.0", result["failed_checks"]
    assert result["train_source"] == "its local version label +cu130"


GPU = json.loads((WHEELS / "gpu" / "gpu.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("gpu_case", GPU["cases"], ids=[c["case"] for c in GPU["cases"]])
def test_gpu_truth_case_prediction(gpu_case: dict[str, Any]) -> None:
    """What the audit predicts for the lent H200 (9.0, a CUDA 13.0 driver), as docs/gpu-smoke.md records it."""
    args = [
        "--variant",
        gpu_case["variant"],
        "--gpu-archs",
        gpu_case["claim"],
        "--driver",
        "13.0",
        "--runs-on",
        "9.0",
    ]
    code, out, err = run_cli([str(WHEELS / gpu_case["wheel"]), *args, "--json", "--no-record"])
    assert code == gpu_case["exit"], err
    (result,) = json.loads(out)["results"]
    h200 = next(row for row in result["gpu_table"] if row["cc"] == "9.0")
    assert h200["wheel"] == gpu_case["support_9_0"] and h200["driver"] == "13.0"


@pytest.mark.parametrize("gpu_case", GPU["cases"], ids=[c["case"] for c in GPU["cases"]])
def test_gpu_truth_case_policy_gates_the_smoke_step(gpu_case: dict[str, Any]) -> None:
    """A gated case passes its row's audit (the smoke step runs it as it is); an unaudited one fails it."""
    policy = WHEELS / gpu_case["policy"]
    code, _, err = run_cli([str(WHEELS / gpu_case["wheel"]), "--policy", str(policy), "--no-record"])
    assert code == (0 if gpu_case["gated"] else 1), err


def test_record_written_and_accepted_by_publish(tmp_path: Path) -> None:
    from release.policy.load import load_policy
    from release.publish.guards.plan import check_audit_record
    from release.records import policy_sha256

    by_id = {c["id"]: c for c in CASES}
    good = shutil.copy(WHEELS / by_id["fx_good_cu130"]["wheel"], tmp_path)
    bad = shutil.copy(WHEELS / by_id["fx_missing_arch"]["wheel"], tmp_path)
    code, _, _ = run_cli([str(good), str(bad), "--policy", str(FIXTURES / "policy.toml"), "--record"])
    assert code == 1
    psha = policy_sha256(load_policy(FIXTURES / "policy.toml"))
    import hashlib

    for wheel, expected in ((Path(good), None), (Path(bad), "its audit failed")):
        record = json.loads(Path(f"{wheel}.audit.json").read_text())
        assert record["row"] == "cu130-py312-x86_64" and record["policy_sha256"] == psha
        why = check_audit_record(
            wheel.name,
            hashlib.sha256(wheel.read_bytes()).hexdigest(),
            record,
            policy_sha256=psha,
            variant="cu130",
        )
        assert (why is None) if expected is None else (expected in str(why))


def _audit_in_a_child(case_id: str) -> subprocess.CompletedProcess[str]:
    """``python -m release audit`` of one fixture case's wheel against the fixture policy, no record."""
    wheel = WHEELS / next(c for c in CASES if c["id"] == case_id)["wheel"]
    policy = str(FIXTURES / "policy.toml")
    return python_m("release", "audit", str(wheel), "--policy", policy, "--no-record", cwd=ROOT, timeout=120)


def test_wired_into_release_cli() -> None:
    """``python -m release audit`` is this command (release/cli.py registers release.commands.audit)."""
    proc = _audit_in_a_child("fx_good_cu130")
    assert proc.returncode == 0, proc.stderr
    assert "✓ device code covers every claimed GPU architecture ['80', '90']" in proc.stdout
    proc = _audit_in_a_child("fx_not_a_zip")
    assert proc.returncode == 2 and "not a readable zip archive" in proc.stderr


def test_every_fixtures_read_back_passes_when_fed_back() -> None:
    """The claim the audit reads back from a wheel passes device_code and gpus when given back to it
    (a library that cannot load, or whose device code cannot be read, passes nothing)."""
    seen: set[str] = set()
    checked = 0
    for case in CASES:
        if case["exit"] == 2 or case["wheel"] in seen:
            continue
        seen.add(case["wheel"])
        wheel = str(WHEELS / case["wheel"])
        code, out, _ = run_cli([wheel, "--runs-on", "8.0", "--checks", "libraries", "--json", "--no-record"])
        first = json.loads(out)["results"][0]
        claim = first["arch_list_found"]
        if claim is None or "rdc_unlinked" in wheel or first["failed_checks"]:
            continue  # nothing read back, a library that cannot load, a file that cannot be read
        args = ["--gpu-archs", claim, "--allow", "embedded-device-code", "--checks", "device_code,gpus"]
        code, out, _err = run_cli([wheel, *args, "--json", "--no-record"])
        result = json.loads(out)["results"][0]
        assert code == 0, (case["wheel"], claim, [f["message"] for f in result["findings"] if not f["ok"]])
        checked += 1
    assert checked >= 30
