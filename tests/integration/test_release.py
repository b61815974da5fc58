"""`release`: all or nothing. A row that fails any step means nothing is published; a dirty
working tree means nothing starts."""

from __future__ import annotations

import dataclasses
import html
import os
import re
import subprocess
import time
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.repo import commit_all, copy_example
from helpers.rows import rows_by_id

from release import records
from release.pipeline import RowReport
from release.policy.matrix import Row
from release.resources.cpus import host_arch
from release.schedule import leaders_first, run_rows
from release.summary import (
    compact_rows,
    failure_block,
    left_out_lines,
    reason_line,
    render_summary,
    row_label,
    step_line,
)

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
OTHER_ARCH = "aarch64" if host_arch() == "x86_64" else "x86_64"


def _repo_with(tmp_path: Path, *, break_cuda: bool = False, break_check: bool = False) -> Path:
    """A committed copy of the policy and the example package (optionally with broken CUDA source,
    or a selftest that raises from a helper function of the package)."""
    repo = copy_example(tmp_path / "repo", ignore_outputs=False)
    if break_cuda:
        cu = repo / "examples" / "tinyaxpy" / "csrc" / "axpy_cuda.cu"
        cu.write_text(cu.read_text() + "\nthis is not C++;\n")
    if break_check:
        init = repo / "examples" / "tinyaxpy" / "tinyaxpy" / "__init__.py"
        head = "def selftest(n: int = 1 << 20) -> dict[str, Any]:\n"
        text = init.read_text()
        assert head in text
        helper = "def _lookup(table: dict[str, int]) -> int:\n    return table['missing']\n\n\n"
        init.write_text(text.replace(head, helper + head + "    _lookup({})\n", 1))
    return commit_all(repo)


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return python_m(
        "release", "release", "--policy", str(repo / "rows.toml"), *args, cwd=repo, env=env, timeout=900
    )


def test_dirty_tree_refused(tmp_path: Path) -> None:
    repo = _repo_with(tmp_path, break_cuda=False)
    (repo / "examples" / "tinyaxpy" / "stray.txt").write_text("uncommitted\n")
    proc = _release(repo, "--rehearsal", "cpu-py312-x86_64")
    assert proc.returncode == 2, proc.stderr
    assert "uncommitted changes (examples/tinyaxpy/stray.txt);" in proc.stderr
    assert not list(repo.glob("dist/**/*.whl"))  # dist/ holds only the run's lock: nothing was built


def test_a_failing_row_publishes_nothing(tmp_path: Path) -> None:
    """cpu-py312 passes every step, cu130-py312 fails to compile: nothing reaches the index, and
    the release exits 4 (a step failed), the code `build` itself gives that failure."""
    repo = _repo_with(tmp_path, break_cuda=True)
    proc = _release(
        repo, "--rehearsal", "--backend", "host", "--verbose", "cpu-py312-x86_64", "cu130-py312-x86_64"
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4, out
    assert "FAILED: 1 row(s) failed; nothing was published." in proc.stdout
    table = {
        line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith(("cpu-", "cu130-"))
    }
    assert "FAIL" in table["cu130-py312-x86_64"]
    # the FAIL line, then the compiler's complaint and the build step's whole log
    fail = proc.stderr[proc.stderr.index("FAIL [cu130-py312-x86_64] build (") :]
    assert "this is not C++" in fail and "   the build step's log:" in fail
    assert "==> [cpu-py312-x86_64] build ok (" in proc.stderr
    assert "==> [cpu-py312-x86_64] smoke: creating a fresh venv" in proc.stderr  # --verbose: the logs too
    assert "not published" in table["cpu-py312-x86_64"]
    assert "ok" in table["cpu-py312-x86_64"]
    # No index was even started, so nothing can have been uploaded.
    assert not (repo / ".wheelwright" / "index").exists()
    # The failed build left no wheel behind; the passing row's wheel keeps its record chain
    # (build, audit, smoke) for a rerun.
    assert not list((repo / "dist").glob("cu130/*.whl"))
    (wheel,) = (repo / "dist" / "cpu").glob("*.whl")
    build = records.read(wheel, records.BuildRecord)
    audit = records.read(wheel, records.AuditRecord)
    smoke = records.read(wheel, records.SmokeRecord)
    assert build is not None and audit is not None and smoke is not None
    assert build.sha256 == audit.sha256 == smoke.sha256 and audit.passed and smoke.passed


def test_a_failing_check_is_a_fail_line_with_the_projects_traceback(tmp_path: Path) -> None:
    """The project's selftest raises from one of its helpers: the smoke fails with one FAIL line,
    then the traceback of the project's code only (none of the probe's code), and exit 1. With
    --quiet the passing steps say nothing; the rows of the other CPU arch are one line."""
    repo = _repo_with(tmp_path, break_check=True)
    other = [f"cpu-py312-{OTHER_ARCH}", f"cu130-py312-{OTHER_ARCH}"]
    proc = _release(
        repo,
        "--rehearsal",
        "--backend",
        "host",
        "--no-publish",
        "--quiet",
        f"cpu-py312-{host_arch()}",
        *other,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "build ok" not in err and "audit ok" not in err  # --quiet
    head = f"FAIL [cpu-py312-{host_arch()}] smoke ("
    assert head in err
    fail = err[err.index(head) :].splitlines()
    assert fail[0].endswith("): ✗ the check computation failed: KeyError: 'missing'"), fail[0]
    assert fail[1].strip() == "Traceback (most recent call last):"
    assert any("tinyaxpy/__init__.py" in line and "in selftest" in line for line in fail)
    assert any("in _lookup" in line for line in fail)
    assert "wheelwright_probe" not in err and "faulthandler" not in err and "importlib" not in err
    # the summary table holds the row that ran; the other arch's rows are one line, grouped
    table = proc.stdout.split("\n\n")[0]
    assert f"cpu-py312-{host_arch()}" in table and OTHER_ARCH not in table
    assert f"  2 rows, cpu/cu130 × py3.12 on {OTHER_ARCH}: this machine is {host_arch()}" in proc.stdout
    # the release page opens with that summary (each row's line, the rows left out), the commit, the date
    page = (repo / "dist" / "audit.html").read_text(encoding="utf-8")
    opening = page[page.index('<section id="summary">') : page.index("</section>")]
    assert page.index('<section id="summary">') < page.index('id="reports"')
    shown = html.unescape(re.sub(r"<[^>]+>", "", opening))
    row_line = next(line for line in proc.stdout.splitlines() if line.startswith(f"cpu-py312-{host_arch()}"))
    assert row_line in shown and "not published" in row_line, shown
    assert f"2 rows, cpu/cu130 × py3.12 on {OTHER_ARCH}: this machine is {host_arch()}" in shown, shown
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    assert f"commit {commit.stdout.strip()}" in shown, shown
    assert time.strftime("%Y-%m-%d", time.gmtime()) in shown and " UTC" in shown, shown


@pytest.fixture(scope="module")
def rows() -> dict[str, Row]:
    return rows_by_id()


def test_summary_groups_rows_left_out_by_reason_one_line_each(rows: dict[str, Row]) -> None:
    toolchain = (
        "row {row} needs a CUDA 12.6 toolchain (nvcc reporting exactly 12.6) and none was found:\n"
        "  - CUDA_HOME is not set\n"
        "to fix: install the CUDA 12.6 toolkit and set CUDA_HOME to it.\n"
        "the container build uses the row's builder image: python -m release build {row} --backend container"
    )
    reports = []
    for rid in ("cpu-py312-x86_64", "cu126-py310-x86_64", "cu126-py311-x86_64", "cpu-py310-aarch64"):
        rep = RowReport(rows[rid])
        if rid.startswith("cu126"):
            rep.reason = toolchain.format(row=rid)
        elif rid.endswith("aarch64"):
            rep.reason = "this machine is x86_64; aarch64 rows build on aarch64 runners"
        else:
            rep.status = {"build": "ok", "audit": "ok", "smoke": "ok", "publish": "uploaded"}
            rep.seconds = 2.5
        reports.append(rep)
    lines = left_out_lines(reports)
    assert lines == [
        "  2 rows, cu126 × py3.10, 3.11 on x86_64: needs a CUDA 12.6 toolchain (nvcc reporting exactly "
        "12.6) and none was found; to fix: install the CUDA 12.6 toolkit and set CUDA_HOME to it.",
        "  1 row, cpu-py310-aarch64: this machine is x86_64; aarch64 rows build on aarch64 runners",
    ]
    assert len(left_out_lines(reports, verbose=True)) == 2 + 4 + 1  # each reason whole, once
    table = render_summary(reports).splitlines()
    assert len(table) == 3 and table[2].startswith("cpu-py312-x86_64") and "2.5 s" in table[2]
    assert compact_rows([rows[f"{v}-py3{m}-aarch64"] for v in ("cpu", "cu130") for m in (10, 11)]) == (
        "cpu/cu130 × py3.10, 3.11 on aarch64"
    )
    assert compact_rows([rows["cpu-py310-aarch64"], rows["cu130-py311-aarch64"]]) == (
        "cpu-py310-aarch64, cu130-py311-aarch64"
    )
    assert reason_line("", "x") == "no reason given"


def test_step_and_failure_lines() -> None:
    assert step_line("smoke", "ok (no GPU: run skipped)", 3.04) == "smoke ok (no GPU: run skipped) (3.0 s)"
    block = failure_block("cu130-py312-x86_64", "audit", 0.42, "2 failing findings\n✗ a\n✗ b", ["==> x"])
    assert block.splitlines() == [
        "FAIL [cu130-py312-x86_64] audit (0.4 s): 2 failing findings",
        "      ✗ a",
        "      ✗ b",
        "   the audit step's log:",
        "      ==> x",
    ]


def test_rows_run_in_parallel_leaders_first_and_never_deadlock(rows: dict[str, Row]) -> None:
    """The first row of each variant goes first; a row that waits for its leader's build never
    blocks the workers, whatever the job count."""
    import threading

    reports = [RowReport(rows[f"{v}-py3{m}-x86_64"]) for v in ("cpu", "cu130", "cu132") for m in (10, 11, 12)]
    ordered, leaders = leaders_first(reports)
    assert [r.row.id for r in ordered[:3]] == ["cpu-py310-x86_64", "cu130-py310-x86_64", "cu132-py310-x86_64"]
    assert leaders == {0, 1, 2}
    for jobs in (1, 2, 3, 8):
        done = {r.row.variant: threading.Event() for r in reports}
        order: list[str] = []
        lock = threading.Lock()

        def work(
            rep: RowReport,
            leader: bool,
            done: dict[str, threading.Event] = done,
            order: list[str] = order,
            lock: threading.Lock = lock,
        ) -> None:
            if not leader:
                assert done[rep.row.variant].wait(timeout=10), f"{rep.row.id} waited for ever"
            with lock:
                order.append(rep.row.id)
            if leader:
                done[rep.row.variant].set()

        run_rows(reports, jobs, work)
        assert sorted(order) == sorted(r.row.id for r in reports)
        for variant in ("cpu", "cu130", "cu132"):
            mine = [rid for rid in order if rid.startswith(variant + "-")]
            assert mine[0] == f"{variant}-py310-x86_64"  # the leader's build comes first


def test_jobs_and_verbosity_on_the_command_line(tmp_path: Path) -> None:
    """--jobs takes a whole number of at least 1 (exit 2 otherwise); -q/-v go before or after
    the command."""
    repo = _repo_with(tmp_path)
    bad = _release(repo, "--rehearsal", "--jobs", "0", "cpu-py312-x86_64")
    assert bad.returncode == 2 and "--jobs" in bad.stderr and "at least 1" in bad.stderr
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for args in (["-q", "plan"], ["plan", "--quiet"], ["--verbose", "plan"], ["plan", "-v"]):
        proc = python_m(
            "release", *args, "--policy", str(repo / "rows.toml"), "cpu-py312-*", env=env, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        assert "cpu-py312-x86_64" in proc.stdout
    both = python_m("release", "plan", "-q", "-v", env=env)
    assert both.returncode == 2 and "not allowed with argument" in both.stderr


def test_an_abi3_row_counts_for_every_python_it_serves() -> None:
    """The summary names the Pythons an abi3/py3-none row's one wheel serves, not only its build Python."""
    rows = rows_by_id()
    served = dataclasses.replace(rows["cu130-py310-aarch64"], serves_pythons=("3.10", "3.11"))
    cpu = dataclasses.replace(rows["cpu-py310-aarch64"], serves_pythons=("3.10", "3.11"))
    assert row_label(served) == "cu130-py310-aarch64 (py3.10-3.11)"
    assert row_label(rows["cu130-py311-aarch64"]) == "cu130-py311-aarch64"
    assert compact_rows([cpu, served]) == "cpu/cu130 × py3.10, 3.11 on aarch64"
    assert compact_rows([served]) == "cu130 × py3.10, 3.11 on aarch64"
    # must fail the old grid: a cpython row for 3.10 only is not the 3.10-3.11 block
    assert compact_rows([cpu, rows["cu130-py310-aarch64"]]) == (
        "cpu-py310-aarch64 (py3.10-3.11), cu130-py310-aarch64"
    )
    rep = RowReport(served)
    rep.status = {"build": "ok"}
    assert render_summary([rep]).splitlines()[2].startswith("cu130-py310-aarch64 (py3.10-3.11)")
