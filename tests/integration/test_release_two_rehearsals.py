"""Two `release --rehearsal` in one checkout, started a moment apart (issue 25 item 6, done when).

The only test here that runs a whole rehearsal: the first one builds, audits, smoke-tests,
publishes to the local index and checks what pip and uv install from it, exit 0. While it runs,
a second one in the same checkout refuses at once (``--wait 0``) naming the first (pid and
command line): dist/ is the first's for its whole run. Once the first publishes, stopping the
local index and a publish (`python -m release publish`) from a dist/ of its own in the same checkout refuse too, naming it: the
local index is the first's (its lease) until its last install check. Neither breaks the first's run. The first is paused (SIGSTOP) while those two ask,
so the test does not depend on how fast the machine is. The cheaper tests of the same code paths,
with real processes, are in test_publish_run_lock.py.
"""

from __future__ import annotations

import html
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.repo import commit_all, copy_example

from release.publish.guards import lock
from release.publish.index.local import stop
from release.publish.step import LOCAL_INDEX_DIR
from release.resources.cpus import host_arch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def test_a_second_rehearsal_in_one_checkout_refuses_naming_the_first_which_finishes(tmp_path: Path) -> None:
    repo = commit_all(copy_example(tmp_path / "repo"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    row = f"cpu-py312-{host_arch()}"
    args = [sys.executable, "-m", "release", "release", "--rehearsal", "--policy", str(repo / "rows.toml"),
            "--backend", "host", row]  # fmt: skip
    first = subprocess.Popen(
        args, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and first.poll() is None:
            holder = lock.read_holder(repo / "dist")
            if holder is not None and holder.pid == first.pid:
                break
            time.sleep(0.05)
        assert first.poll() is None, first.communicate()
        same = subprocess.run([*args, "--wait", "0"], cwd=repo, env=env, capture_output=True, text=True,
                              timeout=120)  # fmt: skip
        assert same.returncode == 4, same.stdout + same.stderr
        assert f"is in use by another wheelwright run: pid {first.pid} on " in same.stderr
        assert f"`python -m release release --rehearsal --policy {repo / 'rows.toml'}" in same.stderr
        # the first publishes: from its first use of the local index to its last install check it
        # holds a lease there, and neither a stop nor another run's publish may touch the index
        leases = repo / LOCAL_INDEX_DIR / "leases"
        while time.monotonic() < deadline + 600 and first.poll() is None:
            leased = any(p.name.startswith(f"{first.pid}-") for p in leases.glob("*.json"))
            if leased and lock.current_holder(repo / LOCAL_INDEX_DIR) is None:  # uploaded; checking installs
                break
            time.sleep(0.02)
        # the first is paused (SIGSTOP) while the others ask: its window between claiming the lease and
        # its last install check is a few seconds, shorter than two commands' start on a loaded machine
        assert first.poll() is None, "the first rehearsal ended before it used the index: nothing was tested"
        os.kill(first.pid, signal.SIGSTOP)
        try:
            stopping = subprocess.run(
                [sys.executable, "-m", "release", "index", "stop", "--root", str(repo / LOCAL_INDEX_DIR)],
                cwd=repo, env=env, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            publish = [sys.executable, "-m", "release", "publish", "--target", "rehearsal", "--policy",
                       str(repo / "rows.toml"), "--dist", str(tmp_path / "dist-b"), "--wait", "0", row]  # fmt: skip
            apart = subprocess.run(publish, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        finally:
            os.kill(first.pid, signal.SIGCONT)
        assert first.poll() is None, "the first rehearsal ended before the others asked: nothing was tested"
        assert stopping.returncode == 4, stopping.stderr
        assert (
            f"cannot stop the local index ({repo / LOCAL_INDEX_DIR}): another wheelwright run is using it: pid {first.pid} on "
            in stopping.stderr
        )
        assert apart.returncode == 4, apart.stdout + apart.stderr
        assert "cannot use the local index" in apart.stderr and f"pid {first.pid} on " in apart.stderr
        out, err = first.communicate(timeout=900)
        assert first.returncode == 0, out + err
        assert "Published to the target's indexes" in out
        assert "✗" not in out  # every install check passed
        # the release page, written again after publish, opens with the row's line as printed: "uploaded"
        line = next(x for x in out.splitlines() if x.startswith(row))
        page = html.unescape((repo / "dist" / "audit.html").read_text(encoding="utf-8"))
        assert "uploaded" in line and line in page[: page.index('id="reports"')], line
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate(timeout=60)  # its pipes closed, whatever happened (else a ResourceWarning
        # surfaces in a later test, where pytest's unraisable-exception check fails that test)
        stop(repo / LOCAL_INDEX_DIR)
