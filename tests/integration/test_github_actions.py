"""Under GitHub Actions (GITHUB_ACTIONS=true) a rehearsal folds each row's log in a group, turns
each failing finding into an ``::error`` annotation and writes the summary table and each CUDA
wheel's GPU support table to the job summary; without it the output has no workflow command.
Real builds, real audits, real smoke venvs; the audit CLI on a real failing fixture wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.repo import commit_all, copy_example

from release.resources.cpus import host_arch

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
MISSING = FIXTURES / "wheels" / "fx_missing_arch-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
GOOD = FIXTURES / "wheels" / "fx_good_cu130-1.0.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
HOST = host_arch()
pytestmark = pytest.mark.integration


def _repo(tmp_path: Path, *, unclaimed_arch: bool = False) -> Path:
    """A committed copy of the policy and the example; ``unclaimed_arch``: its build also compiles
    for sm_87, an architecture the row does not claim (the audit must fail it)."""
    repo = copy_example(tmp_path / "repo")
    if unclaimed_arch:
        setup = repo / "examples" / "tinyaxpy" / "setup.py"
        text = setup.read_text()
        assert "*gencode_flags(cfg.archs)," in text
        setup.write_text(
            text.replace(
                "*gencode_flags(cfg.archs),",
                '*gencode_flags(cfg.archs), "-gencode", "arch=compute_87,code=sm_87",',
            )
        )
    return commit_all(repo)


def _run(cwd: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return python_m("release", *args, cwd=cwd, env={**clean, "PYTHONPATH": str(ROOT), **env}, timeout=900)


def _groups(stderr: str) -> list[tuple[str, list[str]]]:
    """Each ``::group::`` with its lines; fails on a group not closed before the next one."""
    groups: list[tuple[str, list[str]]] = []
    current: list[str] | None = None
    for line in stderr.splitlines():
        if line.startswith("::group::"):
            assert current is None, f"a group opened inside another: {line}"
            current = []
            groups.append((line.removeprefix("::group::"), current))
        elif line == "::endgroup::":
            assert current is not None, "::endgroup:: without a group"
            current = None
        elif current is not None:
            current.append(line)
    assert current is None, "a group was never closed"
    return groups


def test_rehearsal_of_two_rows_folds_each_row_and_writes_the_job_summary(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    summary = tmp_path / "step-summary.md"
    rows = (f"cpu-py312-{HOST}", f"cu130-py312-{HOST}")
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    proc = _run(
        repo, "release", "--rehearsal", "--backend", "host", "--no-publish", "--jobs", "2", *rows, env=env
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    groups = dict(_groups(proc.stderr))
    for row in rows:
        (title,) = [t for t in groups if t.startswith(f"{row}: ")]
        smoke = "ok (no GPU: run skipped)" if row.startswith("cu") else "ok"
        pattern = (
            rf"{row}: build ok \([\d.]+ s\), audit ok \([\d.]+ s\), smoke {re.escape(smoke)} \([\d.]+ s\)"
        )
        assert re.fullmatch(pattern, title), title
        log = groups[title]
        assert any(line.startswith(f"==> [{row}] smoke: ") for line in log), log  # the row's whole log
        assert f"==> [{row}] build ok (" in proc.stderr  # and its step lines as they finished
    assert "::error" not in proc.stderr
    text = summary.read_text()
    assert "## wheelwright release (rehearsal)" in text
    assert "| row | wheel | size | build | audit | smoke | publish | time |" in text
    assert f"| cu130-py312-{HOST} | tinyaxpy-" in text and f"| cpu-py312-{HOST} | tinyaxpy-" in text
    # the GPU support table of the CUDA wheel, in markdown
    gpu = text[text.index(f"### cu130-py312-{HOST}") :]
    assert "| GPU | cc | claimed | libtinyaxpy_kernels.so | wheel |" in gpu
    assert re.search(r"\| \S.* \| 9\.0 \| yes \| native \| native \|", gpu), gpu
    assert "| 11.0 |" not in gpu, gpu  # Jetson Thor lives beside aarch64 CPUs only: not in an x86_64 table
    assert f"### cpu-py312-{HOST}" not in text  # a CPU wheel has no GPU table
    # the release-wide audit page and one page beside each audit record
    assert (repo / "dist" / "audit.html").is_file()
    pages = sorted(p.name for p in (repo / "dist").glob("*/*.audit.html"))
    assert len(pages) == 2, pages


def test_failing_audit_in_a_rehearsal_is_an_error_annotation(tmp_path: Path) -> None:
    """The build compiles an architecture the row did not claim: the audit fails, and each failing
    finding is an ``::error`` annotation titled by its check; the job summary shows the table."""
    repo = _repo(tmp_path, unclaimed_arch=True)
    summary = tmp_path / "step-summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    proc = _run(repo, "release", "--rehearsal", "--backend", "host", f"cu130-py312-{HOST}", env=env)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("::error")]
    assert errors, proc.stderr
    assert any(
        line.startswith("::error title=device_code::tinyaxpy-0") and "87" in line for line in errors
    ), errors
    assert f"FAIL [cu130-py312-{HOST}] audit (" in proc.stderr
    assert "FAILED: 1 row(s) failed; nothing was published." in proc.stdout
    assert "| GPU | cc |" in summary.read_text()


def test_audit_cli_under_github_actions(tmp_path: Path) -> None:
    """The audit command: ``::error`` per failing finding, the GPU table in the job summary, the
    HTML page beside the record; a passing wheel annotates nothing; plain output outside CI."""
    for wheel in (MISSING, GOOD):
        shutil.copy2(wheel, tmp_path / wheel.name)
    summary = tmp_path / "step-summary.md"
    env = {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    policy = str(FIXTURES / "policy.toml")
    bad = _run(tmp_path, "audit", MISSING.name, "--policy", policy, "--record", env=env)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    errors = [line for line in bad.stderr.splitlines() if line.startswith("::error title=")]
    assert errors and all(line.startswith("::error title=device_code::") for line in errors[:1]), bad.stderr
    assert f"  report: {MISSING.name}.audit.html" in bad.stdout  # beside the wheel, as given
    page = (tmp_path / f"{MISSING.name}.audit.html").read_text()
    assert '<td class="support' in page and "FAILED" in page
    assert f"### audit of `{MISSING.name}`: FAILED" in summary.read_text()
    good = _run(tmp_path, "audit", GOOD.name, "--policy", policy, env=env)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "::error" not in good.stderr
    assert f"### audit of `{GOOD.name}`: passed" in summary.read_text()
    plain = _run(tmp_path, "audit", MISSING.name, "--policy", policy, "--no-record", env={})
    assert plain.returncode == 1 and "::" not in plain.stderr
