"""release.core.nvcc: the toolchain manifest read capped, nvcc's dry run never raising."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from release.core import nvcc


def test_a_manifest_is_read_and_an_oversized_or_odd_one_is_not(tmp_path: Path) -> None:
    (tmp_path / nvcc.MANIFEST).write_text(json.dumps({"cuda_home": "nvidia/cu13"}))
    assert nvcc.read_manifest(tmp_path) == {"cuda_home": "nvidia/cu13"}
    (tmp_path / nvcc.MANIFEST).write_text(json.dumps({"pad": "x" * nvcc.MANIFEST_CAP}))
    assert nvcc.read_manifest(tmp_path) is None  # must fail: past the cap, not read whole
    (tmp_path / nvcc.MANIFEST).write_text("[1, 2]")
    assert nvcc.read_manifest(tmp_path) is None
    assert nvcc.read_manifest(tmp_path / "missing") is None


def test_the_dry_run_names_nvccs_home_or_nothing(tmp_path: Path) -> None:
    assert nvcc.dryrun(tmp_path / "no-nvcc", {"PATH": ""}) == ""
    found = shutil.which("nvcc")
    if found is None:
        pytest.fail("this machine's nvcc is on PATH (the README's setup); none was found")
    assert "_HERE_=" in nvcc.dryrun(found, {"PATH": f"{Path(found).parent}:/usr/bin:/bin"})


def test_the_shells_nvcc_flags_do_not_hide_nvccs_home() -> None:
    """Issue 33 item 6: NVCC_APPEND_FLAGS with a flag nvcc refuses with -E made the dry run print no
    _HERE_, and the toolchain's home was guessed from the wrapper's folder ("point CUDA_HOME at ...")."""
    found = shutil.which("nvcc")
    if found is None:
        pytest.fail("this machine's nvcc is on PATH (the README's setup); none was found")
    env = {"PATH": f"{Path(found).parent}:/usr/bin:/bin"}
    for name in nvcc.USER_FLAGS:
        assert "_HERE_=" in nvcc.dryrun(found, {**env, name: "-not-an-nvcc-flag"}), name


def test_a_build_finds_the_host_toolkit_whatever_the_shells_nvcc_flags() -> None:
    from release.wheelbuild.toolchain import probe_nvcc

    found = shutil.which("nvcc")
    if found is None:
        pytest.fail("this machine's nvcc is on PATH (the README's setup); none was found")
    env = {"PATH": f"{Path(found).parent}:/usr/bin:/bin"}
    plain = probe_nvcc(Path(found), env)
    flagged = probe_nvcc(Path(found), {**env, "NVCC_APPEND_FLAGS": "-not-an-nvcc-flag"})
    assert plain.cuda_home is not None and flagged.cuda_home == plain.cuda_home
