"""A CMake project written for CMake 4.1 or newer (tests/fixtures/idioms/cmake41_findpython): its
policy range reaches 4.1, so CMake's FindPython applies policy CMP0190 and, when cross-compiling,
refuses the ``Interpreter`` component unless ``CMAKE_CROSSCOMPILING_EMULATOR`` is set. Its
pyproject asks scikit-build-core for ``cmake>=4.1``, which comes from PyPI into the build
environment (this machine's CMake is 3.25). The cross build's toolchain names ``env`` as the
emulator where aarch64 programs run here (binfmt_misc), so FindPython runs the build's Python,
which answers for the target. Must-fail: CMake 4.2.3 from PyPI configuring the project with a
toolchain that names no emulator stops at FindPython, and the build's diagnosis names the fix."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.rows import rows_by_id

from release.core.machine import default_cache_dir
from release.core.pip import pip_install_target
from release.emulate import binfmt
from release.resources.cpus import host_arch
from release.wheelbuild.host.cmake_toolchain import findpython_diagnosis, toolchain_text
from release.wheelbuild.run import build_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,  # CMake 4 from PyPI, the aarch64 CUDA runtime wheel (cached after)
    pytest.mark.skipif(host_arch() != "x86_64", reason="cross builds from an x86_64 machine"),
]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "fixtures" / "idioms" / "cmake41_findpython"
POLICY = PROJECT / "rows.toml"
CACHE = default_cache_dir(os.environ)
ROW_ID = "cu130-py311-aarch64"
CMAKE4 = "cmake==4.2.3"  # a CMake with policy CMP0190 (4.1+), as PyPI ships it


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}


def test_a_cmake_4_1_project_cross_builds_with_findpython_naming_the_targets_module(tmp_path: Path) -> None:
    cap = binfmt.capability("aarch64")
    if not cap.runs:
        pytest.fail(f"{cap.reason}; as root: {'; '.join(cap.fix)} (scripts/setup.sh does)")
    (built,) = build_row(
        rows_by_id(POLICY)[ROW_ID],
        policy_path=POLICY,
        dist_dir=tmp_path,
        cache_dir=CACHE,
        backend="host",
        env=_env(),
    )
    names = zipfile.ZipFile(built.wheel).namelist()
    assert "idiom_cmake41/_core.cpython-311-aarch64-linux-gnu.so" in names, names
    done = python_m("release", "audit", ROW_ID, "--policy", str(POLICY), "--dist", str(tmp_path), env=_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_must_fail_cmake_4_without_an_emulator_stops_at_findpython_and_is_diagnosed(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    target = tmp_path_factory.mktemp("cmake4")
    pip_install_target([CMAKE4], target, env=_env())
    (cmake,) = sorted(target.glob("cmake/data/bin/cmake"))
    toolchain = tmp_path / "toolchain.cmake"
    toolchain.write_text(
        toolchain_text(
            "aarch64",
            cc=Path("/usr/bin/aarch64-linux-gnu-gcc"),
            cxx=Path("/usr/bin/aarch64-linux-gnu-g++"),
            sysroot=None,
            cuda_home=None,
            cuda_target=None,
        ),
        encoding="utf-8",
    )
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18...4.1)\nproject(p LANGUAGES CXX)\n"
        "find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)\n",
        encoding="utf-8",
    )
    done = subprocess.run(
        [
            str(cmake),
            "-S",
            str(tmp_path / "src"),
            "-B",
            str(tmp_path / "build"),
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DPython_INCLUDE_DIR={sysconfig.get_paths()['include']}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert done.returncode != 0
    line = findpython_diagnosis(
        done.stdout + done.stderr, "aarch64", ("update-binfmts --enable qemu-aarch64",)
    )
    assert line is not None and "policy CMP0190" in line
