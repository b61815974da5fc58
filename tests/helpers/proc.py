"""Test helpers about processes: running ``python -m``, waiting for a process that must end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def python_m(
    *argv: str,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
    check: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``python -m <argv>`` with this interpreter, its output captured as text; ``env`` defaults
    to this process's environment."""
    return subprocess.run(
        [sys.executable, "-m", *argv],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


def repo_env() -> dict[str, str]:
    """This process's environment with this checkout on PYTHONPATH: a child run from another
    folder (a user's project) still imports this checkout's ``release``."""
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def assert_process_ends(pid: int, what: str, within_s: float = 5.0) -> None:
    """Wait up to ``within_s`` for process ``pid`` to end; fail the test naming ``what`` if it lives on."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"{what} {pid} outlived its timeout")


def audit_json(wheel: Path, *args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    """``python -m release audit WHEEL ARGS --json`` in ``cwd`` (no rows.toml there): its exit code, which
    must be a verdict (0 or 1), and the wheel's one result, with no error."""
    proc = subprocess.run(
        [sys.executable, "-m", "release", "audit", str(wheel), *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
    )
    assert proc.returncode in (0, 1), f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    doc = json.loads(proc.stdout)
    assert not doc["errors"], doc["errors"]
    (result,) = doc["results"]
    return proc.returncode, result
