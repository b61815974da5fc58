"""The release page's commit (issue 33 item 5): ``git rev-parse --short HEAD`` of the project's
checkout, through release/core/proc.py; absent, not an error, where the project is no git checkout
or git is missing. The page itself is tested after a real rehearsal in test_release.py."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from release.pipeline import checkout_commit

ROOT = Path(__file__).resolve().parents[2]


def test_the_commit_is_the_checkouts_short_head() -> None:
    head = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    )
    assert checkout_commit(ROOT / "examples" / "tinyaxpy", os.environ) == head.stdout.strip()


def test_no_commit_outside_a_git_checkout(tmp_path: Path) -> None:
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)}
    assert checkout_commit(tmp_path, env) is None


def test_no_commit_without_git(tmp_path: Path) -> None:
    assert checkout_commit(ROOT, {"PATH": str(tmp_path)}) is None
