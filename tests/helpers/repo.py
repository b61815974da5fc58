"""Test helpers for runs of wheelwright in a git repository of its own: a committed copy of
this repository's policy (rows.toml) and example package (examples/tinyaxpy)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True, capture_output=True
    )


def copy_example(repo: Path, *, ignore_outputs: bool = True) -> Path:
    """Copy the policy and the example package (without build outputs) into ``repo``;
    ``ignore_outputs``: a .gitignore naming dist/ and .wheelwright/."""
    shutil.copytree(
        ROOT / "examples" / "tinyaxpy",
        repo / "examples" / "tinyaxpy",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"),
    )
    shutil.copy2(ROOT / "rows.toml", repo / "rows.toml")
    if ignore_outputs:
        (repo / ".gitignore").write_text("dist/\n.wheelwright/\n")
    return repo


def commit_all(repo: Path) -> Path:
    """Make ``repo`` a git repository with everything in it committed."""
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fixture")
    return repo
