"""The cross link's diagnosis with the real cross linker (Debian's aarch64-linux-gnu-g++): a link
handed a file of this machine fails in each shape GNU ld prints, and the diagnosis's first line
names the file and its ELF machine. Fast: each link takes well under a second."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from release.wheelbuild.host.link_check import link_diagnosis, wrong_machine_files

pytestmark = [pytest.mark.integration]
CROSS = "aarch64-linux-gnu-g++"


@pytest.fixture(scope="module")
def parts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which(CROSS) is None:
        pytest.fail(f"{CROSS} is missing: scripts/setup.sh installs g++-aarch64-linux-gnu")
    folder = tmp_path_factory.mktemp("link")
    (folder / "helper.c").write_text("int helper(void) { return 1; }\n", encoding="utf-8")
    (folder / "main.c").write_text(
        "int helper(void);\nint main(void) { return helper(); }\n", encoding="utf-8"
    )
    subprocess.run(["gcc", "-shared", "-fPIC", "helper.c", "-o", "libhelper.so"], cwd=folder, check=True)
    subprocess.run(["gcc", "-c", "-fPIC", "helper.c", "-o", "helper_x86.o"], cwd=folder, check=True)
    subprocess.run([CROSS, "-shared", "-fPIC", "helper.c", "-o", "libgood.so"], cwd=folder, check=True)
    return folder


def _link(folder: Path, *args: str) -> str:
    result = subprocess.run(
        [CROSS, "main.c", *args, "-o", "main"], cwd=folder, capture_output=True, text=True
    )
    assert result.returncode != 0, "the cross link was expected to fail"
    return result.stdout + result.stderr


def test_a_library_named_by_path_file_in_wrong_format(parts: Path) -> None:
    out = _link(parts, str(parts / "libhelper.so"))
    assert "file in wrong format" in out
    first = (link_diagnosis(out, "aarch64") or "").splitlines()[0]
    assert f"libhelper.so ({parts / 'libhelper.so'}, x86_64)" in first


def test_a_library_searched_with_l_skipping_incompatible(parts: Path) -> None:
    out = _link(parts, f"-L{parts}", "-lhelper")
    assert "skipping incompatible" in out
    first = (link_diagnosis(out, "aarch64") or "").splitlines()[0]
    assert f"libhelper.so (-lhelper, {parts / 'libhelper.so'}, x86_64)" in first


def test_an_object_of_this_machine_relocations_in_generic_elf(parts: Path) -> None:
    out = _link(parts, str(parts / "helper_x86.o"))
    assert "Relocations in generic ELF (EM: 62)" in out
    found = wrong_machine_files(out)
    assert (str(parts / "helper_x86.o"), None, "x86_64") in found
    assert "helper_x86.o" in (link_diagnosis(out, "aarch64") or "").splitlines()[0]


def test_a_link_failing_for_another_reason_gets_no_diagnosis(parts: Path) -> None:
    """Must-pass: an aarch64 library that lacks the symbol: the linker's own words stand alone."""
    (parts / "empty.c").write_text("int other(void) { return 0; }\n", encoding="utf-8")
    subprocess.run([CROSS, "-shared", "-fPIC", "empty.c", "-o", "libempty.so"], cwd=parts, check=True)
    out = _link(parts, str(parts / "libempty.so"))
    assert "undefined reference to `helper" in out
    assert link_diagnosis(out, "aarch64") is None
