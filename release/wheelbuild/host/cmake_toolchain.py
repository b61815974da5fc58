"""CMake's own cross mechanism for a cross build: a toolchain file, and a check of what it points at.

A CMake project written the way CMake's documentation teaches (``project(... LANGUAGES CXX CUDA)``,
``find_package(CUDAToolkit)``, ``target_link_libraries(... CUDA::cudart)``) finds its libraries
through find modules, and find modules look for the *target's* files only in CMake's cross-compiling
mode, which a toolchain file turns on (``CMAKE_SYSTEM_NAME``/``CMAKE_SYSTEM_PROCESSOR``). Without
one, FindCUDAToolkit took this machine's x86_64 toolkit and the cross linker stopped with
``error adding symbols: file in wrong format``. With one (CMake's FindCUDAToolkit.cmake, 3.25:
``if(CMAKE_CROSSCOMPILING)`` ... ``targets/${CUDAToolkit_TARGET_NAME}`` from
``CMAKE_SYSTEM_PROCESSOR`` ``aarch64`` -> ``aarch64-linux``, prepended to ``CMAKE_FIND_ROOT_PATH``)
``CUDA::cudart``, ``CUDA::cublas`` ... resolve under the cross CUDA_HOME's
``targets/<arch>-linux/lib``, which holds the target's libraries only.

The file reaches the project through the ``CMAKE_TOOLCHAIN_FILE`` environment variable (read by
CMake >= 3.21 on a fresh build tree; scikit-build-core and plain ``cmake`` runs both see it).

:func:`toolchain_text` is pure (text from the route's facts); :func:`write_toolchain` writes it into
the cache once; :func:`wrong_machine_libraries` reads only ELF headers, and
:func:`check_toolchain` fails a toolchain file whose libraries are of another machine before a
build starts.
"""

from __future__ import annotations

import hashlib
import re
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.binary.elf import MACHINE_NAMES
from release.core.errors import ToolError
from release.core.locks import install_once
from release.resources.cpus import Cpu
from release.resources.cpus import arch as cpu_arch

TOOLCHAIN_NAME = "toolchain.cmake"
# How many files one check reads at most: a toolkit's lib folder holds a few hundred.
MAX_CHECKED = 4096
_LIB_NAME = re.compile(r"^lib.+\.(so(\.\d+)*|a)$")
_SET = re.compile(r"^set\((CUDAToolkit_ROOT|CMAKE_FIND_ROOT_PATH)\s+(.*)\)\s*$", re.MULTILINE)


def _cpu(name: str) -> Cpu:
    cpu = cpu_arch(name)
    if cpu is None:
        raise ToolError(f"{name} is not a CPU architecture wheelwright knows (release/resources/cpus.toml)")
    return cpu


def cmake_processor(name: str) -> str:
    """``CMAKE_SYSTEM_PROCESSOR`` of a toolchain file for the CPU arch ``name``."""
    return _cpu(name).cmake_processor


def cuda_target_dir(name: str) -> str:
    """The folder under ``<CUDA_HOME>/targets`` that holds ``name``'s CUDA files (``sbsa-linux``)."""
    target = _cpu(name).cuda_target
    if not target:
        raise ToolError(f"CUDA has no targets/ folder for {name}: a CUDA row cannot be cross-compiled for it")
    return target


def _cmake_str(value: str | Path) -> str:
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class TargetPython:
    """The row's CPython as the target sees it: ``version`` "3.11", ``soabi`` its sysconfig SOABI
    for the target (``cpython-311-aarch64-linux-gnu``)."""

    version: str
    soabi: str


def find_python_soabi_lines(python: TargetPython) -> list[str]:
    """CMake lines that give FindPython the target's SOABI in a cross build.

    CMake's FindPython (3.25 here, and 4.x unless a project sets policy CMP0190) asks no interpreter
    in cross mode; with the ``Interpreter`` component it sets ``Python_SOABI`` to an empty string
    before it looks for a target ``python-config``, and a ``-DPython_SOABI`` is hidden behind that
    normal variable. ``Python_add_library(... WITH_SOABI)`` then names a module ``_core.so`` where a
    native build names it ``_core.cpython-311-aarch64-linux-gnu.so``. The lines wrap
    ``find_package`` (as vcpkg's toolchain file does, once per CMake run): after CMake's own
    ``find_package(Python ...)`` or ``find_package(Python3 ...)`` has found this row's version and left
    SOABI empty, SOABI becomes the target's. Nothing else changes; another version found is left as
    CMake found it."""
    return [
        "# FindPython's SOABI, which CMake's cross mode leaves empty (cmake_toolchain.find_python_soabi_lines)",
        f"set(WHEELWRIGHT_PYTHON_VERSION {_cmake_str(python.version)})",
        f"set(WHEELWRIGHT_PYTHON_SOABI {_cmake_str(python.soabi)})",
        "get_property(_wheelwright_wrapped GLOBAL PROPERTY WHEELWRIGHT_FIND_PACKAGE_WRAPPED)",
        "if(NOT _wheelwright_wrapped)",
        "  set_property(GLOBAL PROPERTY WHEELWRIGHT_FIND_PACKAGE_WRAPPED TRUE)",
        "  macro(find_package _wheelwright_name)",
        "    _find_package(${_wheelwright_name} ${ARGN})",
        '    if(("${_wheelwright_name}" STREQUAL "Python" OR "${_wheelwright_name}" STREQUAL "Python3")',
        '       AND ${_wheelwright_name}_FOUND AND "${${_wheelwright_name}_SOABI}" STREQUAL ""',
        '       AND "${${_wheelwright_name}_VERSION_MAJOR}.${${_wheelwright_name}_VERSION_MINOR}" STREQUAL "${WHEELWRIGHT_PYTHON_VERSION}")',
        '      set(${_wheelwright_name}_SOABI "${WHEELWRIGHT_PYTHON_SOABI}")',
        "    endif()",
        "  endmacro()",
        "endif()",
    ]


def toolchain_text(
    arch: str,
    *,
    cc: Path,
    cxx: Path,
    sysroot: Path | None,
    cuda_home: Path | None,
    cuda_target: Path | None,
    math_libs: Path | None = None,
    python: TargetPython | None = None,
    emulator: Path | None = None,
) -> str:
    """The CMake toolchain file of a cross build for ``arch``: ``cuda_home`` a cross CUDA_HOME whose
    folder ``cuda_target`` holds the target's CUDA headers and libraries (``targets/<x>/lib``).

    Libraries are searched only under the find-root paths (the target's CUDA folder and the cross
    compilers' sysroot): a library of this machine is never found. Headers and packages are searched
    in both (a build requirement's CMake config, pybind11's or nanobind's, lives in this machine's
    build environment and is architecture-free); programs only on this machine (they run here).
    ``python``: the row's CPython, whose SOABI FindPython is given (:func:`find_python_soabi_lines`).
    ``emulator``: ``env``, where the target's programs run on this machine (binfmt_misc hands them to
    qemu-user): ``CMAKE_CROSSCOMPILING_EMULATOR``. FindPython under policy CMP0190 (CMake >= 4.1, a
    project whose policy range reaches 4.1) refuses the ``Interpreter`` component in cross mode
    without one; with it, it runs the build's Python through ``env``, and that Python answers for
    the target (the cross build's environment names the target's sysconfig), as crossenv does.
    ``try_run`` runs the target's programs under emulation. Where they do not run here, no emulator
    is named: CMake then refuses such a project loudly (:func:`findpython_diagnosis` says why) rather
    than configure it on failed runs.
    """
    roots: list[Path] = []
    lines = [
        "# wheelwright: the target of a cross build (release/wheelbuild/host/cmake_toolchain.py)",
        "set(CMAKE_SYSTEM_NAME Linux)",
        f"set(CMAKE_SYSTEM_PROCESSOR {cmake_processor(arch)})",
        f"set(CMAKE_C_COMPILER {_cmake_str(cc)})",
        f"set(CMAKE_CXX_COMPILER {_cmake_str(cxx)})",
    ]
    if cuda_home is not None:
        roots.append(cuda_target or cuda_home / "targets" / cuda_target_dir(arch))
        lines += [
            f"set(CMAKE_CUDA_COMPILER {_cmake_str(cuda_home / 'bin' / 'nvcc')})",
            f"set(CMAKE_CUDA_HOST_COMPILER {_cmake_str(cxx)})",
            f"set(CUDAToolkit_ROOT {_cmake_str(cuda_home)})",
        ]
        if math_libs is not None:  # the CUDA math libraries the train declares, for the target
            roots.append(math_libs)
    if sysroot is not None:
        roots.append(sysroot)
    if roots:
        lines.append(f"set(CMAKE_FIND_ROOT_PATH {' '.join(_cmake_str(r) for r in roots)})")
    lines += [
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)",
    ]
    if emulator is not None:
        lines += [
            "# the target's programs run here (binfmt_misc, qemu-user) and the build's Python answers for the target",
            f"set(CMAKE_CROSSCOMPILING_EMULATOR {_cmake_str(emulator)})",
        ]
    if python is not None:
        lines += find_python_soabi_lines(python)
    return "\n".join(lines) + "\n"


# CMake >= 4.1's FindPython, policy CMP0190 NEW, in cross mode with no CMAKE_CROSSCOMPILING_EMULATOR
_CMP0190 = "Interpreter and/or Compiler components cannot"


def findpython_diagnosis(output: str, arch: str, fix: Sequence[str]) -> str | None:
    """What a failed cross build's log says when CMake's FindPython refused the interpreter in cross
    mode for want of an emulator (``fix``: the commands that make the target's programs run here);
    None when it says nothing of the kind. Pure."""
    if _CMP0190 not in " ".join(output.split()):
        return None
    steps = "; ".join(f"`{c}`" for c in fix)
    return (
        f"the project's CMake (4.1 or newer, policy CMP0190 from the project's cmake_minimum_required) "
        f"looks for the {arch} Python interpreter in cross mode, which needs {arch} programs to run on "
        f"this machine, and they do not: "
        + (f"as root, {steps}, then build again" if steps else "register qemu-user for it in binfmt_misc")
        + f"; or build this row with --backend container or on an {arch} machine"
    )


def toolchain_env(path: Path) -> dict[str, str]:
    """What hands the toolchain file to the project's CMake (>= 3.21, a fresh build tree)."""
    return {"CMAKE_TOOLCHAIN_FILE": str(path)}


def write_toolchain(text: str, arch: str, cache_dir: Path) -> Path:
    """``text`` as a toolchain file in the cache (named by its hash, made once)."""
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    final = cache_dir / "cross" / arch / f"cmake-{key}"

    def fill(tmp: Path) -> None:
        (tmp / TOOLCHAIN_NAME).write_text(text, encoding="utf-8")

    install_once(
        final,
        ready=lambda f: (f / TOOLCHAIN_NAME).is_file(),
        fill=fill,
        holder=f"the {arch} CMake toolchain file",
    )
    return final / TOOLCHAIN_NAME


# --------------------------------------------------------------------------- the check


def _cmake_paths(text: str) -> list[str]:
    return [p.replace('\\"', '"') for p in re.findall(r'"((?:[^"\\]|\\.)*)"', text)]


def library_folders(toolchain: str) -> list[Path]:
    """The folders a toolchain file hands CMake's find_library for CUDA libraries: each find root's
    ``lib``/``lib64`` (and ``stubs``), and ``CUDAToolkit_ROOT``'s ``lib`` and ``lib64`` (where
    FindCUDAToolkit looks when the root has no folder for the target)."""
    folders: list[Path] = []
    for name, value in _SET.findall(toolchain):
        for entry in _cmake_paths(value):
            root = Path(entry)
            subs = (
                ["lib", "lib64"]
                if name == "CUDAToolkit_ROOT"
                else ["lib", "lib64", "lib/stubs", "lib64/stubs"]
            )
            folders += [root / sub for sub in subs]
    return list(dict.fromkeys(folders))


def _ar_machine(data: bytes) -> int | None:
    """e_machine of the first ELF member of a static archive's leading bytes, or None."""
    at = 8
    while at + 60 <= len(data):
        name = data[at : at + 16].decode("ascii", "replace").strip()
        try:
            size = int(data[at + 48 : at + 58].decode("ascii").strip())
        except ValueError:
            return None
        body = data[at + 60 : at + 60 + size]
        if name not in ("/", "//", "/SYM64/") and body[:4] == b"\x7fELF" and len(body) >= 20:
            return int(struct.unpack_from("<H" if body[5] == 1 else ">H", body, 18)[0])
        at += 60 + size + (size & 1)
    return None


def file_machine(path: Path) -> int | None:
    """The ELF machine of a shared library, or of a static archive's first object; None when the file
    is neither (a linker script, a text file)."""
    with path.open("rb") as f:
        head = f.read(20)
        if head[:4] == b"\x7fELF" and len(head) >= 20:
            return int(struct.unpack_from("<H" if head[5] == 1 else ">H", head, 18)[0])
        if head[:8] == b"!<arch>\n":
            f.seek(0)
            return _ar_machine(f.read(1 << 20))
    return None


def wrong_machine_libraries(folders: Iterable[Path], arch: str) -> list[tuple[Path, str]]:
    """Each library (``lib*.so*``, ``lib*.a``) in ``folders`` that is an ELF of another machine than
    ``arch``, with that machine's name. Folders that do not exist are skipped (CMake skips them)."""
    want = _cpu(arch).elf_machine
    found: list[tuple[Path, str]] = []
    seen = 0
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not _LIB_NAME.match(path.name) or not path.is_file():
                continue
            seen += 1
            if seen > MAX_CHECKED:
                raise ToolError(
                    f"more than {MAX_CHECKED} libraries under {', '.join(map(str, folders))}: the cross "
                    "toolchain check stops rather than read them all; point the toolchain at a CUDA home "
                    "of the target's libraries only"
                )
            machine = file_machine(path)
            if machine is None:
                continue
            if machine != want:
                found.append((path, MACHINE_NAMES.get(machine, f"machine {machine}")))
    return found


def check_toolchain(toolchain: Path, arch: str, row_id: str) -> None:
    """Fail before the build when the toolchain file would hand the linker a library of another
    machine than ``arch`` (a toolchain or CUDA home pointing at this machine's own toolkit)."""
    text = toolchain.read_text(encoding="utf-8")
    folders = library_folders(text)
    if not folders:
        raise ToolError(
            f"row {row_id}: {toolchain} names no CUDAToolkit_ROOT or CMAKE_FIND_ROOT_PATH: the check of "
            "what it hands the linker cannot be done"
        )
    wrong = wrong_machine_libraries(folders, arch)
    if wrong:
        raise ToolError(wrong_machine_message(wrong, arch, toolchain, row_id))


def wrong_machine_message(wrong: Sequence[tuple[Path, str]], arch: str, where: Path, row_id: str) -> str:
    named = ", ".join(f"{p} ({machine})" for p, machine in wrong[:3])
    more = f" and {len(wrong) - 3} more" if len(wrong) > 3 else ""
    return (
        f"row {row_id}: the {arch} cross build's CMake toolchain {where} points the linker at libraries "
        f"of another machine: {named}{more}; a cross CUDA_HOME holds the {arch} libraries only (remove "
        "the cache folder holding it to have it made again, or set CUDAToolkit_ROOT to an "
        f"{arch} toolkit)"
    )
