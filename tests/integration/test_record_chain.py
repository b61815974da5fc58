"""docs/quickstart.md: "each step checks the record of the step before it", through the real steps.

One CPU row of the seed policy is built, audited, smoke-tested and published to the rehearsal
index with ``python -m release``; then, on copies of that dist/, every link refuses a missing
record and a wheel whose bytes changed since the record was written (exit 1), before it does
anything else. A wheel given to ``audit`` by path (a third party's) needs no build record.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.proc import python_m, repo_env
from helpers.repo import copy_example

from release import records
from release.core.hashing import sha256_file
from release.publish.index.client import remote_hashes
from release.publish.index.local import attach, stop

ROOT = Path(__file__).resolve().parents[2]
ROW = "cpu-py312-x86_64"
pytestmark = pytest.mark.integration


def _cli(cwd: Path, *args: str, dist: Path | None = None) -> subprocess.CompletedProcess[str]:
    extra = ["--dist", str(dist)] if dist is not None else []
    return python_m(
        "release", *args, "--policy", str(cwd / "rows.toml"), *extra, cwd=cwd, env=repo_env(), timeout=900
    )


@dataclass(frozen=True)
class Chain:
    repo: Path
    dist: Path
    wheel: Path
    steps: dict[str, subprocess.CompletedProcess[str]]


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    """The quickstart's flow for one row, each step a separate command as the nox sessions run it."""
    repo = copy_example(tmp_path_factory.mktemp("chain"), ignore_outputs=False)
    steps = {"build": _cli(repo, "build", ROW, "--backend", "host")}
    for step, args in (("audit", ()), ("smoke", ()), ("publish", ("--target", "rehearsal"))):
        steps[step] = _cli(repo, step, ROW, *args)
    try:
        (wheel,) = (repo / "dist" / "cpu").glob("*.whl")
        yield Chain(repo, repo / "dist", wheel, steps)
    finally:
        stop(repo / ".wheelwright" / "index")


def test_the_whole_chain_passes_and_binds_every_record_to_one_wheel(chain: Chain) -> None:
    for step, proc in chain.steps.items():
        assert proc.returncode == 0, f"{step}:\n{proc.stdout}\n{proc.stderr}"
    build = records.read(chain.wheel, records.BuildRecord)
    audit = records.read(chain.wheel, records.AuditRecord)
    smoke = records.read(chain.wheel, records.SmokeRecord)
    assert build is not None and audit is not None and smoke is not None
    assert {r.row for r in (build, audit, smoke)} == {ROW}
    assert build.sha256 == audit.sha256 == smoke.sha256 == sha256_file(chain.wheel)
    assert build.policy_sha256 == audit.policy_sha256 == smoke.policy_sha256
    index = attach(chain.repo / ".wheelwright" / "index")
    assert remote_hashes(index.simple_url("cpu"), "tinyaxpy") == {chain.wheel.name: build.sha256}


def _copy(chain: Chain, tmp_path: Path) -> tuple[Path, Path]:
    dist = tmp_path / "dist"
    shutil.copytree(chain.dist, dist)
    return dist, dist / "cpu" / chain.wheel.name


def _documented_links() -> list[tuple[str, str]]:
    """(step, the record it needs) from docs/quickstart.md's table: the claim under test."""
    text = (ROOT / "docs" / "quickstart.md").read_text(encoding="utf-8")
    table = text.split("| step | needs | refuses (exit 1) |", 1)[1].split("\n\n", 1)[0]
    links = []
    for line in table.splitlines()[2:]:
        step, needs = (cell.strip() for cell in line.strip("|").split("|")[:2])
        links += [(step.split()[0], kind) for kind in re.findall(r"<wheel>\.(\w+)\.json", needs)]
    return links


def test_the_documented_chain_is_the_one_tested() -> None:
    assert _documented_links() == [
        ("audit", "build"),
        ("smoke", "audit"),
        ("publish", "audit"),
        ("publish", "smoke"),
    ]


# (the step, the record it needs, extra arguments)
LINKS = [
    (step, kind, ("--target", "rehearsal") if step == "publish" else ()) for step, kind in _documented_links()
]


@pytest.mark.parametrize(("step", "kind", "args"), LINKS)
def test_a_step_refuses_a_wheel_without_the_record_before_it(
    chain: Chain, tmp_path: Path, step: str, kind: records.Kind, args: tuple[str, ...]
) -> None:
    dist, wheel = _copy(chain, tmp_path)
    records.record_path(wheel, kind).unlink()
    before = sorted(p.name for p in wheel.parent.iterdir())
    proc = _cli(chain.repo, step, ROW, *args, dist=dist)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"{wheel.name}: no {kind} record ({wheel.name}.{kind}.json)" in proc.stderr
    assert f"python -m release {kind} {ROW}" in proc.stderr
    assert sorted(p.name for p in wheel.parent.iterdir()) == before  # the step did nothing


@pytest.mark.parametrize(("step", "kind", "args"), LINKS)
def test_a_step_refuses_a_wheel_changed_since_the_record_before_it(
    chain: Chain, tmp_path: Path, step: str, kind: records.Kind, args: tuple[str, ...]
) -> None:
    dist, wheel = _copy(chain, tmp_path)
    with wheel.open("ab") as fh:
        fh.write(b"\0")  # the bytes no record was written for
    before = {p.name: p.read_bytes() for p in wheel.parent.iterdir()}
    proc = _cli(chain.repo, step, ROW, *args, dist=dist)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    past = {"build": "built", "audit": "audited", "smoke": "smoke-tested"}[kind]
    assert f"{wheel.name}: changed since it was {past}" in proc.stderr
    assert {p.name: p.read_bytes() for p in wheel.parent.iterdir()} == before


def test_a_wheel_given_by_path_is_audited_without_a_build_record(chain: Chain, tmp_path: Path) -> None:
    """A third party's wheel has no build record: given as a file, it is audited as it is (outside
    dist/, its record is written when asked: --record)."""
    theirs = Path(shutil.copy2(chain.wheel, tmp_path / chain.wheel.name))
    proc = _cli(chain.repo, "audit", str(theirs), "--record")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    record = records.read(theirs, records.AuditRecord)
    assert record is not None and record.passed and record.row == ROW
