"""The cache locks (release.core.locks) and the callers that take them: each still locks the file
an earlier wheelwright locked, so an older and a newer run on one machine exclude each other.

"Held as before" is the lock as earlier releases took it: the file opened for appending and
``fcntl.flock`` held on it, nothing written. Real files, real locks, real threads.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from release.core.locks import exclusive, install_once, lock_file
from release.core.machine import PythonInfo
from release.smoke import resolve
from release.smoke.wheelhouse import fill, wheelhouse_for
from release.wheelbuild.host.isolated import (
    MARKER,
    MARKER_VERSION,
    Constraints,
    ensure_build_env,
    env_key,
    env_spec,
    parse_build_system,
    parse_constraints,
)

BLOCKED_S = 0.3  # long enough for a caller that does not wait to have gone on


@contextlib.contextmanager
def held_as_before(path: Path) -> Iterator[Callable[[], None]]:
    """Hold ``path``'s lock as earlier releases did; yields a function that lets go early."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                fcntl.flock(f, fcntl.LOCK_UN)

        try:
            yield release
        finally:
            release()


def in_thread(call: Callable[[], Any]) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # handed to the test thread
            out["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, out


def finished(thread: threading.Thread, out: dict[str, Any]) -> Any:
    thread.join(timeout=30)
    assert not thread.is_alive()
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _ready(folder: Path) -> bool:
    return (folder / "done").is_file()


def _fill(tmp: Path) -> None:
    (tmp / "done").write_text("made\n")


# --------------------------------------------------------------------------- core.locks


def test_install_once_waits_on_the_lock_file_it_is_given(tmp_path: Path) -> None:
    final = tmp_path / "tools" / "thing-1.0"
    given = final.with_name(final.name + ".lock")
    waited: list[str] = []
    with held_as_before(given) as release:

        def waiting(holder: str) -> None:
            waited.append(holder)
            release()  # the other process finishes: this one goes on

        made = install_once(final, ready=_ready, fill=_fill, holder="test", waiting=waiting, lock=given)
    assert made and waited == [""]  # it waited; an earlier release wrote nothing into the file
    assert (final / "done").read_text() == "made\n"
    assert not lock_file(final).exists()  # the default lock file was never taken
    assert given.read_text() == f"test (pid {os.getpid()})\n"


def test_install_once_without_a_lock_file_takes_its_own(tmp_path: Path) -> None:
    """The failing side: the default lock file is not ``<folder>.lock``, so a holder of that does
    not stop it (why a caller whose earlier releases locked ``<folder>.lock`` passes it)."""
    final = tmp_path / "tools" / "thing-1.0"
    waited: list[str] = []
    with held_as_before(final.with_name(final.name + ".lock")):
        assert install_once(final, ready=_ready, fill=_fill, holder="test", waiting=waited.append)
    assert waited == [] and lock_file(final).is_file()


def test_exclusive_says_who_holds_the_lock(tmp_path: Path) -> None:
    lock = tmp_path / "x.lock"
    waited: list[str] = []
    with exclusive(lock, holder="the first"):
        assert lock.read_text() == f"the first (pid {os.getpid()})\n"
        thread, out = in_thread(lambda: _take(lock, waited))
        time.sleep(BLOCKED_S)
        assert thread.is_alive() and "value" not in out  # blocked while the first holds it
    assert finished(thread, out) == "the second" and waited == [f"the first (pid {os.getpid()})"]


def _take(lock: Path, waited: list[str]) -> str:
    with exclusive(lock, holder="the second", waiting=waited.append):
        return lock.read_text().split(" (pid")[0]


# --------------------------------------------------------------------------- the callers


def test_a_build_environment_waits_for_its_lock_and_reuses_what_the_holder_made(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = PythonInfo(Path("/py/bin/python3.12"), "3.12.1")
    cons = Constraints((Path("c"),), parse_constraints("setuptools==84.2.1\n", "c"))
    spec = env_spec(python, ["setuptools"], cons, tmp_path)
    system = parse_build_system('[build-system]\nrequires = ["setuptools"]\n', "p/pyproject.toml")
    with held_as_before(spec.folder.with_name(spec.folder.name + ".lock")) as release:
        thread, out = in_thread(lambda: ensure_build_env(spec, system, env={}, row_id="r1"))
        said = ""
        for _ in range(300):
            said += capsys.readouterr().err
            if "waiting" in said:
                break
            time.sleep(0.05)
        assert f"==> [r1] waiting for another wheelwright process to finish making {spec.folder}" in said
        # the holder makes the environment, then lets go: the waiter must reuse it, not remake it
        spec.bin_dir.mkdir(parents=True)
        spec.interpreter.write_text("")
        marker = {"version": MARKER_VERSION, "key": env_key(python, spec.requires, cons)}
        (spec.folder / MARKER).write_text(json.dumps(marker))
        release()
        assert finished(thread, out) == spec
    assert sorted(p.name for p in spec.folder.iterdir()) == ["bin", MARKER]
    assert "making the isolated build environment" not in capsys.readouterr().err


def test_the_smoke_wheelhouse_fills_only_under_its_lock(tmp_path: Path) -> None:
    house = wheelhouse_for(tmp_path, "cu130", index_url="http://127.0.0.1:1/simple/")
    wheel = tmp_path / "demo-1.0-py3-none-any.whl"
    seen: list[str] = []

    def download(args: list[str]) -> None:
        seen.append(house.lock.read_text())  # who holds it while the dependencies are fetched
        dest = Path(args[args.index("--dest") + 1])
        (dest / "dep-1.0-py3-none-any.whl").write_bytes(b"dep")
        (dest / wheel.name).write_bytes(b"the wheel under test")

    with held_as_before(house.lock) as release:
        thread, out = in_thread(
            lambda: fill(house, wheel, row_id="r1", download=download, install=lambda: None)
        )
        time.sleep(BLOCKED_S)
        assert thread.is_alive() and seen == []  # nothing fetched while another run holds it
        release()
        finished(thread, out)
    assert seen == [f"the smoke of row r1: filling {house.folder} (pid {os.getpid()})\n"]
    assert sorted(p.name for p in house.folder.iterdir()) == [
        ".wheelwright-wheelhouse.json",
        "dep-1.0-py3-none-any.whl",
    ]
    assert house.fresh()


def test_the_pinned_uv_waits_on_its_old_lock_file_and_takes_the_one_made_meanwhile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(resolve, "_from_this_environment", lambda: None)  # a machine without uv here
    final = tmp_path / "tools" / resolve.UV_PIN.replace("==", "-")
    binary = final / "bin" / "uv"
    with held_as_before(final.with_name(final.name + ".lock")) as release:
        thread, out = in_thread(lambda: resolve.find_uv(tmp_path, {"PATH": os.environ.get("PATH", "")}))
        time.sleep(BLOCKED_S)
        assert thread.is_alive()
        binary.parent.mkdir(parents=True)  # the other run installs it, then lets go
        binary.write_text(f"#!/bin/sh\necho 'uv {resolve.UV_VERSION}'\n")
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
        release()
        assert finished(thread, out) == binary
    assert not lock_file(final).exists()
