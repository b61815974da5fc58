"""Toolchain resolution: the pure version logic, and resolution against this machine's tools.

In the integration tier: resolution runs nvcc (the host's, or fake ones).

Tests that need the host nvcc 13.0 skip where there is none. A few use a fake nvcc (a
shell script printing a version) to reach the CUDA_HOME paths no real toolkit here
offers; their names say "fake".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.core.errors import ToolError
from release.core.nvcc import MANIFEST
from release.policy.trains import pypi_nvcc_version
from release.wheelbuild.toolchain import (
    find_cudart,
    missing_toolchain_message,
    parse_nvcc_version,
    pypi_cache_name,
    pypi_toolchain,
    resolve_toolchain,
    version_matches,
)

pytestmark = pytest.mark.integration

ROWS = rows_by_id()

NVCC_13_0 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_12_4 = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2024 NVIDIA Corporation
Built on Thu_Mar_28_02:18:24_PDT_2024
Cuda compilation tools, release 12.4, V12.4.131
Build cuda_12.4.r12.4/compiler.34097967_0
"""


def _host_nvcc_13_0() -> bool:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        return False
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=False, timeout=60).stdout
    return "release 13.0," in out


needs_host_nvcc = pytest.mark.skipif(not _host_nvcc_13_0(), reason="needs a host nvcc 13.0 on PATH")


# --------------------------------------------------------------------------- pure


def test_parse_nvcc_version() -> None:
    assert parse_nvcc_version(NVCC_13_0) == ("13.0", "13.0.88")
    assert parse_nvcc_version(NVCC_12_4) == ("12.4", "12.4.131")
    assert parse_nvcc_version("nvcc fatal : Unknown option '--version'") is None
    assert parse_nvcc_version("") is None


@pytest.mark.parametrize(
    ("found", "train", "ok"),
    [
        ("13.0", "13.0", True),
        ("13.0.88", "13.0", True),
        ("13.2", "13.0", False),
        ("13.0", "13.2", False),
        ("12.6", "12.6", True),
        ("12.60", "12.6", False),
        ("12.4", "12.6", False),
        ("13", "13.0", False),
        ("", "13.0", False),
        ("13.x", "13.0", False),
    ],
)
def test_version_matches_is_exact_major_minor(found: str, train: str, ok: bool) -> None:
    assert version_matches(found, train) is ok


def test_pypi_pins() -> None:
    row = ROWS["cu132-py312-x86_64"]
    assert pypi_nvcc_version(row.pypi_toolchain) == "13.2.86"
    assert pypi_cache_name("13.2.86") == "cuda-13.2.86"
    assert pypi_nvcc_version(("nvidia-cuda-runtime==13.2.86",)) is None
    assert pypi_nvcc_version(("NVIDIA_CUDA_NVCC==13.0.88",)) == "13.0.88"


def test_missing_toolchain_message_for_cuda_12_6() -> None:
    row = ROWS["cu126-py312-x86_64"]
    text = missing_toolchain_message(row, tried=["CUDA_HOME is not set", "nvcc on PATH: ... is CUDA 13.0"])
    assert text.startswith("row cu126-py312-x86_64 needs a CUDA 12.6 toolchain")
    assert "CUDA_HOME is not set" in text
    assert "there is no nvcc on PyPI for CUDA 12" in text
    assert row.host_toolchain_hint in text
    assert "pytorch/manylinux2_28-builder:cuda12.6" in text
    assert "--backend container" in text


# --------------------------------------------------------------------------- resolution


def _env_without_cuda(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    env.update(extra)
    return env


def _path_without_nvcc() -> str:
    return os.pathsep.join(
        p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not (Path(p) / "nvcc").exists()
    )


def test_cpu_row_needs_no_toolchain(tmp_path: Path) -> None:
    assert resolve_toolchain(ROWS["cpu-py312-x86_64"], env={}, cache_dir=tmp_path) is None


@needs_host_nvcc
def test_host_nvcc_of_the_train_is_used_with_its_real_home(tmp_path: Path) -> None:
    tc = resolve_toolchain(ROWS["cu130-py312-x86_64"], env=_env_without_cuda(), cache_dir=tmp_path)
    assert tc is not None
    assert tc.source == "host" and tc.version == "13.0" and re.fullmatch(r"13\.0\.\d+", tc.full_version)
    # /usr/local/bin/nvcc may be a wrapper script: the home is where nvcc really lives
    assert (tc.cuda_home / "bin" / "nvcc").is_file() and tc.nvcc == tc.cuda_home / "bin" / "nvcc"
    assert (tc.lib_dir / "libcudart.so.13").exists()
    assert not any(tmp_path.iterdir()), "nothing is installed when the host has the train"


@needs_host_nvcc
def test_host_nvcc_of_another_train_is_not_used(tmp_path: Path) -> None:
    """13.2 with only a 13.0 nvcc here: the PyPI pins are next (described, not installed)."""
    tc = resolve_toolchain(
        ROWS["cu132-py312-x86_64"], env=_env_without_cuda(), cache_dir=tmp_path, install=False
    )
    assert tc is not None and tc.source == "pypi" and not tc.installed
    assert tc.full_version == "13.2.86"
    assert tc.cuda_home == tmp_path / "cuda-13.2.86" / "nvidia" / "cu13"


@needs_host_nvcc
def test_cuda_12_6_without_a_toolkit_names_what_it_needs(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as info:
        resolve_toolchain(ROWS["cu126-py312-x86_64"], env=_env_without_cuda(), cache_dir=tmp_path)
    text = str(info.value)
    assert "needs a CUDA 12.6 toolchain" in text
    assert "CUDA_HOME is not set" in text
    assert "is CUDA 13.0" in text and ", not 12.6" in text
    assert "no nvcc on PyPI for CUDA 12" in text
    assert "pytorch/manylinux2_28-builder:cuda12.6" in text
    assert info.value.return_code == 3


def test_no_nvcc_at_all(tmp_path: Path) -> None:
    env = _env_without_cuda(PATH=_path_without_nvcc())
    with pytest.raises(ToolError, match="no nvcc on PATH"):
        resolve_toolchain(ROWS["cu126-py312-x86_64"], env=env, cache_dir=tmp_path)


def test_cuda_home_without_nvcc(tmp_path: Path) -> None:
    env = _env_without_cuda(CUDA_HOME=str(tmp_path / "nothing"))
    with pytest.raises(ToolError, match=r"CUDA_HOME=.*nothing has no bin/nvcc"):
        resolve_toolchain(ROWS["cu130-py312-x86_64"], env=env, cache_dir=tmp_path)


@needs_host_nvcc
def test_cuda_home_of_another_train_is_an_error_not_skipped(tmp_path: Path) -> None:
    host = resolve_toolchain(ROWS["cu130-py312-x86_64"], env=_env_without_cuda(), cache_dir=tmp_path)
    assert host is not None
    env = _env_without_cuda(CUDA_HOME=str(host.cuda_home))
    with pytest.raises(ToolError) as info:
        resolve_toolchain(ROWS["cu132-py312-x86_64"], env=env, cache_dir=tmp_path)
    assert f"reports CUDA 13.0 (V{host.full_version})" in str(info.value)
    assert "needs CUDA 13.2 exactly" in str(info.value)
    tc = resolve_toolchain(ROWS["cu130-py312-x86_64"], env=env, cache_dir=tmp_path)
    assert tc is not None and tc.source == "cuda_home" and tc.cuda_home == host.cuda_home


def _fake_toolkit(root: Path, release: str, full: str, *, cudart: str | None) -> Path:
    (root / "bin").mkdir(parents=True)
    nvcc = root / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{full}'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IXUSR)
    if cudart is not None:
        (root / "lib64").mkdir()
        (root / "lib64" / cudart).write_bytes(b"")
    return root


def test_fake_cuda_home_12_6_is_used_for_the_12_6_row(tmp_path: Path) -> None:
    home = _fake_toolkit(tmp_path / "cuda-12.6", "12.6", "12.6.85", cudart="libcudart.so.12")
    tc = resolve_toolchain(
        ROWS["cu126-py312-x86_64"], env=_env_without_cuda(CUDA_HOME=str(home)), cache_dir=tmp_path
    )
    assert tc is not None
    assert (tc.source, tc.version, tc.full_version) == ("cuda_home", "12.6", "12.6.85")
    assert tc.cuda_home == home and tc.lib_dir == home / "lib64"


def test_fake_cuda_home_without_runtime_is_refused(tmp_path: Path) -> None:
    home = _fake_toolkit(tmp_path / "cuda-12.6", "12.6", "12.6.85", cudart=None)
    with pytest.raises(ToolError, match=r"no libcudart\.so\.12"):
        resolve_toolchain(
            ROWS["cu126-py312-x86_64"], env=_env_without_cuda(CUDA_HOME=str(home)), cache_dir=tmp_path
        )


def test_find_cudart_layouts(tmp_path: Path) -> None:
    (tmp_path / "targets" / "sbsa-linux" / "lib").mkdir(parents=True)
    (tmp_path / "targets" / "sbsa-linux" / "lib" / "libcudart.so.13").write_bytes(b"")
    assert find_cudart(tmp_path, 13) == tmp_path / "targets" / "sbsa-linux" / "lib"
    assert find_cudart(tmp_path, 12) is None


def test_an_interrupted_pypi_install_is_not_reused(tmp_path: Path) -> None:
    """A folder without the manifest (an install cut short) or with other pins is not trusted."""
    row = ROWS["cu132-py312-x86_64"]
    partial = tmp_path / "cuda-13.2.86"
    _fake_toolkit(partial / "nvidia" / "cu13", "13.2", "13.2.86", cudart="libcudart.so.13")
    (tmp_path / ".cuda-13.2.86.abc.tmp").mkdir()  # a leftover temporary folder
    tc = pypi_toolchain(row, cache_dir=tmp_path, env=dict(os.environ), install=False)
    assert not tc.installed
    (partial / MANIFEST).write_text(json.dumps({"pins": ["other==1"], "cuda_home": "nvidia/cu13"}))
    assert not pypi_toolchain(row, cache_dir=tmp_path, env=dict(os.environ), install=False).installed


def test_fake_complete_pypi_install_is_reused(tmp_path: Path) -> None:
    row = ROWS["cu132-py312-x86_64"]
    final = tmp_path / "cuda-13.2.86"
    home = final / "nvidia" / "cu13"
    _fake_toolkit(home, "13.2", "13.2.86", cudart=None)
    (home / "lib").mkdir()
    (home / "lib" / "libcudart.so.13").write_bytes(b"")
    (final / MANIFEST).write_text(
        json.dumps({"version": 1, "pins": list(row.pypi_toolchain), "cuda_home": "nvidia/cu13"})
    )
    tc = pypi_toolchain(row, cache_dir=tmp_path, env=dict(os.environ), install=False)
    assert tc.installed and tc.source == "pypi" and tc.cuda_home == home and tc.lib_dir == home / "lib"
