"""A real process racing publish's uploader (release/publish/guards/seal.py, sealed_twine.py), against
the real local index, real wheels and real twine.

The attacker runs as this user, as a separate process: it polls the publisher's children, as an
attacker would, and the moment the uploader starts it renames another wheel (same name, other
bytes, one that passes the audit too) over the staged file. Before the memfd seal, twine opened
that path about a second later and uploaded the other bytes. Now the uploader reads only the
sealed copy: the index gets the audited bytes, and the changed staged file is named after the
upload. The second attacker also puts the audited bytes back once the uploader is gone: the index
holds the audited bytes either way. The uploader itself refuses a descriptor that is not sealed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.index import PROJECT, publish_policy, release_wheel

from release.core.errors import CheckFailed
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.publish.guards import seal
from release.publish.index.client import fetch_digest, read_listing, remote_hashes
from release.publish.index.local import LocalIndex
from release.publish.staging import publish_session
from release.publish.upload import execute_publish, prepare_publish

pytestmark = pytest.mark.integration
ROW = "cu130-py312-x86_64"

# The attacker: wait for a child of PID whose command line names the uploader, rename OTHER over
# STAGED, write "swapped" to MARK; with RESTORE, wait for that child to be gone (or a zombie) and
# rename RESTORE's copy back, then write "restored".
ATTACKER = r"""
import os, shutil, sys, time
pid, staged, other, mark, restore = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]

def children():
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
        except OSError:
            continue
        fields = stat.rsplit(b")", 1)[1].split()
        if int(fields[1]) == pid and int(entry) != os.getpid() and b"twine" in cmd:
            yield int(entry), fields[0]

deadline = time.monotonic() + 120
child = None
while child is None and time.monotonic() < deadline:
    child = next(iter(children()), None)
if child is None:
    sys.exit("no uploader started")
shutil.copyfile(other, staged + ".evil")
os.replace(staged + ".evil", staged)
open(mark, "a").write("swapped\n")
if restore:
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{child[0]}/stat", "rb") as f:
                if f.read().rsplit(b")", 1)[1].split()[0] == b"Z":
                    break
        except OSError:
            break
    shutil.copyfile(restore, staged + ".back")
    os.replace(staged + ".back", staged)
    open(mark, "a").write("restored\n")
"""


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


def _served(index: LocalIndex, name: str) -> str:
    (entry,) = [f for f in read_listing(index.simple_url("cu130"), PROJECT) if f.filename == name]
    return str(fetch_digest(entry.url, limit=1 << 30).sha256)


def _race(
    tmp_path: Path, policy: Policy, index: LocalIndex, *, restore: bool
) -> tuple[Path, Path, str, object]:
    """Publish one wheel while the attacker races its uploader: (wheel, other, marks, outcome)."""
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    other = release_wheel(tmp_path / "other", policy, ROW, extra={"x/x": b"x"}, audit=False)
    assert other.name == wheel.name and sha256_file(other) != sha256_file(wheel)
    keep = tmp_path / "audited-copy.whl"
    shutil.copyfile(wheel, keep)
    mark = tmp_path / "mark"
    env = {**index.credentials_env("cu130"), "TMPDIR": str(tmp_path)}
    outcome: object
    with publish_session(wheel.parent, env=env, log=lambda line: None) as session:
        prepared = prepare_publish([wheel], index.target(), variant="cu130", policy=policy, session=session,
                                   env=env, log=lambda line: None)  # fmt: skip
        (staged,) = prepared.local
        attacker = subprocess.Popen(
            [
                sys.executable,
                "-c",
                ATTACKER,
                str(os.getpid()),
                str(staged.path),
                str(other),
                str(mark),
                str(keep) if restore else "",
            ]
        )
        try:
            try:
                outcome = execute_publish(prepared, log=lambda line: None)
            except CheckFailed as exc:
                outcome = exc
            assert attacker.wait(timeout=120) == 0
        finally:
            if attacker.poll() is None:
                attacker.kill()
                attacker.wait()
    return wheel, other, mark.read_text(encoding="utf-8"), outcome


def test_a_rename_over_the_staged_file_at_the_uploaders_start_never_reaches_the_index(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    wheel, other, marks, outcome = _race(tmp_path, policy, local_index_server, restore=False)
    assert marks == "swapped\n"  # the attacker did rename the other wheel over the staged file
    on_index = remote_hashes(local_index_server.simple_url("cu130"), PROJECT)
    assert on_index == {wheel.name: sha256_file(wheel)}  # the audited bytes, never the other ones
    assert _served(local_index_server, wheel.name) == sha256_file(wheel) != sha256_file(other)
    assert isinstance(outcome, CheckFailed)  # the second line: the change is named after the upload
    message = str(outcome)
    assert f"{wheel.name}: the staged copy publish re-audited changed after its upload" in message
    assert f"its sha256 is now {sha256_file(other)}" in message and "[rule: sealed-bytes]" in message


def test_a_restore_before_the_after_hash_changes_nothing(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    wheel, other, marks, outcome = _race(tmp_path, policy, local_index_server, restore=True)
    assert marks == "swapped\nrestored\n"
    on_index = remote_hashes(local_index_server.simple_url("cu130"), PROJECT)
    assert on_index == {wheel.name: sha256_file(wheel)}
    assert _served(local_index_server, wheel.name) == sha256_file(wheel) != sha256_file(other)
    # the restore lands before or after the after-hash (the attacker's timing): passed, or named
    assert not isinstance(outcome, CheckFailed) or "changed after its upload" in str(outcome)


def test_the_uploader_refuses_a_descriptor_that_is_not_sealed(tmp_path: Path) -> None:
    script = Path(__file__).parents[2] / "release" / "publish" / "sealed_twine.py"
    plain = tmp_path / "w-1.0-py3-none-any.whl"
    plain.write_bytes(b"not sealed")
    unsealed = os.memfd_create("unsealed", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    sealed = seal.sealed_copy(plain)
    fd = os.open(plain, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.write(unsealed, b"not sealed")
        results = {}
        for what, number in (("a file", fd), ("an unsealed memfd", unsealed), ("sealed", sealed)):
            argv = [
                str(os.getpid()),
                str(number),
                plain.name,
                "0" * 64,
                "--repository-url",
                "http://127.0.0.1:9/",
            ]
            results[what] = subprocess.run(
                [sys.executable, "-P", str(script), *argv],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
    finally:
        for n in (fd, unsealed, sealed):
            os.close(n)
    for what in ("a file", "an unsealed memfd"):
        assert results[what].returncode == 3, results[what].stderr
        assert "sealed upload refused" in results[what].stderr and "nothing was sent" in results[what].stderr
    # the sealed copy gets past the seal check, then its bytes are not the audited ones: refused too
    assert results["sealed"].returncode != 0
    assert (
        "is not sealed" not in results["sealed"].stderr
        and "not a sealed memfd" not in results["sealed"].stderr
    )
