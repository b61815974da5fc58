"""The whole run holds the lock (issue 25 item 6), with real processes and real locks, nothing mocked.

A holder process takes dist/'s lock through the command layer's own path
(:func:`release.run_lock.command_lock`, what ``python -m release release|build|...`` runs) and
sleeps; a second process takes the same path. Deleting or replacing the lock file while the
first holds it lets no second run in, and the second names the first (pid and command line)
either way. A staging folder is swept only when its run is proved gone (pid dead, or alive as
another process: another start time); a lease on the local index keeps another run from stopping
or emptying it, and one left by a ``kill -9`` is swept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.core import liveness
from release.core.errors import StepFailed
from release.publish.guards import lock
from release.publish.index import lease as index_lease
from release.publish.staging import STAGING_PREFIX, sweep_staging
from release.publish.step import ensure_local_index

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration

HOLD = """
import argparse, sys, time
from pathlib import Path
from release.run_lock import command_lock
args = argparse.Namespace(command="build", dist=sys.argv[1], dry_run=False, wait=float(sys.argv[2]))
with command_lock(args):
    print("held", flush=True)
    time.sleep(float(sys.argv[3]))
print("released", flush=True)
"""

LEASE = """
import sys, time
from pathlib import Path
from release.publish.index.lease import lease
with lease(Path(sys.argv[1]), wait_s=0):
    print("leased", flush=True)
    time.sleep(float(sys.argv[2]))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _start(code: str, *args: str) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    assert child.stdout is not None
    first = child.stdout.readline().strip()
    assert first in ("held", "leased"), child.communicate(timeout=30)
    return child


def _run(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=_env(), timeout=60
    )


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    dist = tmp_path / "dist"
    first = _start(HOLD, str(dist), "0", "60", "first-run-marker")
    try:
        yield first, dist
    finally:
        first.kill()
        first.communicate(timeout=30)


def _refused_naming(result: subprocess.CompletedProcess[str], first: subprocess.Popen[str]) -> str:
    assert result.returncode != 0, result.stdout
    assert "held" not in result.stdout  # the second run never got in
    err = result.stderr
    assert f"is in use by another wheelwright run: pid {first.pid} on " in err, err
    assert "first-run-marker" in err  # the first run's command line
    assert "[rule: one-run]" in err and "changed nothing" in err
    return err


def test_a_second_run_refuses_naming_the_first(holder: tuple[subprocess.Popen[str], Path]) -> None:
    first, dist = holder
    _refused_naming(_run(HOLD, str(dist), "0.3", "0"), first)


def test_deleting_the_lock_file_lets_no_second_run_in(holder: tuple[subprocess.Popen[str], Path]) -> None:
    first, dist = holder
    (dist / lock.LOCK_NAME).unlink()  # the file goes; the first run's lock on dist/ stays
    err = _refused_naming(_run(HOLD, str(dist), "0.3", "0"), first)
    assert "started 20" in err  # from /proc: the file that said it is gone
    (dist / lock.LOCK_NAME).write_text('{"pid": 1, "command": "forged", "started": "x", "host": "h"}\n')
    err = _refused_naming(_run(HOLD, str(dist), "0.3", "0"), first)  # a replaced file names no one else
    assert "forged" not in err


def test_the_second_run_waits_saying_so_and_goes_on_when_the_first_ends(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    first = _start(HOLD, str(dist), "0", "1.5", "first-run-marker")
    second = _run(HOLD, str(dist), "30", "0")
    first.communicate(timeout=30)
    assert second.returncode == 0, second.stderr
    assert "held" in second.stdout
    assert f"waiting up to 30 s for dist/ ({dist.resolve()}): in use by pid {first.pid} on " in second.stderr


def test_a_lock_file_replaced_between_open_and_lock_is_locked_again(tmp_path: Path) -> None:
    # the inode check: a descriptor of a file the path no longer names is let go and the path opened again
    folder = tmp_path / "dist"
    with lock.hold(folder, what="dist/") as me:
        path = folder / lock.LOCK_NAME
        assert lock.read_holder(folder) == me
        assert liveness.flock_holders(folder) == [os.getpid()]
        assert liveness.flock_holders(path) == [os.getpid()]
    assert lock.read_holder(folder) is None and liveness.flock_holders(folder) == []
    path.unlink()  # a later run makes the file again, and locks what the path names
    with lock.hold(folder, what="dist/"):
        assert liveness.flock_holders(path) == [os.getpid()]


def test_a_staging_folder_is_swept_only_when_its_run_is_proved_gone(tmp_path: Path) -> None:
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        ticks = liveness.start_ticks(live.pid)
        assert ticks is not None
        gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True, check=True, timeout=60).stdout.strip()  # fmt: skip
        folders = {
            "alive": tmp_path / f"{STAGING_PREFIX}{live.pid}-t{ticks}-aaaa",  # a run still going: kept
            "reused": tmp_path / f"{STAGING_PREFIX}{live.pid}-t{ticks + 1}-bbbb",  # its pid, another process
            "dead": tmp_path / f"{STAGING_PREFIX}{gone}-t{ticks}-cccc",
            "old-alive": tmp_path / f"{STAGING_PREFIX}{live.pid}-dddd",  # no start time recorded: kept
        }
        for folder in folders.values():
            folder.mkdir()
        legacy = tmp_path / "dist" / ".publish"  # where an earlier version staged: the same rule
        (legacy / f"staging-{live.pid}-eeee").mkdir(parents=True)
        (legacy / f"staging-{gone}-ffff").mkdir()
        lines: list[str] = []
        removed = sweep_staging(tmp_path, lines.append, legacy=legacy)
        assert sorted(removed) == sorted(
            [folders["reused"], folders["dead"], legacy / f"staging-{gone}-ffff"]
        )
        assert (legacy / f"staging-{live.pid}-eeee").is_dir()
        assert folders["alive"].is_dir() and folders["old-alive"].is_dir()
        assert (
            f"removed {folders['reused']}: a staging folder left by an earlier run (pid {live.pid})"
            in lines[0]
        )
    finally:
        live.kill()
        live.wait(timeout=30)
    assert sweep_staging(tmp_path, lambda line: None) == sorted([folders["alive"], folders["old-alive"]])


def test_a_run_using_the_local_index_keeps_another_from_stopping_or_emptying_it(tmp_path: Path) -> None:
    root = tmp_path / "index"
    packages = root / "packages" / "cu130"
    packages.mkdir(parents=True)
    (packages / "a-1.0-py3-none-any.whl").write_bytes(b"the first run's file")
    first = _start(LEASE, str(root), "60", "first-run-marker")
    try:
        with lock.hold(root, what="the local index"), pytest.raises(StepFailed) as info:
            ensure_local_index(["cu130"], root, fresh=True)
        message = str(info.value)
        assert (
            f"cannot stop and empty the local index ({root}): another wheelwright run is using it: pid {first.pid}"
            in message
        )
        assert "first-run-marker" in message and "[rule: one-run]" in message
        assert (packages / "a-1.0-py3-none-any.whl").is_file()  # nothing emptied
        stop = subprocess.run(
            [sys.executable, "-m", "release.publish.index.server", "stop", "--root", str(root)],
            capture_output=True, text=True, env=_env(), timeout=60,
        )  # fmt: skip
        assert stop.returncode == 4 and f"pid {first.pid}" in stop.stderr, stop.stderr
        second = _run(LEASE, str(root), "0")
        assert second.returncode != 0 and "leased" not in second.stdout
        assert (
            f"cannot use the local index ({root}): another wheelwright run is using it: pid {first.pid}"
            in second.stderr
        )
    finally:
        first.send_signal(signal.SIGKILL)  # no cleanup: its lease file stays behind
        first.communicate(timeout=30)
    assert len(list((root / index_lease.LEASES_DIR).glob("*.json"))) == 1
    assert index_lease.in_use_problem(root, "stop the local index") is None  # its run is gone: swept
    assert list((root / index_lease.LEASES_DIR).glob("*.json")) == []
    again = _run(LEASE, str(root), "0")
    assert again.returncode == 0 and "leased" in again.stdout, again.stderr
    deadline = time.monotonic() + 5
    while list((root / index_lease.LEASES_DIR).glob("*.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert list((root / index_lease.LEASES_DIR).glob("*.json")) == []  # a run that ends removes its own


@pytest.mark.parametrize("command", ["build", "smoke", "publish", "audit", "release"])
def test_every_command_of_a_release_holds_dist_for_its_whole_run(
    holder: tuple[subprocess.Popen[str], Path], command: str
) -> None:
    # through `python -m release` itself: refused before the command reads anything (the policy
    # named is not a policy: were the lock not taken first, the command would fail on it, exit 2; a
    # policy file that is not there at all takes no lock, so none is left behind: test_cli_small_ones)
    first, dist = holder
    broken = dist.parent / "broken.toml"
    broken.write_text("this is not a policy [", encoding="utf-8")
    extra = ["--rehearsal"] if command == "release" else ["cu130-py312"] if command == "audit" else []
    result = subprocess.run(
        [sys.executable, "-m", "release", command, *extra, "--policy", str(broken),
         "--dist", str(dist), "--wait", "0"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr
    assert (
        f"error: dist/ ({dist.resolve()}) is in use by another wheelwright run: pid {first.pid} on "
        in result.stderr
    )
    assert "first-run-marker" in result.stderr and "this run waited 0 s" in result.stderr
