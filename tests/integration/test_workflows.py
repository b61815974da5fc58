"""The GitHub Actions workflows lint clean and take their matrix from rows.toml."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from release.policy.load import load_policy
from release.policy.matrix import expand, github_matrix

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.integration


def _tool(name: str) -> str:
    path = BIN / name
    found = str(path) if path.exists() else shutil.which(name)
    assert found, f"{name} is not installed; run ./scripts/bootstrap.sh"
    return found


def test_actionlint_clean() -> None:
    assert WORKFLOWS
    proc = subprocess.run(
        [_tool("actionlint"), *map(str, WORKFLOWS)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_zizmor_clean() -> None:
    proc = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", ".github/workflows/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No findings to report" in proc.stdout + proc.stderr


def test_workflow_matrix_is_the_expansion(tmp_path: Path) -> None:
    """The build matrix is whatever `nox -s matrix` prints, which is the expansion of rows.toml."""
    wheels = (ROOT / ".github" / "workflows" / "wheels.yml").read_text(encoding="utf-8")
    assert "nox -s matrix --" in wheels
    assert "fromJSON(needs.plan.outputs.matrix)" in wheels
    assert 'nox -s "build-$SUFFIX"' in wheels
    out = tmp_path / "matrix.json"
    subprocess.run(
        [str(BIN / "nox"), "-s", "matrix", "--", "--output", str(out)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    expected = github_matrix(expand(load_policy(ROOT / "rows.toml")))
    assert json.loads(out.read_text()) == expected
    assert len(expected["include"]) == 32


def test_only_publish_job_can_write() -> None:
    """publish (all or nothing) is the one job that can upload; attest may sign, runs no code."""
    wheels = (ROOT / ".github" / "workflows" / "wheels.yml").read_text(encoding="utf-8")
    assert wheels.count("id-token: write") == 2
    attest = wheels[wheels.index("  attest:") : wheels.index("  publish:")]
    publish = wheels[wheels.index("  publish:") :]
    assert "id-token: write" in attest and "id-token: write" in publish
    assert "run:" not in attest and "actions/checkout" not in attest, (
        "the signing job must run no repository code"
    )
    assert "if: github.event_name != 'pull_request'" in attest
    assert "needs: [build, gpu-smoke, attest]" in publish
    assert "gh attestation verify" in publish
    assert "contents: write" not in wheels
