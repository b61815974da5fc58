"""Host builds of packages written without wheelwright in mind, one per mainstream build system.

Each package here is what its author would write: no variant label, no CUDA Requires-Dist,
no RUNPATH, no arch list. wheelwright builds it in an isolated environment made from the
package's own ``[build-system]`` (scikit-build-core, setuptools + pybind11, meson-python),
gives its CUDA row the row's architectures (CUDAARCHS / CMAKE_ARGS) and its contract (label,
Requires-Dist, RUNPATH), and hides CUDA from its CPU row on this machine, which has nvcc on
PATH (``/usr/local/bin/nvcc``, a wrapper) and a toolkit at ``/usr/local/cuda``.

Arch lists are cut to two entries to keep each device compile short.
"""

from __future__ import annotations

import dataclasses
import email.parser
import json
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.binary.elf import read_elf
from release.binary.fatbin import all_entries, has_device_code
from release.core.errors import InputError
from release.core.machine import default_cache_dir
from release.policy.archs import parse_arch_list
from release.policy.matrix import Row
from release.resources.cpus import host_arch
from release.wheelbuild.host.isolated import read_marker
from release.wheelbuild.run import build_row

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
CACHE = default_cache_dir(os.environ)
TWO_ARCHS = parse_arch_list("8.0;9.0+PTX")
HAS_NVCC = shutil.which("nvcc") is not None
HOST_MANYLINUX = "manylinux_{}_{}".format(
    *(os.confstr("CS_GNU_LIBC_VERSION") or "glibc 2.28").split()[1].split(".")[:2]
)

# --------------------------------------------------------------------------- the packages


def pyproject_toml(name: str, version: str, requires: list[str], backend: str, tail: str = "") -> str:
    """A package author's pyproject.toml: its [build-system] and [project], then ``tail``."""
    listed = ", ".join(f'"{r}"' for r in requires)
    return (
        f'[build-system]\nrequires = [{listed}]\nbuild-backend = "{backend}"\n\n'
        f'[project]\nname = "{name}"\nversion = "{version}"\nrequires-python = ">=3.10"\n'
    ) + tail


SKBUILD = {
    "pyproject.toml": pyproject_toml(
        "probecuda",
        "0.1.0",
        ["scikit-build-core>=0.10"],
        "scikit_build_core.build",
        '\n[tool.scikit-build]\nminimum-version = "build-system.requires"\n',
    ),
    "CMakeLists.txt": """\
cmake_minimum_required(VERSION 3.18...3.31)
project(probecuda LANGUAGES CXX)
include(CheckLanguage)
check_language(CUDA)
if(CMAKE_CUDA_COMPILER)
  enable_language(CUDA)
  add_library(probe_kernels SHARED csrc/k.cu)
else()
  add_library(probe_kernels SHARED csrc/k.cpp)
endif()
install(TARGETS probe_kernels LIBRARY DESTINATION probecuda)
""",
    "csrc/k.cu": """\
__global__ void twice(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int probe_launch(float* device_x) { twice<<<1, 32>>>(device_x); return (int)cudaGetLastError(); }
extern "C" const char* probe_backend() { return "cuda"; }
""",
    "csrc/k.cpp": 'extern "C" const char* probe_backend() { return "cpu"; }\n',
    "src/probecuda/__init__.py": """\
import ctypes, functools, pathlib

@functools.cache
def _lib():  # loaded on first use, not on import
    return ctypes.CDLL(str(pathlib.Path(__file__).with_name("libprobe_kernels.so")))
""",
}

PYBIND = {
    "pyproject.toml": pyproject_toml(
        "pybindprobe", "0.2.0", ["setuptools>=64", "pybind11>=2.12"], "setuptools.build_meta"
    ),
    "setup.py": """\
import shutil
from pathlib import Path
from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup

# what a package that looks for CUDA does: the CPU variant when there is no nvcc
nvcc = shutil.which("nvcc")
Path("src/pybindprobe/_probe.py").write_text(f"NVCC = {nvcc!r}\\n")
setup(
    packages=["pybindprobe"],
    package_dir={"": "src"},
    ext_modules=[Pybind11Extension("pybindprobe._core", ["src/core.cpp"])],
)
""",
    "src/core.cpp": "#include <pybind11/pybind11.h>\nPYBIND11_MODULE(_core, m) { m.attr('answer') = 42; }\n".replace(
        "'answer'", '"answer"'
    ),
    "src/pybindprobe/__init__.py": "",
}

MESON = {
    "pyproject.toml": pyproject_toml("mesonprobe", "0.3.0", ["meson-python>=0.15"], "mesonpy"),
    "meson.build": """\
project('mesonprobe', 'c', version: '0.3.0')
py = import('python').find_installation(pure: false)
py.extension_module('_core', 'core.c', install: true, subdir: 'mesonprobe')
py.install_sources('mesonprobe/__init__.py', subdir: 'mesonprobe')
""",
    "core.c": """\
#include <Python.h>
static struct PyModuleDef def = {PyModuleDef_HEAD_INIT, "_core", NULL, -1, NULL};
PyMODINIT_FUNC PyInit__core(void) { return PyModule_Create(&def); }
""",
    "mesonprobe/__init__.py": "",
}


# meson-python with meson's own CUDA language: the runtime shared, as the row's contract asks
# (meson links it statically unless told: the build then stops naming dependency('cuda', static: false))
MESON_CUDA = {
    "pyproject.toml": pyproject_toml("mesoncuda", "0.1.0", ["meson-python>=0.15"], "mesonpy"),
    "meson.build": """\
project('mesoncuda', 'c', 'cuda', version: '0.1.0')
py = import('python').find_installation(pure: false)
shared_library('mesoncuda_kernels', 'k.cu', dependencies: dependency('cuda', static: false),
               install: true, install_dir: py.get_install_dir() / 'mesoncuda')
py.extension_module('_core', 'core.c', install: true, subdir: 'mesoncuda')
py.install_sources('mesoncuda/__init__.py', subdir: 'mesoncuda')
""",
    "k.cu": SKBUILD["csrc/k.cu"],
    "core.c": MESON["core.c"],
    "mesoncuda/__init__.py": "",
}


def make_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def make_policy(folder: Path, name: str, *, manylinux: str = "manylinux_2_28") -> Path:
    """The repository's policy with only the [project] table changed (the package beside it).

    ``manylinux``: C++ compiled on this machine (glibc 2.36) that uses threads gets GLIBC_2.34
    symbols, which manylinux_2_28 refuses (the row's builder image is for that); a test of
    such a package on the host says the tag this machine can honestly give.
    """
    text = (
        (ROOT / "rows.toml").read_text().replace('manylinux = "manylinux_2_28"', f'manylinux = "{manylinux}"')
    )
    start, end = text.index("[project]"), text.index("[matrix]")
    project = f'[project]\nname = "{name}"\npath = "."\nimport_name = "{name}"\ncheck = "{name}:check"\n\n'
    policy = folder / "rows.toml"
    policy.write_text(text[:start] + project + text[end:])
    return policy


def rows(policy: Path) -> dict[str, Row]:
    return rows_by_id(policy)


def hostile_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This machine's environment plus what a CUDA developer's shell has: CUDA_HOME, CPATH, flags."""
    env = {k: v for k, v in os.environ.items() if k != "WHEELWRIGHT_KEEP_TMP"}
    env.update(
        CUDA_HOME="/usr/local/cuda",
        CUDA_PATH="/usr/local/cuda",
        CPATH="/usr/local/cuda/include",
        CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=native",
        SOURCE_DATE_EPOCH="1700000000",
        TMPDIR=str(tmp_path),
    )
    env.update(extra)
    return env


def wheel_facts(wheel: Path, into: Path) -> tuple[list[str], email.message.Message]:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(into)
    meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    return names, email.parser.Parser().parsestr((into / meta_name).read_text())


def _build(
    row: Row, policy: Path, tmp_path: Path, env: dict[str, str], cache: Path = CACHE, **kw: object
) -> Path:
    (built,) = build_row(
        row,
        policy_path=policy,
        dist_dir=tmp_path / "dist",
        cache_dir=cache,
        backend="host",
        env={**env, "CUDA_HOME": ""} if row.is_cuda else env,
        kernel_cache=tmp_path / "kernels",
        **kw,  # type: ignore[arg-type]
    )
    return built.wheel


# --------------------------------------------------------------------------- scikit-build-core + CMake


@pytest.mark.skipif(not HAS_NVCC, reason="the point is a machine with nvcc on PATH")
def test_scikit_build_core_cpu_row_builds_its_cpu_variant_on_a_machine_with_nvcc(tmp_path: Path) -> None:
    project = make_project(tmp_path / "probecuda", SKBUILD)
    policy = make_policy(project, "probecuda")
    row = rows(policy)["cpu-py312-x86_64"]
    wheel = _build(row, policy, tmp_path, hostile_env(tmp_path))
    assert wheel.name == "probecuda-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    _names, meta = wheel_facts(wheel, tmp_path / "x")
    assert meta.get_all("Requires-Dist") is None and meta["Version"] == "0.1.0"
    lib = tmp_path / "x" / "probecuda" / "libprobe_kernels.so"
    assert not has_device_code(lib)
    assert not any(n.startswith(("libcudart", "libcuda.")) for n in read_elf(lib).needed)
    assert b"probe_backend" in lib.read_bytes() and b"__cudaRegisterFatBinary" not in lib.read_bytes()


@pytest.mark.skipif(not HAS_NVCC, reason="needs the host nvcc 13.0")
def test_scikit_build_core_cuda_row_gets_the_rows_archs_and_contract(tmp_path: Path) -> None:
    project = make_project(tmp_path / "probecuda", SKBUILD)
    policy = make_policy(project, "probecuda")
    row = dataclasses.replace(rows(policy)["cu130-py312-x86_64"], gpu_archs=TWO_ARCHS)
    wheel = _build(row, policy, tmp_path, hostile_env(tmp_path))
    assert wheel.name == "probecuda-0.1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    names, meta = wheel_facts(wheel, tmp_path / "x")
    assert meta["Version"] == "0.1.0+cu130"
    assert meta.get_all("Requires-Dist") == ["nvidia-cuda-runtime==13.0.*"]
    assert "probecuda-0.1.0+cu130.dist-info/RECORD" in names
    lib = tmp_path / "x" / "probecuda" / "libprobe_kernels.so"
    info = read_elf(lib)
    assert "libcudart.so.13" in info.needed  # CMAKE_ARGS made CMake link the shared runtime
    assert info.runpath == ("$ORIGIN/../nvidia/cu13/lib",)
    # exactly the row's architectures (CUDAARCHS / CMAKE_ARGS), not CMake's default sm_75, not "native"
    kernels = {e.name for e in all_entries(lib)}
    assert {"sm_80", "sm_90", "compute_90"} <= kernels and not kernels & {"sm_75", "compute_75", "compute_80"}
    # RECORD matches the rewritten files
    record = (tmp_path / "x" / "probecuda-0.1.0+cu130.dist-info" / "RECORD").read_text()
    assert "probecuda/libprobe_kernels.so,sha256=" in record


# --------------------------------------------------------------------------- setuptools + pybind11


def test_setuptools_pybind11_cpu_row_sees_no_nvcc(tmp_path: Path) -> None:
    project = make_project(tmp_path / "pybindprobe", PYBIND)
    policy = make_policy(project, "pybindprobe", manylinux=HOST_MANYLINUX)
    wheel = _build(rows(policy)["cpu-py312-x86_64"], policy, tmp_path, hostile_env(tmp_path))
    assert wheel.name == f"pybindprobe-0.2.0-cp312-cp312-{HOST_MANYLINUX}_x86_64.whl"
    names, meta = wheel_facts(wheel, tmp_path / "x")
    assert any(n.startswith("pybindprobe/_core.cpython-312-") for n in names)
    assert (tmp_path / "x" / "pybindprobe" / "_probe.py").read_text() == "NVCC = None\n"
    assert meta.get_all("Requires-Dist") is None


@pytest.mark.skipif(not HAS_NVCC, reason="needs the host nvcc 13.0")
def test_setuptools_pybind11_cuda_row_gets_its_label_and_runtime(tmp_path: Path) -> None:
    project = make_project(tmp_path / "pybindprobe", PYBIND)
    policy = make_policy(project, "pybindprobe", manylinux=HOST_MANYLINUX)
    row = rows(policy)["cu130-py312-x86_64"]
    wheel = _build(row, policy, tmp_path, hostile_env(tmp_path))
    assert wheel.name == f"pybindprobe-0.2.0+cu130-cp312-cp312-{HOST_MANYLINUX}_x86_64.whl"
    _names, meta = wheel_facts(wheel, tmp_path / "x")
    assert meta.get_all("Requires-Dist") == ["nvidia-cuda-runtime==13.0.*"]
    nvcc = (tmp_path / "x" / "pybindprobe" / "_probe.py").read_text()
    assert nvcc.startswith("NVCC = '") and nvcc.rstrip().endswith("/bin/nvcc'")


# --------------------------------------------------------------------------- meson-python


def test_meson_python_builds_in_its_own_environment(tmp_path: Path) -> None:
    project = make_project(tmp_path / "mesonprobe", MESON)
    policy = make_policy(project, "mesonprobe")
    wheel = _build(rows(policy)["cpu-py312-x86_64"], policy, tmp_path, hostile_env(tmp_path))
    assert wheel.name == "mesonprobe-0.3.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    names, _meta = wheel_facts(wheel, tmp_path / "x")
    assert any(n.startswith("mesonprobe/_core.cpython-312-") for n in names)


# --------------------------------------------------------------------------- cross-built for aarch64

EM_AARCH64 = 183


@pytest.mark.skipif(host_arch() != "x86_64", reason="a cross build from x86_64 (aarch64 builds natively)")
@pytest.mark.parametrize(
    ("files", "name", "row_id", "kernels"),
    [
        # meson takes the cross compilers for native ones unless given a cross file, and stopped:
        # "Executables created by c compiler /usr/bin/aarch64-linux-gnu-gcc are not runnable"
        (MESON, "mesonprobe", "cpu-py312-aarch64", None),
        (MESON_CUDA, "mesoncuda", "cu130-py312-aarch64", "mesoncuda/libmesoncuda_kernels.so"),
        (PYBIND, "pybindprobe", "cpu-py312-aarch64", None),
        (SKBUILD, "probecuda", "cu130-py312-aarch64", "probecuda/libprobe_kernels.so"),
    ],
    ids=["meson-python", "meson-python-cuda", "setuptools-pybind11", "scikit-build-core-cuda"],
)
def test_each_build_system_cross_builds_an_aarch64_row(
    files: dict[str, str], name: str, row_id: str, kernels: str | None, tmp_path: Path
) -> None:
    if shutil.which("aarch64-linux-gnu-gcc") is None:
        pytest.fail("aarch64-linux-gnu-gcc is missing: scripts/setup.sh installs g++-aarch64-linux-gnu")
    project = make_project(tmp_path / name, files)
    policy = make_policy(project, name, manylinux=HOST_MANYLINUX)
    row = rows(policy)[row_id]
    wheel = _build(row, policy, tmp_path, hostile_env(tmp_path))
    assert wheel.name.endswith(f"-cp312-cp312-{HOST_MANYLINUX}_aarch64.whl"), wheel.name
    names, _meta = wheel_facts(wheel, tmp_path / "x")
    libraries = [n for n in names if ".so" in Path(n).name]
    assert libraries, names
    for member in libraries:
        assert read_elf(tmp_path / "x" / member).machine == EM_AARCH64, member
        if ".cpython-" in member:  # the target's extension suffix, not this machine's
            assert member.endswith(".cpython-312-aarch64-linux-gnu.so"), member
    if kernels is not None:  # the build found the cross nvcc and compiled the row's kernels for aarch64
        library = tmp_path / "x" / kernels
        assert has_device_code(library)
        assert "libcudart.so.13" in read_elf(library).needed


# --------------------------------------------------------------------------- requirements and constraints


def test_a_project_constraints_file_moves_a_pin(tmp_path: Path) -> None:
    """A project's constraints file replaces wheelwright's pin of what it names."""
    project = make_project(tmp_path / "pybindprobe", PYBIND)
    policy = make_policy(project, "pybindprobe", manylinux=HOST_MANYLINUX)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("pybind11==2.13.6\n")
    row = rows(policy)["cpu-py312-x86_64"]
    # a cache of its own: the shared one may hold an environment an earlier run made from the
    # same constraints (environments are keyed by content, not by the file's path)
    cache = tmp_path / "cache"
    _build(row, policy, tmp_path, hostile_env(tmp_path), cache=cache, constraints=[constraints])
    envs = [p for p in (cache / "build-envs").iterdir() if (p / "wheelwright-build-env.json").is_file()]
    markers = [m for p in envs if (m := read_marker(p)) and str(constraints) in m["constraints_files"]]
    assert len(markers) == 1 and markers[0]["installed"]["pybind11"] == "2.13.6"
    assert json.loads(json.dumps(markers[0]))["requires"] == ["setuptools>=64", "pybind11>=2.12"]


def test_an_unresolvable_build_requirement_names_it(tmp_path: Path) -> None:
    files = dict(PYBIND)
    files["pyproject.toml"] = files["pyproject.toml"].replace('"pybind11>=2.12"', '"pybind11>=99"')
    project = make_project(tmp_path / "pybindprobe", files)
    policy = make_policy(project, "pybindprobe", manylinux=HOST_MANYLINUX)
    with pytest.raises(InputError) as info:
        _build(rows(policy)["cpu-py312-x86_64"], policy, tmp_path, hostile_env(tmp_path))
    text = str(info.value)
    assert f"'pybind11>=99' from {project / 'pyproject.toml'} [build-system]" in text
    assert "constrained by: pybind11==3.1.0" in text and "build-constraints.txt" in text
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").rglob("*.whl"))
