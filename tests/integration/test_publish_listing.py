"""One name, one file, in every listing (release/publish/index/listing.py), against the real local index.

pypiserver lists every file under a variant's package folder, subfolders included, so a second
file of a release's name placed in ``packages/cu130/sub/`` makes its project page name the file
twice. Real installers then disagree: uv takes the first entry (the stray copy), pip the last
(the audited file). Publish refuses such a listing before uploading and after uploading, naming
what each installer would take; once the copy is gone, the same command goes through.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.index import (
    PROJECT,
    InstallVenv,
    publish_policy,
    release_wheel,
)

from release.core.errors import CheckFailed
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.publish.guards.plan import PublishReport
from release.publish.index.client import read_listing
from release.publish.index.local import LocalIndex
from release.publish.upload import publish

pytestmark = pytest.mark.integration
ROW = "cu130-py311-x86_64"  # this Python's tag: pip and uv install it here
UV = Path(sys.executable).parent / "uv"


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


def _publish(wheel: Path, policy: Policy, index: LocalIndex, **kw: object) -> PublishReport:
    return publish([wheel], index.target(), variant="cu130", policy=policy,
                   env=index.credentials_env("cu130"), log=lambda line: None, **kw)  # type: ignore[arg-type]  # fmt: skip


def _stray(tmp_path: Path, policy: Policy, index: LocalIndex) -> Path:
    """A wheel of the release's name with other bytes, put in a subfolder of the package folder."""
    other = release_wheel(tmp_path / "other", policy, ROW, extra={"stray/marker": b"stray"}, audit=False)
    (index.folder("cu130") / "sub").mkdir(exist_ok=True)
    return Path(shutil.copy(other, index.folder("cu130") / "sub" / other.name))


def _entries(index: LocalIndex) -> list[str]:
    return [str(f.sha256) for f in read_listing(index.simple_url("cu130"), PROJECT)]


def _uv_install(venv: InstallVenv, index_url: str, requirement: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(venv.root), "UV_NO_CONFIG": "1"}
    return subprocess.run(
        [str(UV), "pip", "install", "--python", str(venv.python), "--no-cache", "--no-deps",
         "--index-url", index_url, requirement],
        env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip


def _has_stray(venv: InstallVenv) -> bool:
    return bool(list(venv.root.glob("lib/python*/site-packages/stray/marker")))


def test_a_name_listed_twice_is_refused_before_any_upload_and_installers_disagree_on_it(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, install_venv: InstallVenv
) -> None:
    index = local_index_server
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    assert _publish(wheel, policy, index).uploaded == (wheel.name,)
    stray = _stray(tmp_path, policy, index)
    audited, other = sha256_file(wheel), sha256_file(stray)
    assert _entries(index) == [other, audited]  # the page names the file twice: the stray copy first

    requirement = f"{PROJECT}==1.5.0+cu130"
    assert install_venv.install(index.simple_url("cu130"), requirement).returncode == 0
    assert not _has_stray(install_venv)  # pip took the last entry: the audited file
    shutil.rmtree(install_venv.root)
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(install_venv.root)], check=True, timeout=60
    )
    uv = _uv_install(install_venv, index.simple_url("cu130"), requirement)
    assert uv.returncode == 0, uv.stderr
    assert _has_stray(install_venv)  # uv took the first: the stray copy

    with pytest.raises(CheckFailed) as info:  # the same command again: it used to skip, "already there"
        _publish(wheel, policy, index, local_folder=index.folder("cu130"))
    message = str(info.value)
    assert "the index's listing is wrong:" in message and message.endswith("nothing was uploaded")
    assert f"{wheel.name}: the index lists this name 2 times, and its entries disagree" in message
    assert f"uv the first (sha256 {other}), pip the last (sha256 {audited})" in message
    assert f"keep {index.folder('cu130') / wheel.name}, remove the other copies" in message
    assert "[rule: read-back]" in message and "bump the build number" not in message
    assert _entries(index) == [other, audited]

    stray.unlink()  # the fix the message names: the same command goes through
    assert _publish(wheel, policy, index).skipped == (wheel.name,)


def test_a_name_listed_twice_after_the_upload_fails_the_read_back(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    stray: list[Path] = []

    def a_copy_appears(event: str, filename: str) -> None:
        if event == "uploaded":
            stray.append(_stray(tmp_path, policy, index))

    with pytest.raises(CheckFailed) as info:
        _publish(wheel, policy, index, hook=a_copy_appears)
    message = str(info.value)
    assert "the index does not hold exactly the audited set" in message
    assert f"{wheel.name}: the index lists this name 2 times" in message
    assert (
        f"uv the first (sha256 {sha256_file(stray[0])}), pip the last (sha256 {sha256_file(wheel)})"
        in message
    )
    assert f"1 of 1 file(s) uploaded by this run ({wheel.name})" in message


def test_the_same_bytes_listed_twice_are_refused_too(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex
) -> None:
    index = local_index_server
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    _publish(wheel, policy, index)
    (index.folder("cu130") / "sub").mkdir()
    shutil.copy(wheel, index.folder("cu130") / "sub" / wheel.name)  # the same bytes, a second entry
    with pytest.raises(CheckFailed) as info:
        _publish(wheel, policy, index)
    assert "lists this name 2 times, and its entries disagree (same sha256, other URLs)" in str(info.value)
