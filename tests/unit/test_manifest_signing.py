"""The release manifest's signature (release.publish.signing, issue 25 item 7): publish signs the
exact bytes it writes with a local Ed25519 key kept outside dist/; verify checks the signature
before it trusts one digest and fails closed. Must-pass and must-fail pairs, through the command
line where the rule meets the user."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from release.cli import main as release_main
from release.core.errors import CheckFailed, InputError
from release.publish import manifest as mf
from release.publish import signing


def verify_main(argv: list[str]) -> int:
    """``python -m release verify ARGV``, in this process."""
    return release_main(["verify", *argv])


ROOT = Path(__file__).resolve().parents[2]
FILE = mf.ManifestFile(
    "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "cu130", "cu130-py312-x86_64", "a" * 64, 123,
    "b" * 64, None,
)  # fmt: skip
MANIFEST = mf.Manifest("tinyaxpy", "0.3.0", "0" * 64, None, (FILE,))


@pytest.fixture
def key_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A HOME and XDG_CONFIG_HOME of the test's own: the key is made there, never in the user's."""
    env = {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for name in (signing.KEY_VAR, signing.PUBLIC_KEY_VAR):
        monkeypatch.delenv(name, raising=False)
    return env


def _verify(path: Path, *extra: str) -> int:
    """verify of a rehearsal target whose local index is not running (``--index-root`` is empty): the
    signature is checked before any index is looked at, so only a passing signature reaches that."""
    return verify_main(
        ["--target", "rehearsal", "--policy", str(ROOT / "rows.toml"), "--manifest", str(path),
         "--index-root", str(path.parent / "no-index"), *extra]
    )  # fmt: skip


def test_publish_signs_with_a_private_key_outside_dist(tmp_path: Path, key_env: dict[str, str]) -> None:
    path = mf.write(MANIFEST, tmp_path / "dist")
    key = tmp_path / "config" / "wheelwright" / signing.KEY_NAME
    assert key.stat().st_mode & 0o777 == 0o600 and key.parent.stat().st_mode & 0o777 == 0o700
    assert key.with_suffix(".pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    sig = json.loads(signing.signature_path(path).read_text())
    assert sig["manifest"] == MANIFEST.name and sig["algorithm"] == "ed25519"
    assert not list((tmp_path / "dist").glob("*.pem"))  # nothing of the key in dist/
    trusted = signing.trusted_key(None, os.environ)
    assert trusted is not None
    said = signing.check_manifest(path, path.read_bytes(), trusted)
    assert (
        said == f"{MANIFEST.name}: signed by the trusted key {trusted.key_id} (this user's signing key {key})"
    )
    again = mf.write(
        MANIFEST, tmp_path / "dist2"
    )  # the same key, the same bytes: a rerun writes the same files
    assert signing.signature_path(again).read_bytes() == signing.signature_path(path).read_bytes()


def test_a_manifest_edited_after_signing_is_refused_naming_it_and_the_rule(
    tmp_path: Path, key_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = mf.write(MANIFEST, tmp_path / "dist")
    path.write_text(path.read_text().replace("a" * 64, "c" * 64))  # another wheel's digest
    assert _verify(path) == 1
    err = capsys.readouterr().err
    assert f"error: {path}: the release manifest is not trusted: its bytes are not the ones signed" in err
    assert "the manifest was edited after it was signed" in err and err.rstrip().endswith(
        "[rule: signed-manifest]"
    )


def test_a_missing_signature_is_refused_unless_allowed_by_the_flag(
    tmp_path: Path, key_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = mf.write(MANIFEST, tmp_path / "dist")
    signing.signature_path(path).unlink()
    assert _verify(path) == 1
    assert f"{path}: the release manifest is not trusted: it has no signature" in capsys.readouterr().err
    with pytest.raises(CheckFailed, match="it has no signature"):
        signing.check_manifest(path, path.read_bytes(), signing.trusted_key(None, os.environ))
    said = signing.check_manifest(path, path.read_bytes(), None, allow_unsigned=True)
    assert "signature NOT checked (--allow-unsigned)" in said


def test_a_signature_by_another_key_is_refused_and_the_signature_never_names_its_own_trust(
    tmp_path: Path, key_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = mf.write(MANIFEST, tmp_path / "dist")  # signed by this user's key
    own = signing.trusted_key(None, os.environ)
    assert own is not None
    other_env = {**key_env, "XDG_CONFIG_HOME": str(tmp_path / "other")}
    forged = mf.write(MANIFEST, tmp_path / "forged", env=other_env)  # someone else's key
    with pytest.raises(
        CheckFailed, match=rf"it is signed by key \w{{16}}, not by the trusted key {own.key_id}"
    ):
        signing.check_manifest(forged, forged.read_bytes(), own)
    # the verifier names the key it trusts: the other key's public half passes the other's signature only
    pub = tmp_path / "other" / "wheelwright" / "release-signing-key.pub"
    monkeypatch.setenv(signing.PUBLIC_KEY_VAR, str(pub))
    theirs = signing.trusted_key(None, os.environ)
    assert theirs is not None and theirs.source == f"{signing.PUBLIC_KEY_VAR}={pub}"
    assert "signed by the trusted key" in signing.check_manifest(forged, forged.read_bytes(), theirs)
    with pytest.raises(CheckFailed, match="not by the trusted key"):
        signing.check_manifest(path, path.read_bytes(), theirs)


def test_no_key_to_check_with_is_bad_input_and_a_shared_key_file_is_refused(
    tmp_path: Path, key_env: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path = mf.write(MANIFEST, tmp_path / "dist", env={**key_env, "XDG_CONFIG_HOME": str(tmp_path / "ci")})
    assert _verify(path) == 2  # this user has no key and was given none: nothing to check with
    assert "no public key to check the release manifest's signature with" in capsys.readouterr().err
    assert (
        _verify(path, "--public-key", str(tmp_path / "ci" / "wheelwright" / "release-signing-key.pub")) != 1
    )
    key = tmp_path / "ci" / "wheelwright" / signing.KEY_NAME
    key.chmod(0o644)
    with pytest.raises(InputError, match=r"readable or writable by others \(mode 0644\)"):
        signing.signing_key({signing.KEY_VAR: str(key)})
