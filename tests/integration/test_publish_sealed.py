"""Sealed bytes: publish uploads exactly the bytes it audited again (release/publish/guards/seal.py,
session.py, reverify.py), against the real local index, real wheels and real twine.

The staging folder is the run's private folder outside dist/ (mode 0700). A staged copy swapped
on disk between the re-audit and its upload (a real file replaced in the staging folder, between
prepare_publish and execute_publish, or from the hook between two uploads) never reaches the
index, and the message names the file; the same wheels publish once nothing swaps them.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.index import (
    PROJECT,
    publish_policy,
    release_wheel,
)

from release.core.errors import CheckFailed
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.publish.guards import seal
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex
from release.publish.prepared import PreparedPublish
from release.publish.staging import STAGING_PREFIX, publish_session
from release.publish.upload import execute_publish, prepare_publish, publish

pytestmark = pytest.mark.integration
ROWS = ("cu130-py311-x86_64", "cu130-py312-x86_64")


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


@pytest.fixture
def private_tmp(tmp_path: Path) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


def _wheels(tmp_path: Path, policy: Policy) -> list[Path]:
    return [release_wheel(tmp_path / "dist", policy, row) for row in ROWS]


def _on_index(index: LocalIndex) -> dict[str, str]:
    return remote_hashes(index.simple_url("cu130"), PROJECT)


def _env(index: LocalIndex, private_tmp: Path) -> dict[str, str]:
    return {**index.credentials_env("cu130"), "TMPDIR": str(private_tmp)}


def _prepare(
    wheels: list[Path], policy: Policy, index: LocalIndex, private_tmp: Path, session: object
) -> PreparedPublish:
    return prepare_publish(
        wheels, index.target(), variant="cu130", policy=policy, session=session,  # type: ignore[arg-type]
        env=_env(index, private_tmp), log=lambda line: None,
    )  # fmt: skip


def _swap(staged: Path, other: Path) -> None:
    """Replace the staged file on disk by ``other``'s bytes, as anyone with this user's rights can
    (the file is read-only; its folder is ours): a new file renamed over it."""
    tmp = staged.with_name(staged.name + ".swap")
    shutil.copyfile(other, tmp)
    os.replace(tmp, staged)


def _other(tmp_path: Path, policy: Policy, row: str) -> Path:
    """A wheel of the same name as ``row``'s, other bytes (it passes the audit too)."""
    return release_wheel(tmp_path / "other", policy, row, extra={"x/x": b"x"}, audit=False)


def test_the_staging_folder_is_private_outside_dist_and_its_copies_read_only(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, private_tmp: Path
) -> None:
    wheels = _wheels(tmp_path, policy)
    dist = wheels[0].parent
    with publish_session(dist, env=_env(local_index_server, private_tmp), log=lambda line: None) as session:
        prepared = _prepare(wheels, policy, local_index_server, private_tmp, session)
        folder = session.staging
        assert folder.parent == private_tmp and folder.name.startswith(f"{STAGING_PREFIX}{os.getpid()}-")
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and folder.stat().st_uid == os.getuid()
        for staged in prepared.local:
            assert staged.path.is_relative_to(folder) and not staged.path.is_relative_to(dist)
            assert stat.S_IMODE(staged.path.stat().st_mode) == 0o400  # sealed
            assert stat.S_IMODE(staged.path.parent.stat().st_mode) == 0o700
            assert sha256_file(staged.path) == staged.sha256
    assert not folder.exists() and list(private_tmp.iterdir()) == []
    assert not (dist / ".publish").exists()  # nothing of the run inside dist/


def test_a_staged_file_swapped_after_the_reaudit_never_reaches_the_index(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, private_tmp: Path
) -> None:
    index, wheels = local_index_server, _wheels(tmp_path, policy)
    other = _other(tmp_path, policy, ROWS[0])
    with publish_session(wheels[0].parent, env=_env(index, private_tmp), log=lambda line: None) as session:
        prepared = _prepare(wheels, policy, index, private_tmp, session)
        staged = next(w for w in prepared.local if w.filename == other.name)
        _swap(staged.path, other)  # between the re-audit (prepare) and the upload (execute)
        with pytest.raises(CheckFailed) as info:
            execute_publish(prepared, log=lambda line: None)
    message = str(info.value)
    assert f"{other.name}: the staged copy publish re-audited changed before its upload" in message
    assert f"its sha256 is now {sha256_file(other)}, the re-audited bytes have {staged.sha256}" in message
    assert "nothing of it was uploaded" in message and "[rule: sealed-bytes]" in message
    assert "0 of 2 file(s) uploaded by this run (none)" in message
    assert _on_index(index) == {}  # nothing reached the index, not even the other, untouched file
    assert "POST" not in (index.root_dir / "server.log").read_text(encoding="utf-8")

    # the case that must pass: the same wheels, nothing swapped, are published
    report = publish(wheels, index.target(), variant="cu130", policy=policy, env=_env(index, private_tmp),
                     log=lambda line: None)  # fmt: skip
    assert sorted(report.uploaded) == sorted(w.name for w in wheels)
    assert _on_index(index) == {w.name: sha256_file(w) for w in wheels}


def test_a_swap_between_two_uploads_stops_the_second_before_it_is_sent(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, private_tmp: Path
) -> None:
    index, wheels = local_index_server, _wheels(tmp_path, policy)
    with publish_session(wheels[0].parent, env=_env(index, private_tmp), log=lambda line: None) as session:
        prepared = _prepare(wheels, policy, index, private_tmp, session)
        first, second = prepared.plan.to_upload
        other = _other(tmp_path, policy, _row_of(second.filename))

        def swap_the_second(event: str, filename: str) -> None:
            if event == "uploaded" and filename == first.filename:
                _swap(second.path, other)

        with pytest.raises(CheckFailed) as info:
            execute_publish(prepared, log=lambda line: None, hook=swap_the_second)
    message = str(info.value)
    assert f"{second.filename}: the staged copy publish re-audited changed before its upload" in message
    assert f"1 of 2 file(s) uploaded by this run ({first.filename})" in message
    assert _on_index(index) == {first.filename: first.sha256}  # the audited first file, nothing else


def _row_of(filename: str) -> str:
    return next(row for row in ROWS if f"cp{row.split('-py')[1].split('-')[0]}-" in filename)


def test_the_uploader_reads_a_sealed_copy_and_a_change_of_the_staged_file_is_named(tmp_path: Path) -> None:
    staged = tmp_path / "w.whl"
    staged.write_bytes(b"audited bytes")
    audited = sha256_file(staged)
    seal.seal(staged)

    def upload_that_races_a_writer(fd: int) -> bytes:
        tmp = tmp_path / "other"
        tmp.write_bytes(b"other bytes")
        os.replace(tmp, staged)  # renamed over the staged path while the uploader reads
        with pytest.raises(PermissionError):  # the sealed copy: no write, by anyone
            os.write(fd, b"x")
        return Path(f"/proc/self/fd/{fd}").read_bytes()

    with pytest.raises(CheckFailed) as info:
        seal.sealed_upload(staged, "w.whl", audited, upload_that_races_a_writer)
    message = str(info.value)
    assert "w.whl: the staged copy publish re-audited changed after its upload" in message
    assert "the uploader read the sealed copy made before" in message and "[rule: sealed-bytes]" in message
    read: list[bytes] = []
    staged.write_bytes(b"audited bytes")
    seal.sealed_upload(
        staged, "w.whl", audited, lambda fd: read.append(Path(f"/proc/self/fd/{fd}").read_bytes())
    )
    assert read == [b"audited bytes"]  # the case that passes: the uploader got the audited bytes
    staged.unlink()
    with pytest.raises(CheckFailed, match=r"w\.whl: .* changed before its upload \(it is gone"):
        seal.sealed_upload(staged, "w.whl", audited, lambda fd: pytest.fail("must not upload"))
    staged.symlink_to(tmp_path / "other")  # a symlink is not followed
    with pytest.raises(CheckFailed, match=r"changed before its upload"):
        seal.sealed_upload(staged, "w.whl", audited, lambda fd: pytest.fail("must not upload"))


def test_a_killed_runs_staging_folder_is_swept_and_a_live_runs_kept(
    tmp_path: Path, policy: Policy, private_tmp: Path
) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True, timeout=60)  # fmt: skip
    dead = private_tmp / f"{STAGING_PREFIX}{gone.stdout.strip()}-abc"
    alive = private_tmp / f"{STAGING_PREFIX}{os.getppid()}-def"  # another run, still going
    for folder in (dead, alive):
        (folder / "cu130").mkdir(parents=True)
    lines: list[str] = []
    dist = tmp_path / "dist"
    with publish_session(dist, env={"TMPDIR": str(private_tmp)}, log=lines.append) as session:
        assert not dead.exists() and alive.exists() and session.staging.exists()
    assert lines == [
        f"removed {dead}: a staging folder left by an earlier run (pid {gone.stdout.strip()}) that was killed"
    ]
    assert sorted(private_tmp.iterdir()) == [alive]
