"""Hostile wheels: each gets a clean verdict, in bounded time and memory, and nothing of the machine leaks.

The cases are scripts/make_hostile_wheels.py's: small ones committed under
tests/fixtures/hostile/ with expected.json, big ones (bombs, a million members) built here.
Each runs through the real command, ``python -m release audit``, in a child process whose
address space is capped at 2 GiB (``RLIMIT_AS``, set before it starts), with 60 s to
finish, its own TMPDIR and a secret planted where the hostile headers reach for it. The
verdict must be the case's exit code, a message naming the wheel and the problem, no
traceback, nothing left in TMPDIR and the secret nowhere in the output or the record.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "tests" / "fixtures" / "hostile"
POLICY = ROOT / "tests" / "fixtures" / "policy.toml"
EXPECTED = json.loads((HOSTILE / "expected.json").read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = EXPECTED["cases"]
MEMORY = 2 << 30  # RLIMIT_AS of the audit and everything it starts
SECONDS = 60.0
MIN_HOSTILE = 30


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_hostile_wheels", ROOT / "scripts" / "make_hostile_wheels.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up while the class is made
    spec.loader.exec_module(module)
    return module


GEN = _generator()


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def audit(wheels: list[Path], tmpdir: Path, *extra: str) -> tuple[int, str, float]:
    """``python -m release audit WHEEL...`` under the memory limit: exit code, stdout+stderr, seconds."""
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "release", "audit", *map(str, wheels), "--policy", str(POLICY), *extra],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=SECONDS * 2,
        preexec_fn=_limit_memory,
        check=False,
    )
    return proc.returncode, proc.stdout + proc.stderr, time.monotonic() - start


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Big cases, built once per session when a test first asks (a cache: case id -> wheel)."""
    return {}


def wheel_of(case: dict[str, Any], built: dict[str, Path], tmp: Path) -> Path:
    if not case["big"]:
        return HOSTILE / str(case["wheel"])
    if case["id"] not in built:
        out = tmp / "big"
        out.mkdir(exist_ok=True)
        built[case["id"]] = Path(GEN.build(next(c for c in GEN.CASES if c.id == case["id"]), out))
    return built[case["id"]]


@pytest.fixture(scope="session")
def secret() -> Any:
    path = Path(EXPECTED["secret_file"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(EXPECTED["secret"] + "\n", encoding="utf-8")
    yield EXPECTED["secret"]
    shutil.rmtree(path.parent, ignore_errors=True)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_hostile_wheel(
    case: dict[str, Any],
    built: dict[str, Path],
    secret: str,
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
) -> None:
    wheel = wheel_of(case, built, tmp_path_factory.getbasetemp())
    if case["record_cap"] is not None:  # the record is written beside the wheel (asked: it is outside dist/)
        wheel = Path(shutil.copy(wheel, tmp_path / wheel.name))
    code, out, seconds = audit(
        [wheel], tmp_path / "tmp", "--record" if case["record_cap"] is not None else "--no-record"
    )
    assert "Traceback" not in out, out[-3000:]
    assert code == case["exit"], (
        f"{case['id']} ({case['why']}): exit {code}, expected {case['exit']}\n{out[-3000:]}"
    )
    assert re.search(case["message"], out), (
        f"{case['id']}: no match for {case['message']!r} in\n{out[-3000:]}"
    )
    assert case["wheel"] in out, f"{case['id']}: the output does not name the wheel"
    assert seconds < SECONDS, f"{case['id']}: {seconds:.1f} s"
    assert not list((tmp_path / "tmp").iterdir()), "the audit left files in TMPDIR"
    assert secret not in out
    if case["record_cap"] is not None:
        record = wheel.with_name(wheel.name + ".audit.json")
        assert record.stat().st_size < case["record_cap"], (
            f"{case['id']}: record of {record.stat().st_size} bytes"
        )
        assert secret not in record.read_text(encoding="utf-8")


def test_a_refused_wheel_does_not_stop_the_others(
    built: dict[str, Path], tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Lying headers are a bad-input verdict for that wheel; the next wheel on the line is audited."""
    by_id = {c["id"]: c for c in CASES}
    wheels = [
        wheel_of(by_id[i], built, tmp_path_factory.getbasetemp())
        for i in ("shared_header", "lying_sizes", "control_good")
    ]
    code, out, seconds = audit(wheels, tmp_path / "tmp", "--no-record", "--json")
    assert code == 2 and seconds < SECONDS, out[-3000:]
    doc = json.loads(out[: out.rindex("}") + 1])
    assert [e["wheel"] for e in doc["errors"]] == [w.name for w in wheels[:2]]
    assert [(r["wheel"], r["passed"]) for r in doc["results"]] == [(wheels[2].name, True)]


def test_the_memory_limit_bites(tmp_path: Path) -> None:
    """The 2 GiB limit the cases run under is real: a child allocating 3 GiB under it fails."""
    proc = subprocess.run(
        [sys.executable, "-c", "b = bytearray(3 << 30)"],
        capture_output=True,
        text=True,
        preexec_fn=_limit_memory,
        check=False,
    )
    assert proc.returncode != 0 and "MemoryError" in proc.stderr


def test_case_count_and_coverage(capsys: pytest.CaptureFixture[str]) -> None:
    """30+ hostile wheels of our own, every class covered; the committed files are exactly the small cases."""
    hostile = [c for c in CASES if c["exit"] in (1, 2)]
    kinds = Counter(c["kind"] for c in hostile)
    with capsys.disabled():
        print(
            f"\n{len(hostile)} hostile wheels ({sum(c['exit'] == 2 for c in hostile)} bad input, "
            f"{sum(c['exit'] == 1 for c in hostile)} with findings) and {len(CASES) - len(hostile)} controls; "
            + ", ".join(f"{k}: {n}" for k, n in sorted(kinds.items()))
        )
    assert len(hostile) >= MIN_HOSTILE
    expected_kinds = {c.kind for c in GEN.CASES} - {"control"}
    assert set(kinds) == expected_kinds
    assert all(n >= 1 for n in kinds.values())
    assert [c.to_json() for c in GEN.CASES] == CASES, (
        "expected.json is stale: run scripts/make_hostile_wheels.py"
    )
    committed = sorted(p.name for p in HOSTILE.glob("*.whl"))
    assert committed == sorted(c["wheel"] for c in CASES if not c["big"])
