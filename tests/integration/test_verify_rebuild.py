"""``python -m release verify --rebuild ROW`` (issue 25 item 8): a published row is rebuilt from the
checkout into a private temporary folder, on "another machine" (another cache folder and HOME than
the build that was published), and its sha256 compared with the signed manifest's.

Must pass: the rebuild is the manifest's file (exit 0, the digest named). Must fail: the manifest's
digest edited (and signed again by the key holder, so the signature passes and the rebuild is what
fails), and the source changed after publishing: exit 1 naming both digests and the rule. The
checkout is a copy of rows.toml and tinyaxpy in the test's folder; the CPU row keeps it quick
(tests/integration/test_reproducible.py holds the CUDA rows to the same bytes across machines)."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from release.cli import main as release_main
from release.core.hashing import sha256_file
from release.policy.load import load_policy
from release.policy.matrix import expand
from release.publish import manifest as mf
from release.wheelbuild.run import build_row


def verify_main(argv: list[str]) -> int:
    """``python -m release verify ARGV``, in this process."""
    return release_main(["verify", *argv])


pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ROW = "cpu-py312-x86_64"


@dataclasses.dataclass(frozen=True)
class Published:
    checkout: Path
    manifest: Path
    wheel: Path
    key_env: dict[str, str]


def _machine(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process now looks like another machine: its own cache folder and HOME."""
    (tmp_path / name / "home").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(tmp_path / name / "home"))
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path / name / "cache"))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)


@pytest.fixture
def published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Published:
    checkout = tmp_path / "checkout"
    shutil.copytree(
        ROOT / "examples" / "tinyaxpy",
        checkout / "examples" / "tinyaxpy",
        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"),
    )
    shutil.copyfile(ROOT / "rows.toml", checkout / "rows.toml")
    for name in (
        "CUDA_HOME",
        "WHEELWRIGHT_KEEP_TMP",
        "WHEELWRIGHT_SIGNING_PUBLIC_KEY",
        "WHEELWRIGHT_SIGNING_KEY",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")  # the checkout copy has no git history
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "release-key"))  # the key holder's config
    _machine(tmp_path, "publisher", monkeypatch)
    policy = load_policy(checkout / "rows.toml")
    (row,) = [r for r in expand(policy) if r.id == ROW]
    (built,) = build_row(
        row,
        policy_path=checkout / "rows.toml",
        dist_dir=tmp_path / "dist",
        cache_dir=Path(os.environ["WHEELWRIGHT_CACHE"]),
        backend="host",
    )
    entry = mf.ManifestFile(
        built.wheel.name,
        row.variant,
        ROW,
        sha256_file(built.wheel),
        built.wheel.stat().st_size,
        "0" * 64,
        None,
    )
    manifest = mf.write(mf.Manifest("tinyaxpy", "0.3.0", policy.sha256, None, (entry,)), tmp_path / "dist")
    _machine(tmp_path, "verifier", monkeypatch)  # every rebuild below: another machine's folders
    return Published(checkout, manifest, built.wheel, {"XDG_CONFIG_HOME": str(tmp_path / "release-key")})


def _rebuild(p: Published, manifest: Path, *extra: str) -> int:
    return verify_main(
        [
            "--rebuild",
            ROW,
            "--manifest",
            str(manifest),
            "--policy",
            str(p.checkout / "rows.toml"),
            "--backend",
            "host",
            *extra,
        ]
    )


def test_a_rebuild_on_another_machine_is_the_published_wheel_and_an_edited_digest_is_named(
    published: Published, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    digest = sha256_file(published.wheel)
    assert _rebuild(published, published.manifest) == 0
    out = capsys.readouterr().out
    assert f"✓ {published.manifest.name}: signed by the trusted key" in out
    assert f"✓ {ROW}: rebuilt {published.wheel.name}: sha256 {digest}, the manifest's" in out
    assert str(tmp_path / "publisher") not in out

    made = mf.read(published.manifest)  # the key holder signs a manifest whose digest is not the wheel's
    edited = dataclasses.replace(made, files=(dataclasses.replace(made.files[0], sha256="e" * 64),))
    path = mf.write(edited, tmp_path / "edited")
    assert _rebuild(published, path) == 1
    out = capsys.readouterr().out
    assert (
        f"✗ {ROW}: {published.wheel.name}: rebuilt with sha256 {digest}, the manifest says {'e' * 64}" in out
    )
    assert "[rule: reproducible]" in out and "FAILED: 1 of 1 row(s)" in out


def test_a_source_changed_after_publishing_does_not_rebuild_the_published_bytes(
    published: Published, capsys: pytest.CaptureFixture[str]
) -> None:
    source = published.checkout / "examples" / "tinyaxpy" / "csrc" / "axpy_cpu.cpp"
    source.write_text(source.read_text().replace('"host CPU"', '"host CPU, patched"'))
    assert _rebuild(published, published.manifest) == 1
    out = capsys.readouterr().out
    digest = sha256_file(published.wheel)
    assert f"{published.wheel.name}: rebuilt with sha256 " in out and f"the manifest says {digest}" in out
    assert "this checkout does not build the published bytes [rule: reproducible]" in out


def test_an_unsigned_manifest_is_not_rebuilt_against(
    published: Published, capsys: pytest.CaptureFixture[str]
) -> None:
    (published.manifest.parent / (published.manifest.name + ".sig")).unlink()
    assert _rebuild(published, published.manifest) == 1  # refused before anything is built
    assert "it has no signature" in capsys.readouterr().err
