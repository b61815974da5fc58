from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.durations import ModuleTime, add, summary_lines
from helpers.index import VARIANTS, FaultProxy, InstallVenv, TinyWheelFactory, build_tiny_wheel
from helpers.proc import python_m

from release.core import proc
from release.publish.index.local import LocalIndex, local_index

ROOT = Path(__file__).resolve().parent.parent


def pytest_configure(config: pytest.Config) -> None:
    """Off for the whole session, module- and session-scoped fixtures' processes included (the autouse
    fixture below restores it after a test that turns it on)."""
    os.environ["WHEELWRIGHT_CPP_CACHE"] = "0"


MODULE_TIMES: dict[str, ModuleTime] = {}
COSTLIEST_MODULES = 10


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each test's setup, call and teardown seconds, added to its module's (printed at the end)."""
    add(MODULE_TIMES, report.nodeid, report.when, report.duration)


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """After pytest's slowest tests, the costliest modules with their fixtures, and each folder's total:
    where a tier's time went (docs/ci.md). Not for a run of one module."""
    if len(MODULE_TIMES) < 2:
        return
    shown = min(COSTLIEST_MODULES, len(MODULE_TIMES))
    terminalreporter.write_sep("=", f"costliest {shown} test modules (setup + call + teardown)")
    for line in summary_lines(MODULE_TIMES, COSTLIEST_MODULES):
        terminalreporter.write_line(line)


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


# ---------------------------------------------------- publishing: a local index, wheels, a venv
# (the helpers they are built on, and the publishing tests' other helpers: tests/helpers/index.py)


@pytest.fixture
def tiny_wheel_factory() -> TinyWheelFactory:
    """``tiny_wheel_factory(dest, version=..., tag=..., payload=...)``: a pure-Python wheel."""

    def make(
        dest: Path, *, version: str = "1.5.0+cu130", tag: str = "py3-none-any", payload: str = ""
    ) -> Path:
        return build_tiny_wheel(dest, version=version, tag=tag, payload=payload)

    return make


@pytest.fixture
def local_index_server(tmp_path: Path) -> Iterator[LocalIndex]:
    """A running local index for variants cpu, cu126 and cu130, files under ``tmp_path/index``;
    stopped after the test."""
    with local_index(VARIANTS, tmp_path / "index") as index:
        yield index


@pytest.fixture
def install_venv(tmp_path: Path) -> InstallVenv:
    """A fresh venv (no pip inside); ``install_venv.install(index_url, req)`` installs into it."""
    root = tmp_path / "venv"
    proc.run([sys.executable, "-m", "venv", "--without-pip", str(root)], timeout=60)
    return InstallVenv(root)


@pytest.fixture
def fault_proxy(local_index_server: LocalIndex) -> Iterator[FaultProxy]:
    """A :class:`FaultProxy` in front of ``local_index_server``; closed after the test."""
    proxy = FaultProxy(local_index_server.port)
    try:
        yield proxy
    finally:
        proxy.close()
