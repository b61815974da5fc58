"""`release`: all or nothing. A row that fails any step means nothing is published; a dirty
working tree means nothing starts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


def _repo_with(tmp_path: Path, *, break_cuda: bool) -> Path:
    """A committed copy of the policy and the example package (optionally with broken CUDA source)."""
    repo = tmp_path / "repo"
    shutil.copytree(
        ROOT / "examples" / "tinyaxpy",
        repo / "examples" / "tinyaxpy",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"),
    )
    shutil.copy2(ROOT / "rows.toml", repo / "rows.toml")
    if break_cuda:
        cu = repo / "examples" / "tinyaxpy" / "csrc" / "axpy_cuda.cu"
        cu.write_text(cu.read_text() + "\nthis is not C++;\n")
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "fixture")
    return repo


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "release", "release", "--policy", str(repo / "rows.toml"), *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )


def test_dirty_tree_refused(tmp_path: Path) -> None:
    repo = _repo_with(tmp_path, break_cuda=False)
    (repo / "examples" / "tinyaxpy" / "stray.txt").write_text("uncommitted\n")
    proc = _release(repo, "--rehearsal", "cpu-py312-x86_64")
    assert proc.returncode == 2, proc.stderr
    assert "uncommitted changes (examples/tinyaxpy/stray.txt)" in proc.stderr
    assert not (repo / "dist").exists()


def test_a_failing_row_publishes_nothing(tmp_path: Path) -> None:
    """cpu-py312 passes every step, cu130-py312 fails to compile: nothing reaches the index."""
    repo = _repo_with(tmp_path, break_cuda=True)
    proc = _release(repo, "--rehearsal", "cpu-py312-x86_64", "cu130-py312-x86_64")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "FAILED: 1 row(s) failed; nothing was published." in proc.stdout
    table = {
        line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith(("cpu-", "cu130-"))
    }
    assert "FAIL" in table["cu130-py312-x86_64"]
    assert "not published" in table["cpu-py312-x86_64"]
    assert "ok" in table["cpu-py312-x86_64"]
    # No index was even started, so nothing can have been uploaded.
    assert not (repo / ".wheelwright" / "index").exists()
    # The failed build left no wheel behind; the passing row's wheel is audited and kept for a rerun.
    assert not list((repo / "dist").glob("cu130/*.whl"))
    assert len(list((repo / "dist").glob("cpu/*.whl.audit.json"))) == 1
