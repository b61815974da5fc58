"""The nox sessions are generated from the expansion: same rows, same names, nothing extra."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from release.core.machine import host_platform
from release.policy.load import load_policy
from release.policy.matrix import expand

ROOT = Path(__file__).resolve().parents[2]
FIXED = {"plan", "matrix", "release", "tests", "lint"}


def _sessions(arch: str) -> list[dict[str, object]]:
    env = {**os.environ, "WHEELWRIGHT_ARCH": arch}
    proc = subprocess.run(
        [sys.executable, "-m", "nox", "--list"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    # "* plan -> doc" (default) or "- build-cu130-py312 [build,cu130,py312] -> doc"
    out: list[dict[str, object]] = []
    for line in proc.stdout.splitlines():
        m = re.match(r"^[*-] (\S+)(?: \[[^]]*\])? -> (.*)$", line)
        if m:
            out.append({"session": m[1], "description": m[2]})
    return out


def test_sessions_equal_expansion() -> None:
    arch = host_platform()
    sessions = _sessions(arch)
    names = {str(s["session"]) for s in sessions}
    rows = [r for r in expand(load_policy(ROOT / "rows.toml")) if r.platform == arch]
    expected = {f"{step}-{r.session_suffix}" for r in rows for step in ("build", "audit", "smoke", "upload")}
    assert names == expected | FIXED
    assert "build-cu130-py312" in names
    for s in sessions:
        assert s["description"], f"{s['session']} has no docstring"


def test_other_arch_selectable() -> None:
    names = {str(s["session"]) for s in _sessions("aarch64")}
    assert "build-cu126-py310" in names


def test_release_needs_a_target() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "release", "release"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "name the target" in proc.stderr


def test_production_target_refuses_a_selection_before_building() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "release",
            "release",
            "--target",
            "production",
            "--allow-dirty",
            "cpu-py312-x86_64",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert "takes only the whole release (32 rows), not a selection of 1" in proc.stderr
    assert "==> " not in proc.stderr  # nothing was started
