"""Claims on the local index are kernel locks (release/publish/index/claims.py, lease.py), against a
real local index, a real ``python -m release index stop`` and real pip.

A run claims the index (as a rehearsal's publish does) and then checks what pip fetches from it
(as its install checks do). Meanwhile its lease file and the whole ``leases/`` folder are deleted
and ``index stop`` is run: the kernel still shows the run's claim, so the stop is refused, naming
the run's pid from the kernel's lock table, and the run's pip fetch succeeds. Before, the stop
went through and the run's install checks failed. Once the run has ended, the stop goes through.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.index import PROJECT, build_tiny_wheel

from release.publish.index import claims
from release.publish.index import lease as index_lease
from release.publish.index.local import attach, start_detached, stop

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

# The run: claim the index, say so, wait for GO to exist, then fetch the project with pip from URL.
RUN = r"""
import subprocess, sys, time
from pathlib import Path
from release.publish.index.lease import claim
root, go, url, dest = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
claim(root, wait_s=0)
print("claimed", flush=True)
while not go.exists():
    time.sleep(0.02)
pip = subprocess.run([sys.executable, "-m", "pip", "download", "--isolated", "--no-deps", "--index-url", url,
                      "-d", dest, sys.argv[5]], capture_output=True, text=True, env={"PIP_CONFIG_FILE": "/dev/null"})
print("install check", "ok" if pip.returncode == 0 else "failed: " + pip.stderr[-400:], flush=True)
sys.exit(pip.returncode)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def _stop(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "release", "index", "stop", "--root", str(root)],
                          capture_output=True, text=True, env=_env(), cwd=REPO, timeout=120, check=False)  # fmt: skip


def test_a_deleted_lease_does_not_let_index_stop_through_while_a_run_checks_installs(tmp_path: Path) -> None:
    root = tmp_path / "index"
    index = start_detached(["cu130"], root)
    try:
        build_tiny_wheel(index.folder("cu130"))
        go = tmp_path / "go"
        run = subprocess.Popen(
            [sys.executable, "-c", RUN, str(root), str(go), index.simple_url("cu130"), str(tmp_path / "got"), PROJECT],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(),
        )  # fmt: skip
        assert run.stdout is not None and run.stdout.readline().strip() == "claimed", run.communicate(
            timeout=30
        )
        (lease_file,) = (root / index_lease.LEASES_DIR).glob("*.json")
        shutil.rmtree(root / index_lease.LEASES_DIR)  # the lease files, all gone

        stopped = _stop(root)
        assert stopped.returncode == 4, stopped.stderr
        assert (
            f"cannot stop the local index ({root.resolve()}): another wheelwright run is using it: pid {run.pid}"
            in (stopped.stderr)
        )
        assert (
            "(its lease file is gone; named by the kernel)" in stopped.stderr
            and "[rule: one-run]" in stopped.stderr
        )
        assert attach(root).pid == index.pid  # still running

        go.touch()
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0 and "install check ok" in out, out + err
        assert claims.holder_pids(root) == []  # the run ended: the kernel dropped its claim
        assert lease_file.name.startswith(f"{run.pid}-")

        # the case that must pass: no run uses it, the stop goes through
        after = _stop(root)
        assert after.returncode == 0 and "stopped" in after.stderr, after.stderr
    finally:
        stop(root)


def test_fdinfo_names_only_open_file_description_locks_on_that_folder() -> None:
    held = "pos:\t0\nflags:\t02300000\nlock:\t1: OFDLCK ADVISORY  READ -1 fe:00:2409895 0 EOF\n"
    assert claims.fdinfo_holds(held, "fe:00:2409895")
    assert not claims.fdinfo_holds(held, "fe:00:2409896")  # another folder
    assert not claims.fdinfo_holds(held.replace("OFDLCK", "FLOCK"), "fe:00:2409895")  # the root's flock
    assert not claims.fdinfo_holds("pos:\t0\nflags:\t02300000\n", "fe:00:2409895")  # no lock


def test_a_claim_is_seen_by_another_process_and_dropped_with_its_holder(tmp_path: Path) -> None:
    root = tmp_path / "index"
    root.mkdir()
    code = "import sys, time\nfrom pathlib import Path\nfrom release.publish.index import claims\n"
    code += "claims.take(Path(sys.argv[1]))\nprint('held', flush=True)\ntime.sleep(60)\n"
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(root)], stdout=subprocess.PIPE, text=True, env=_env()
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert claims.others_hold(root) and claims.holder_pids(root) == [holder.pid]
        claims.take(root)  # shared: this process claims beside it
        assert claims.holds(root) and claims.others_hold(root)
        claims.give_back(root)
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    deadline = time.monotonic() + 5
    while claims.others_hold(root) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not claims.others_hold(root) and claims.holder_pids(root) == []
