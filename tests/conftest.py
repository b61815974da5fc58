from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers_proc import python_m

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Off for the whole session, module- and session-scoped fixtures' processes included (the autouse
    fixture below restores it after a test that turns it on)."""
    os.environ["WHEELWRIGHT_CPP_CACHE"] = "0"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--regen-golden",
        action="store_true",
        help="rewrite tests/golden/*.json from the current code instead of comparing",
    )


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(autouse=True)
def _no_cpp_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every audit in a test compiles its C++ consumer (the processes it starts too): a finding read back
    from an earlier test's run would hide what the code under test does. The cache's own tests turn it on
    (tests/unit/test_audit_cpp_cache.py)."""
    monkeypatch.setenv("WHEELWRIGHT_CPP_CACHE", "0")


@pytest.fixture(autouse=True)
def _default_verbosity() -> Iterator[None]:
    """A test that runs ``release.cli.main(["-q", ...])`` sets the process-wide verbosity; the next
    test starts from the default again (what a fresh process has)."""
    from release.core import log

    yield
    log.configure(level=log.NORMAL)


@pytest.fixture
def stop_rehearsal_index(tmp_path: Path) -> Iterator[None]:
    """A rehearsal leaves its local index running (by design, for the printed install lines): stop
    the one under ``tmp_path/repo`` when the test ends (``@pytest.mark.usefixtures`` it)."""
    yield
    root = tmp_path / "repo" / ".wheelwright" / "index"
    if root.is_dir():
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        python_m("release", "index", "stop", "--root", str(root), env=env, timeout=120)
