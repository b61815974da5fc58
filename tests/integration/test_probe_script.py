"""The smoke probe script itself, run by a real interpreter on a small module of its own:
the check and the SDK call each report what they returned, or their error and the traceback
of the module's code only (the probe's own frames cut)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from release.smoke.probe import PHASE_MARK, PROBE, PROBE_FILE

pytestmark = pytest.mark.integration

MODULE = """
def ok():
    return {"answer": 42}

def bad():
    raise ValueError("boom")
"""


def _probe(tmp_path: Path, check: str, sdk: str) -> tuple[dict[str, Any], str]:
    (tmp_path / "probed.py").write_text(MODULE)
    script = tmp_path / PROBE_FILE
    script.write_text(PROBE)
    done = subprocess.run(
        [sys.executable, str(script), "probed", check, sdk, "cpu", ""],
        cwd=tmp_path,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout), done.stderr


def test_a_failing_check_and_a_working_sdk_call(tmp_path: Path) -> None:
    out, err = _probe(tmp_path, "probed:bad", "probed:ok")
    assert out["import"] == "ok" and out["run_check"] is True
    assert "check" not in out and out["check_error"] == "ValueError: boom"
    trace = out["check_traceback"]
    assert "probed.py" in trace and "ValueError: boom" in trace and PROBE_FILE not in trace
    assert out["sdk"] == {"answer": 42} and "sdk_error" not in out
    assert f"{PHASE_MARK}run probed:bad" in err and f"{PHASE_MARK}call probed:ok" in err


def test_a_working_check_and_a_failing_sdk_call(tmp_path: Path) -> None:
    out, _err = _probe(tmp_path, "probed:ok", "probed:bad")
    assert out["check"] == {"answer": 42} and "check_error" not in out
    assert out["sdk_error"] == "ValueError: boom" and PROBE_FILE not in out["sdk_traceback"]


def test_without_a_check_nothing_runs(tmp_path: Path) -> None:
    out, err = _probe(tmp_path, "", "")
    assert out["run_check"] is False and out["no_check"] is True
    assert not {"check", "check_error", "sdk", "sdk_error"} & set(out) and f"{PHASE_MARK}run" not in err
