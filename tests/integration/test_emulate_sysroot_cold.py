"""The emulated aarch64 CPython's sysroot, made for real from Debian's arm64 packages into a fresh
wheelwright cache: progress said, a manifest written, made once (a second call reads it), a folder
of another recipe or a half-made one replaced, nothing left beside it but its lock."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from release.emulate import binfmt
from release.emulate.recipes import load
from release.emulate.sysroot import ensure_sysroot, sysroot_folder
from release.resources.cpus import host_arch

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,  # Debian's arm64 packages
    pytest.mark.skipif(host_arch() != "x86_64", reason="emulation of aarch64 on an x86_64 machine"),
    pytest.mark.skipif(
        shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None, reason="needs apt"
    ),
]


def test_a_cold_sysroot_is_made_once_with_its_manifest_and_replaced_when_not_whole(tmp_path: Path) -> None:
    cap = binfmt.capability("aarch64")
    if not cap.runs:
        pytest.skip(cap.reason)
    recipe = load().for_python("3.11", "aarch64")
    said: list[str] = []
    started = time.monotonic()
    made = ensure_sysroot(recipe, tmp_path, log=said.append)
    cold = time.monotonic() - started
    assert made.folder == sysroot_folder(tmp_path, recipe)
    assert made.interpreter.is_file() and made.version.startswith("3.11.")
    assert dict(made.env())["QEMU_LD_PREFIX"] == str(made.root)
    assert any(line.startswith("downloading 36 packages") for line in said), said
    assert any("compiling the standard library" in line for line in said), said
    manifest = json.loads((made.folder / "manifest.json").read_text())
    assert manifest["key"] == recipe.key() and manifest["recipe"]["suite"] == "bookworm"
    assert sorted(p["name"] for p in manifest["packages"]) == sorted(recipe.packages)
    assert all(len(p["sha256"]) == 64 for p in manifest["packages"])
    assert (made.root / "lib").is_symlink() and (made.root / "bin").is_symlink()  # merged /usr
    assert not [p for p in made.root.rglob("*") if p.is_symlink() and os.readlink(p).startswith("/")]
    assert sorted(p.name for p in tmp_path.joinpath("emulate").iterdir()) == sorted(
        [made.folder.name, f".{made.folder.name}.lock"]
    )

    said.clear()
    started = time.monotonic()
    again = ensure_sysroot(recipe, tmp_path, log=said.append)
    warm = time.monotonic() - started
    assert again.manifest == made.manifest and said == [] and warm < 1.0, (warm, said)

    # a folder whose manifest is another recipe's (or is missing: a half-made one) is made anew
    broken = dict(manifest, key="0" * 12)
    (made.folder / "manifest.json").write_text(json.dumps(broken))
    remade = ensure_sysroot(recipe, tmp_path, log=said.append)
    assert remade.manifest["key"] == recipe.key() and remade.manifest["made_at"] >= manifest["made_at"]
    print(f"cold {cold:.1f} s, warm {warm:.3f} s, manifest seconds {manifest['seconds']}")
