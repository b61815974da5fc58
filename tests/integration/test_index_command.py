"""``python -m release index start|status|stop`` (issue 24 item 9): the local index a rehearsal
uses, as a command of the one tool instead of an internal module path. Real server, real HTTP."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from helpers.proc import python_m, repo_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _index(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    proc = python_m(
        "release", "index", *args, "--root", str(tmp_path / "idx"), env=repo_env(), cwd=tmp_path, timeout=120
    )
    return proc.returncode, proc.stdout, proc.stderr


def test_start_status_stop(tmp_path: Path) -> None:
    code, out, err = _index(tmp_path, "status")
    assert code == 0 and json.loads(out)["running"] is False, err
    assert "python -m release index start" in err

    code, out, err = _index(tmp_path, "start", "--policy", str(ROOT / "rows.toml"))
    assert code == 0, err
    started = json.loads(out)
    assert sorted(started["indexes"]) == ["cpu", "cu126", "cu130", "cu132"]
    try:
        code, out, err = _index(tmp_path, "status")
        status = json.loads(out)
        assert code == 0 and status["running"] is True and status["pid"] == started["pid"]
        url = status["indexes"]["cu130"]
        with urllib.request.urlopen(url, timeout=10) as answer:
            assert answer.status == 200
    finally:
        code, _, err = _index(tmp_path, "stop")
    assert code == 0 and "stopped" in err
    code, out, _ = _index(tmp_path, "status")
    assert json.loads(out)["running"] is False


def test_start_without_variants_is_bad_input(tmp_path: Path) -> None:
    code, _, err = _index(tmp_path, "start", "--variants", ",")
    assert code == 2 and "no variants to serve" in err, err


def test_status_and_stop_where_no_index_is_write_nothing(tmp_path: Path) -> None:
    """Read-only where there is nothing: status and stop of a folder with no index create no lock
    file, no folder (``auditwheel show`` writes nothing either); a stop of a real index is above."""
    for action in ("status", "stop"):
        code, _, err = _index(tmp_path, action)
        assert code == 0, err
    assert "no server was running (no local index at " in err
    assert sorted(p.name for p in tmp_path.iterdir()) == []
