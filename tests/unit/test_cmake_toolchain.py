"""release/wheelbuild/host/cmake_toolchain.py: the toolchain file's text (pure), and the check that
fails a toolchain handing the linker libraries of another machine (real ELF files, made here with the
host's gcc and Debian's aarch64 cross gcc)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from release.core.errors import ToolError
from release.wheelbuild.host.cmake_toolchain import (
    TargetPython,
    check_toolchain,
    file_machine,
    findpython_diagnosis,
    library_folders,
    toolchain_env,
    toolchain_text,
    wrong_machine_libraries,
)

CROSS_GCC = "aarch64-linux-gnu-gcc"
HOME = Path("/cache/cross/aarch64/cuda-13.0.88-abc")
TARGET = HOME / "targets" / "aarch64-linux"


def _text(home: Path | None = HOME, target: Path | None = TARGET) -> str:
    return toolchain_text(
        "aarch64",
        cc=Path("/usr/bin/aarch64-linux-gnu-gcc"),
        cxx=Path("/usr/bin/aarch64-linux-gnu-g++"),
        sysroot=Path("/usr/aarch64-linux-gnu"),
        cuda_home=home,
        cuda_target=target,
    )


def test_the_toolchain_turns_on_cmakes_cross_mode_for_the_target_and_its_cuda_home() -> None:
    lines = _text().splitlines()
    assert "set(CMAKE_SYSTEM_NAME Linux)" in lines
    assert "set(CMAKE_SYSTEM_PROCESSOR aarch64)" in lines  # FindCUDAToolkit: CUDAToolkit_TARGET_NAME
    assert 'set(CMAKE_CXX_COMPILER "/usr/bin/aarch64-linux-gnu-g++")' in lines
    assert f'set(CMAKE_CUDA_COMPILER "{HOME}/bin/nvcc")' in lines
    assert 'set(CMAKE_CUDA_HOST_COMPILER "/usr/bin/aarch64-linux-gnu-g++")' in lines
    assert f'set(CUDAToolkit_ROOT "{HOME}")' in lines
    assert f'set(CMAKE_FIND_ROOT_PATH "{TARGET}" "/usr/aarch64-linux-gnu")' in lines
    # libraries only from the target's folders; a build requirement's CMake config from this machine
    assert "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)" in lines
    assert "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)" in lines
    assert "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)" in lines


def test_a_cpu_row_s_toolchain_names_no_cuda() -> None:
    text = _text(home=None, target=None)
    assert "CUDA" not in text
    assert 'set(CMAKE_FIND_ROOT_PATH "/usr/aarch64-linux-gnu")' in text.splitlines()


def test_the_toolchain_reaches_cmake_through_its_environment_variable() -> None:
    assert toolchain_env(Path("/c/toolchain.cmake")) == {"CMAKE_TOOLCHAIN_FILE": "/c/toolchain.cmake"}


def test_the_check_reads_the_folders_the_file_hands_find_library() -> None:
    folders = library_folders(_text())
    assert TARGET / "lib" in folders and HOME / "lib64" in folders
    assert Path("/usr/aarch64-linux-gnu/lib") in folders


def test_an_unknown_cpu_is_refused_by_name() -> None:
    with pytest.raises(ToolError, match="sparc64"):
        toolchain_text(
            "sparc64", cc=Path("cc"), cxx=Path("c++"), sysroot=None, cuda_home=None, cuda_target=None
        )


# --------------------------------------------------------------------------- real ELF files


def _library(folder: Path, name: str, compiler: str, *, static: bool = False) -> Path:
    if shutil.which(compiler) is None:
        pytest.fail(f"{compiler} is missing: scripts/setup.sh installs it")
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / f"{name}.c"
    src.write_text("int cudaRuntimeGetVersion(int *v) { *v = 13000; return 0; }\n", encoding="utf-8")
    if static:
        obj = folder / f"{name}.o"
        subprocess.run([compiler, "-c", "-fPIC", str(src), "-o", str(obj)], check=True, timeout=120)
        out = folder / f"lib{name}.a"
        subprocess.run(["ar", "rcs", str(out), str(obj)], check=True, timeout=120)
        obj.unlink()
    else:
        out = folder / f"lib{name}.so.13"
        subprocess.run([compiler, "-shared", "-fPIC", str(src), "-o", str(out)], check=True, timeout=120)
        (folder / f"lib{name}.so").symlink_to(out.name)
    src.unlink()
    return out


def _toolchain(tmp_path: Path, home: Path) -> Path:
    path = tmp_path / "toolchain.cmake"
    path.write_text(_text(home=home, target=home / "targets" / "aarch64-linux"), encoding="utf-8")
    return path


def test_a_toolchain_pointing_at_this_machines_toolkit_is_refused_naming_the_file(tmp_path: Path) -> None:
    """Must-fail: the CUDA home's lib64 holds an x86_64 libcudart (this machine's toolkit)."""
    home = tmp_path / "cuda"
    wrong = _library(home / "lib64", "cudart", "gcc")
    with pytest.raises(ToolError) as caught:
        check_toolchain(_toolchain(tmp_path, home), "aarch64", "cu130-py311-aarch64")
    text = str(caught.value)
    assert text.startswith("row cu130-py311-aarch64: the aarch64 cross build's CMake toolchain")
    assert f"{wrong} (x86_64)" in text or f"{wrong.with_name('libcudart.so')} (x86_64)" in text


def test_an_x86_64_static_runtime_in_the_target_folder_is_refused(tmp_path: Path) -> None:
    """Must-fail: libcudart_static.a of this machine (an ar archive: its first object's machine)."""
    home = tmp_path / "cuda"
    _library(home / "targets" / "aarch64-linux" / "lib", "cuda_aarch64", CROSS_GCC)
    wrong = _library(home / "targets" / "aarch64-linux" / "lib", "cudart_static", "gcc", static=True)
    assert file_machine(wrong) == 62
    with pytest.raises(ToolError, match=r"libcudart_static\.a \(x86_64\)"):
        check_toolchain(_toolchain(tmp_path, home), "aarch64", "cu130-py311-aarch64")


def test_a_cross_cuda_home_of_aarch64_libraries_passes(tmp_path: Path) -> None:
    home = tmp_path / "cuda"
    lib = home / "targets" / "aarch64-linux" / "lib"
    shared = _library(lib, "cudart", CROSS_GCC)
    static = _library(lib, "cudart_static", CROSS_GCC, static=True)
    (home / "lib").symlink_to(lib)
    assert file_machine(shared) == file_machine(static) == 183
    check_toolchain(_toolchain(tmp_path, home), "aarch64", "cu130-py311-aarch64")
    assert wrong_machine_libraries([lib, home / "lib"], "aarch64") == []


def test_a_toolchain_naming_no_folders_fails_closed(tmp_path: Path) -> None:
    path = tmp_path / "toolchain.cmake"
    path.write_text("set(CMAKE_SYSTEM_NAME Linux)\n", encoding="utf-8")
    with pytest.raises(ToolError, match="cannot be done"):
        check_toolchain(path, "aarch64", "cu130-py311-aarch64")


# --------------------------------------------------------------------------- FindPython's SOABI

PY311 = TargetPython("3.11", "cpython-311-aarch64-linux-gnu")


def _cpu_row_text(python: TargetPython | None = None, emulator: Path | None = None) -> str:
    """A CPU row's toolchain (no CUDA home, no sysroot) with the row's Python or an emulator."""
    return toolchain_text(
        "aarch64",
        cc=Path("/usr/bin/aarch64-linux-gnu-gcc"),
        cxx=Path("/usr/bin/aarch64-linux-gnu-g++"),
        sysroot=None,
        cuda_home=None,
        cuda_target=None,
        python=python,
        emulator=emulator,
    )


def test_the_toolchain_wraps_find_package_once_for_the_rows_python_only_when_given_one() -> None:
    assert "find_package" not in _text()
    text = _cpu_row_text(python=PY311)
    lines = text.splitlines()
    assert 'set(WHEELWRIGHT_PYTHON_SOABI "cpython-311-aarch64-linux-gnu")' in lines
    assert 'set(WHEELWRIGHT_PYTHON_VERSION "3.11")' in lines
    assert (
        text.count("macro(find_package") == 1 and "GLOBAL PROPERTY WHEELWRIGHT_FIND_PACKAGE_WRAPPED" in text
    )


_PROJECT = """cmake_minimum_required(VERSION 3.18...3.31)
project(soabi LANGUAGES CXX)
find_package(Python COMPONENTS Interpreter Development.Module REQUIRED)
find_package(Python3 COMPONENTS Interpreter Development.Module REQUIRED)
Python_add_library(_core MODULE WITH_SOABI m.cpp)
Python3_add_library(_core3 MODULE WITH_SOABI m.cpp)
"""


def _built_modules(tmp_path: Path, python: TargetPython | None) -> list[str]:
    """Configure and build a FindPython project in CMake's cross mode, as scikit-build-core hands
    CMake the interpreter (this machine's CPython: the cross build's), and list the modules."""
    for tool in ("cmake", "aarch64-linux-gnu-g++"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: scripts/setup.sh installs it")
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(_PROJECT, encoding="utf-8")
    (src / "m.cpp").write_text("int wheelwright_probe;\n", encoding="utf-8")
    toolchain = tmp_path / "toolchain.cmake"
    toolchain.write_text(
        toolchain_text(
            "aarch64",
            cc=Path(shutil.which("aarch64-linux-gnu-gcc") or "aarch64-linux-gnu-gcc"),
            cxx=Path(shutil.which("aarch64-linux-gnu-g++") or "aarch64-linux-gnu-g++"),
            sysroot=None,
            cuda_home=None,
            cuda_target=None,
            python=python,
        ),
        encoding="utf-8",
    )
    include = sysconfig.get_paths()["include"]
    hints = [
        f"-D{prefix}_{key}={value}"
        for prefix in ("Python", "Python3")
        for key, value in (("EXECUTABLE", sys.executable), ("INCLUDE_DIR", include))
    ]
    build = tmp_path / "build"
    subprocess.run(
        ["cmake", "-S", src, "-B", build, f"-DCMAKE_TOOLCHAIN_FILE={toolchain}", *hints],
        check=True,
        capture_output=True,
        timeout=300,
    )
    subprocess.run(["cmake", "--build", build], check=True, capture_output=True, timeout=300)
    return sorted(p.name for p in build.glob("_core*"))


def test_a_cross_build_names_findpython_modules_by_the_targets_soabi(tmp_path: Path) -> None:
    mm = f"{sys.version_info[0]}{sys.version_info[1]}"
    python = TargetPython(f"{sys.version_info[0]}.{sys.version_info[1]}", f"cpython-{mm}-aarch64-linux-gnu")
    assert _built_modules(tmp_path, python) == [
        f"_core.cpython-{mm}-aarch64-linux-gnu.so",
        f"_core3.cpython-{mm}-aarch64-linux-gnu.so",
    ]


def test_must_fail_without_the_wrapper_cmakes_cross_mode_drops_the_soabi(tmp_path: Path) -> None:
    """The failure the wrapper answers: CMake's own cross mode names the module plain _core.so."""
    assert _built_modules(tmp_path, None) == ["_core.so", "_core3.so"]


def test_another_python_version_found_is_left_as_cmake_found_it(tmp_path: Path) -> None:
    assert _built_modules(tmp_path, TargetPython("3.9", "cpython-39-aarch64-linux-gnu")) == [
        "_core.so",
        "_core3.so",
    ]


# --------------------------------------------------------------------------- CMake >= 4.1 (CMP0190)

CMP0190_LOG = """CMake Error at /x/cmake-4.2/Modules/FindPython/Support.cmake:46 (message):
  Python: When cross-compiling, Interpreter and/or Compiler components cannot
  be searched when CMAKE_CROSSCOMPILING_EMULATOR variable is not specified
  (see policy CMP0190).
Call Stack (most recent call first):
"""  # CMake 4.2.3's words, as it wrapped them


def test_the_emulator_is_named_only_where_the_targets_programs_run_here() -> None:
    assert "CMAKE_CROSSCOMPILING_EMULATOR" not in _text()
    text = _cpu_row_text(emulator=Path("/usr/bin/env"))
    assert 'set(CMAKE_CROSSCOMPILING_EMULATOR "/usr/bin/env")' in text.splitlines()


def test_findpython_refusing_the_interpreter_for_want_of_an_emulator_is_named_with_the_fix() -> None:
    fix = ("update-binfmts --enable qemu-aarch64",)
    line = findpython_diagnosis(CMP0190_LOG, "aarch64", fix)
    assert line is not None
    assert "policy CMP0190" in line and "aarch64 programs to run on this machine" in line
    assert "`update-binfmts --enable qemu-aarch64`" in line and "--backend container" in line


def test_must_fail_a_log_of_another_failure_gets_no_findpython_diagnosis() -> None:
    assert (
        findpython_diagnosis("CMake Error: Could NOT find Python (missing: Interpreter)\n", "aarch64", ())
        is None
    )
