"""The release manifest and ``verify``: a rehearsal publishes real wheels to the local index and
writes the manifest into dist/ and beside the wheels; verify passes on that index, and fails
when a file there is replaced, when a stray file of the release's version appears, and when
the index's copy of the manifest is not the manifest."""

from __future__ import annotations

import shutil
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.index import (
    PROJECT,
    build_tiny_wheel,
    publish_policy,
    release_wheel,
    row_of,
    write_smoke_record,
)
from test_publish_readback import LyingProxy

from release.cli import main as release_main
from release.core.errors import StepFailed
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.policy.targets import IndexTarget
from release.publish import manifest as mf
from release.publish import signing
from release.publish.guards.plan import Credentials, read_auth
from release.publish.index.client import download, remote_hashes
from release.publish.index.local import LocalIndex, attach, stop


def verify_main(argv: list[str]) -> int:
    """``python -m release verify ARGV``, in this process."""
    return release_main(["verify", *argv])


pytestmark = pytest.mark.integration
REHEARSAL = "\n[target.rehearsal]\nrehearsal = true\nlocal_server = true\n"


@dataclass(frozen=True)
class Rehearsed:
    root: Path
    policy: Policy
    dist: Path
    wheels: tuple[Path, ...]
    index: LocalIndex

    def verify(self, *extra: str) -> int:
        return verify_main(
            ["--target", "rehearsal", "--policy", self.policy.path, "--dist", str(self.dist), *extra]
        )


def _git_commit(folder: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(folder), "-c", "user.email=t@t", "-c", "user.name=t", *args],
            check=True, capture_output=True, text=True, timeout=60,
        ).stdout.strip()  # fmt: skip

    git("init", "-q")
    git("add", "rows.toml")
    git("commit", "-q", "-m", "the policy")
    return git("rev-parse", "HEAD")


@pytest.fixture
def rehearsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Rehearsed]:
    """`python -m release publish --target rehearsal` in a checkout of its own, from real wheels."""
    monkeypatch.chdir(tmp_path)
    policy = publish_policy(tmp_path, targets=REHEARSAL, pythons=("3.12",))
    commit = _git_commit(tmp_path)
    dist = tmp_path / "dist"
    wheels = []
    for row_id in ("cpu-py312-x86_64", "cu130-py312-x86_64"):
        wheel = release_wheel(dist, policy, row_id)
        write_smoke_record(wheel, row_of(policy, row_id), policy_sha256=policy.sha256)
        wheels.append(wheel)
    root = tmp_path / ".wheelwright" / "index"
    try:
        assert (
            release_main(["publish", "--target", "rehearsal", "--policy", policy.path, "--dist", str(dist)])
            == 0
        )
        index = attach(root)
        made = mf.read(dist / f"{PROJECT}-1.5.0{mf.SUFFIX}")
        assert made.source_commit == commit
        yield Rehearsed(tmp_path, policy, dist, tuple(wheels), index)
    finally:
        stop(root)


def test_the_manifest_names_every_file_and_is_published_beside_the_wheels(rehearsed: Rehearsed) -> None:
    path = rehearsed.dist / f"{PROJECT}-1.5.0{mf.SUFFIX}"
    made = mf.read(path)
    assert (
        made.project == PROJECT and made.release == "1.5.0" and made.policy_sha256 == rehearsed.policy.sha256
    )
    assert {(f.filename, f.variant, f.row, f.sha256) for f in made.files} == {
        (w.name, w.parent.name, f"{w.parent.name}-py312-x86_64", sha256_file(w)) for w in rehearsed.wheels
    }
    assert all(len(f.audit_digest) == 64 and f.smoke is not None for f in made.files)
    for variant in ("cpu", "cu130"):
        chunks: list[bytes] = []
        url = f"{rehearsed.index.upload_url(variant)}+release/{made.name}"
        assert download(url, sink=chunks.append)  # served by the index, beside the wheels
        assert b"".join(chunks) == path.read_bytes()


def test_the_manifest_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    made = mf.Manifest(PROJECT, "1.5.0", "0" * 64, None, ())
    path = mf.write(made, tmp_path / "new" / "dist")  # the folder is made
    assert path.read_text(encoding="utf-8") == made.text() and stat.S_IMODE(path.stat().st_mode) == 0o644
    # no temporary file left; the signature beside it (release.publish.signing)
    assert sorted(p.name for p in path.parent.iterdir()) == [made.name, made.name + ".sig"]
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    with pytest.raises(
        StepFailed, match=rf"^cannot write the release manifest {blocked}/dist/{made.name}: "
    ) as info:
        mf.write(made, blocked / "dist")
    assert info.value.return_code == 4


def test_verify_passes_on_the_rehearsal_index(
    rehearsed: Rehearsed, capsys: pytest.CaptureFixture[str]
) -> None:
    assert rehearsed.verify() == 0
    out = capsys.readouterr().out
    assert "✓ cpu (" in out and "✓ cu130 (" in out and "ok: every index of target 'rehearsal'" in out


def test_verify_fails_when_a_file_on_the_index_is_replaced(
    rehearsed: Rehearsed, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = next(w for w in rehearsed.wheels if "+cu130" in w.name)
    other = release_wheel(
        rehearsed.root / "other", rehearsed.policy, "cu130-py312-x86_64", extra={"x/x": b"x"}
    )
    (rehearsed.index.folder("cu130") / wheel.name).write_bytes(other.read_bytes())
    assert remote_hashes(rehearsed.index.simple_url("cu130"), PROJECT)[wheel.name] == sha256_file(other)
    assert rehearsed.verify() == 1
    out = capsys.readouterr().out
    assert "✗ cu130 (" in out and f"{wheel.name}: on the index with sha256 {sha256_file(other)}" in out
    assert "the file was replaced [rule: read-back]" in out and "✓ cpu (" in out


def test_verify_fails_on_a_stray_file_and_on_a_manifest_that_is_not_the_indexs(
    rehearsed: Rehearsed, capsys: pytest.CaptureFixture[str]
) -> None:
    stray = build_tiny_wheel(
        rehearsed.index.folder("cpu"), version="1.5.0", tag="cp313-cp313-manylinux_2_28_x86_64"
    )
    assert rehearsed.verify() == 1
    assert (
        f"{stray.name}: on the index for this release's version but not in the audited set"
        in capsys.readouterr().out
    )
    stray.unlink()
    assert rehearsed.verify() == 0
    capsys.readouterr()

    made = mf.read(rehearsed.dist / f"{PROJECT}-1.5.0{mf.SUFFIX}")
    other = mf.Manifest(made.project, made.release, "0" * 64, made.source_commit, made.files)
    edited = mf.write(other, rehearsed.root / "edited")  # the same files, another manifest
    assert rehearsed.verify("--manifest", str(edited)) == 1
    out = capsys.readouterr().out
    assert f"{made.name}: the index's copy (" in out and "is not this manifest" in out


def test_verify_needs_a_manifest_and_a_running_local_index(
    rehearsed: Rehearsed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty-dist"
    empty.mkdir()
    assert (
        verify_main(["--target", "rehearsal", "--policy", rehearsed.policy.path, "--dist", str(empty)]) == 2
    )
    assert "no release manifest (*.release.json) in" in capsys.readouterr().err
    stop(rehearsed.index.root_dir)
    assert rehearsed.verify() == 4
    assert "no local index is running there" in capsys.readouterr().err


def test_upload_credentials_read_only_the_uploads_own_server() -> None:
    creds = Credentials("user", "secret", "TWINE_USERNAME/TWINE_PASSWORD")
    same = IndexTarget("cu130", "https://h.example/cu130/", "https://h.example/cu130/simple/", None)
    cdn = IndexTarget("cu130", "https://h.example/cu130/", "https://cdn.example/cu130/simple/", None)
    named = IndexTarget("cpu", "pypi", "pypi", None)
    assert read_auth(same, creds) == ("user", "secret")
    assert read_auth(cdn, creds) is None and read_auth(named, creds) is None and read_auth(same, None) is None


def _proxied(rehearsed: Rehearsed, proxy: LyingProxy) -> list[str]:
    """verify's arguments for a target whose indexes are the rehearsal's behind ``proxy``."""
    targets = "\n[target.proxied]\nrehearsal = true\n" + "".join(
        f'index.{v} = {{ upload_url = "{proxy.url(f"/{v}/")}", simple_url = "{proxy.url(f"/{v}/simple/")}" }}\n'
        for v in ("cpu", "cu130")
    )
    policy = publish_policy(rehearsed.root / "proxied", targets=targets, pythons=("3.12",))
    manifest = rehearsed.dist / f"{PROJECT}-1.5.0{mf.SUFFIX}"
    return ["--target", "proxied", "--policy", policy.path, "--manifest", str(manifest)]


@pytest.fixture
def lying(rehearsed: Rehearsed) -> Iterator[LyingProxy]:
    proxy = LyingProxy(rehearsed.index.port)
    try:
        yield proxy
    finally:
        proxy.close()


def test_verify_downloads_every_file_and_fails_on_other_bytes_under_a_correct_listing(
    rehearsed: Rehearsed, lying: LyingProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _proxied(rehearsed, lying)
    assert verify_main(args) == 0  # nothing lies yet: every file downloaded, the manifest's bytes
    out = capsys.readouterr().out
    assert "1 file(s), each downloaded, its bytes' sha256 the manifest's, nothing else" in out
    assert "(each downloaded and hashed)" in out

    wheel = next(w for w in rehearsed.wheels if "+cu130" in w.name)
    other = release_wheel(
        rehearsed.root / "other", rehearsed.policy, "cu130-py312-x86_64", extra={"x/x": b"x"}
    )
    lying.serve = other.read_bytes()  # every download: other bytes; the listing: the index's, correct
    assert verify_main(args) == 1
    out = capsys.readouterr().out
    assert (
        f"✗ cu130 ({lying.url('/cu130/simple/')}): {wheel.name}: the index lists the audited sha256 "
        f"{sha256_file(wheel)}, but the file it serves is other bytes (sha256 {sha256_file(other)}"
    ) in out
    assert "FAILED: 2 problem(s)" in out  # the cpu wheel too: every download lies

    assert verify_main([*args, "--listing-only"]) == 0  # the fast path keeps the listing's word, and says so
    out = capsys.readouterr().out
    assert "each listed with its sha256 (listing only: not downloaded)" in out
    assert "(listing only: the files were not downloaded)" in out


def test_verify_tells_a_lying_listing_from_a_replaced_file(
    rehearsed: Rehearsed, lying: LyingProxy, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = next(w for w in rehearsed.wheels if "+cu130" in w.name)
    lying.listed = {wheel.name: "e" * 64}
    args = _proxied(rehearsed, lying)
    assert verify_main(args) == 1
    out = capsys.readouterr().out
    assert (
        f"{wheel.name}: the index lists sha256 {'e' * 64}, but the file it serves is the audited one" in out
    )
    assert "the listing is wrong, not the file. Do not remove the file" in out and "was replaced" not in out
    assert verify_main([*args, "--listing-only"]) == 1  # without a download, only the listing can be named
    out = capsys.readouterr().out
    assert f"{wheel.name}: on the index with sha256 {'e' * 64}, the manifest says {sha256_file(wheel)}" in out
    assert "(the listing says so; not downloaded): the file was replaced" in out


def test_verify_fails_on_a_name_listed_twice(
    rehearsed: Rehearsed, capsys: pytest.CaptureFixture[str]
) -> None:
    wheel = next(w for w in rehearsed.wheels if "+cu130" in w.name)
    other = release_wheel(
        rehearsed.root / "other", rehearsed.policy, "cu130-py312-x86_64", extra={"x/x": b"x"}
    )
    sub = rehearsed.index.folder("cu130") / "sub"
    sub.mkdir()
    (sub / wheel.name).write_bytes(other.read_bytes())
    for extra in ((), ("--listing-only",)):
        assert rehearsed.verify(*extra) == 1
        out = capsys.readouterr().out
        assert f"{wheel.name}: the index lists this name 2 times, and its entries disagree" in out
        assert (
            f"uv the first (sha256 {sha256_file(other)}), pip the last (sha256 {sha256_file(wheel)})" in out
        )
        assert f"keep {rehearsed.index.folder('cu130') / wheel.name}, remove the other copies" in out


def test_publish_signs_the_manifest_and_verify_refuses_an_edited_one_before_reading_an_index(
    rehearsed: Rehearsed, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 25 item 7 through a real publish: the manifest's signature is in dist/ and served beside
    the wheels; a copy whose digest was edited after signing is refused naming it and the rule."""
    path = rehearsed.dist / f"{PROJECT}-1.5.0{mf.SUFFIX}"
    sig = signing.signature_path(path)
    for variant in ("cpu", "cu130"):
        chunks: list[bytes] = []
        assert download(f"{rehearsed.index.upload_url(variant)}+release/{sig.name}", sink=chunks.append)
        assert b"".join(chunks) == sig.read_bytes()
    assert rehearsed.verify() == 0
    assert f"✓ {path.name}: signed by the trusted key" in capsys.readouterr().out

    edited = rehearsed.root / "edited" / path.name
    edited.parent.mkdir()
    shutil.copyfile(sig, signing.signature_path(edited))  # the publisher's signature, other bytes
    digest = sha256_file(rehearsed.wheels[0])
    edited.write_text(path.read_text(encoding="utf-8").replace(digest, "e" * 64), encoding="utf-8")
    assert rehearsed.verify("--manifest", str(edited)) == 1
    err = capsys.readouterr().err
    assert f"error: {edited}: the release manifest is not trusted: its bytes are not the ones signed" in err
    assert "edited after it was signed" in err and "[rule: signed-manifest]" in err
