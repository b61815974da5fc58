"""CUDA packages written in each build system's own idiom (tests/fixtures/idioms/), cross-built for
aarch64 on this x86_64 machine by the host backend, audited, and smoke-tested under emulation: the
real compilers, the real nvcc, the real CMake with wheelwright's toolchain file, real auditwheel,
real cuobjdump, a real arm64 CPython under qemu-user installing the CUDA packages from PyPI.

One module-scoped build per project makes both aarch64 rows (CPython 3.11 and 3.13 share the
train's kernel cache). cuBLAS (cublas_target) also builds, audits and smoke-tests for x86_64 on two
trains (host nvcc 13.0; the pinned PyPI 13.2 toolchain). No GPU here: the smoke proves install,
import and where libcudart and libcublas load from; the check itself runs on a GPU machine.
"""

from __future__ import annotations

import json
import os
import shutil
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.rows import rows_by_id

from release.binary.cuobjdump import ensure_cuobjdump, list_device_code
from release.binary.elf import read_elf
from release.core.machine import default_cache_dir
from release.emulate import binfmt
from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import host_arch
from release.wheelbuild.run import build_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,  # the aarch64 CUDA runtime and cuBLAS wheels, Debian's arm64 CPython (cached after)
    pytest.mark.skipif(host_arch() != "x86_64", reason="cross builds from an x86_64 machine"),
]

ROOT = Path(__file__).resolve().parents[2]
IDIOMS = ROOT / "tests" / "fixtures" / "idioms"
CACHE = default_cache_dir(os.environ)
AARCH64_ROWS = ("cu130-py311-aarch64", "cu130-py313-aarch64")
# the seed's aarch64 CUDA 13 list 9.0;10.0;11.0+PTX, as cuobjdump lists it
AARCH64_DEVICE_CODE = sorted(
    [("sass", "sm_90"), ("sass", "sm_100"), ("sass", "sm_110"), ("ptx", "compute_110")]
)
# project folder -> (import name, the CUDA libraries its kernels link besides the runtime)
PROJECTS = {
    "language_only": ("idiom_lang", ()),  # (a) enable_language(CUDA)
    "cudart_target": ("idiom_cudart", ()),  # (b) find_package(CUDAToolkit) + CUDA::cudart
    "cublas_target": ("idiom_cublas", ("libcublas.so.13",)),  # (c) + CUDA::cublas
    "runtime_shared": ("idiom_rtshared", ()),  # (d) CMAKE_CUDA_RUNTIME_LIBRARY Shared
    "setuptools_nvcc": ("idiom_nvcc", ()),  # (e) setuptools, build_ext calling nvcc
    "nanobind_skbuild": ("idiom_nanobind", ()),  # (f) nanobind through scikit-build-core
}

# The emulated smoke installs the aarch64 cuBLAS wheel (540 MB) under qemu: 89-94 s per Python on
# this machine. cuBLAS is smoked on 3.11 only; its 3.13 wheel is built and audited, and 3.13's
# emulated smoke runs for the five other projects.
EMULATED_SMOKES = {"cublas_target": AARCH64_ROWS[:1]}


@dataclass(frozen=True)
class Built:
    project: str
    policy: Path
    dist: Path
    wheels: dict[str, Path]  # row id -> wheel


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}


def _build(project: str, rows: tuple[str, ...], dist: Path) -> Built:
    policy = IDIOMS / project / "rows.toml"
    by_id = rows_by_id(policy)
    wheels: dict[str, Path] = {}
    for row_id in rows:
        (built,) = build_row(
            by_id[row_id], policy_path=policy, dist_dir=dist, cache_dir=CACHE, backend="host", env=_env()
        )
        wheels[row_id] = built.wheel
    return Built(project, policy, dist, wheels)


@pytest.fixture(scope="module", params=sorted(PROJECTS))
def aarch64(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Built:
    """One project's two aarch64 rows, built once for the module."""
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.fail("aarch64-linux-gnu-g++ is missing: scripts/setup.sh installs g++-aarch64-linux-gnu")
    project = str(request.param)
    return _build(project, AARCH64_ROWS, tmp_path_factory.mktemp(f"dist-{project}"))


def _libraries(wheel: Path, into: Path) -> dict[str, Path]:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(into)
        return {n: into / n for n in zf.namelist() if ".so" in Path(n).name}


def _audit(built: Built, row_id: str) -> None:
    done = python_m(
        "release", "audit", row_id, "--policy", str(built.policy), "--dist", str(built.dist), env=_env()
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout


def _smoke(built: Built, row_id: str, arch: str) -> dict[str, object]:
    done = python_m(
        "release",
        "smoke",
        row_id,
        "--arch",
        arch,
        "--policy",
        str(built.policy),
        "--dist",
        str(built.dist),
        env=_env(),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    record = json.loads(Path(f"{built.wheels[row_id]}.smoke.json").read_text(encoding="utf-8"))
    assert isinstance(record, dict)
    return record


def _loaded_from_venv(record: dict[str, object], soname: str) -> list[str]:
    evidence = record["evidence"]
    assert isinstance(evidence, dict)
    loaded = evidence["probe"]["loaded"]
    return [p for p in loaded if p.endswith(f"/site-packages/nvidia/cu13/lib/{soname}") and "/venv/" in p]


@pytest.mark.parametrize("row_id", AARCH64_ROWS)
def test_each_idiom_cross_builds_aarch64_libraries_with_exactly_the_rows_device_code_and_passes_the_audit(
    aarch64: Built, row_id: str, tmp_path: Path
) -> None:
    name, links = PROJECTS[aarch64.project]
    assert any(member.startswith(f"{name}/") for member in zipfile.ZipFile(aarch64.wheels[row_id]).namelist())
    wheel = aarch64.wheels[row_id]
    assert wheel.name.endswith("_aarch64.whl") and f"-cp{row_id.split('-')[1][2:]}-" in wheel.name
    libs = _libraries(wheel, tmp_path)
    assert libs, f"{wheel.name} holds no library"
    target = cpu_arch("aarch64")
    assert target is not None
    for member, path in libs.items():
        assert read_elf(path).machine == target.elf_machine, f"{member} is {read_elf(path).machine_name}"
    with_code = [p for p in libs.values() if read_elf(p).section(".nv_fatbin") is not None]
    assert with_code, f"{wheel.name}: no library carries device code"
    for path in with_code:
        assert sorted(list_device_code(path, cuobjdump=ensure_cuobjdump(CACHE))) == AARCH64_DEVICE_CODE, (
            path.name
        )
    needed = {n for p in libs.values() for n in read_elf(p).needed}
    assert {"libcudart.so.13", *links} <= needed
    # the CPython module carries the target's SOABI, as a native aarch64 build names it (CMake's cross
    # mode leaves FindPython's SOABI empty; the toolchain file fills in the row's)
    modules = [m for m in libs if Path(m).name.startswith("_core")]
    soabi = f"cpython-{row_id.split('-')[1][2:]}-aarch64-linux-gnu"
    assert modules and all(Path(m).name == f"_core.{soabi}.so" for m in modules), sorted(libs)
    _audit(aarch64, row_id)


def test_each_idiom_smoke_tests_under_emulation_loading_cuda_from_the_venv(aarch64: Built) -> None:
    cap = binfmt.capability("aarch64")
    if not cap.runs:
        pytest.skip(f"{cap.reason}; {'; '.join(cap.fix)}")
    _name, links = PROJECTS[aarch64.project]
    for row_id in EMULATED_SMOKES.get(aarch64.project, AARCH64_ROWS):
        record = _smoke(aarch64, row_id, "aarch64")
        for soname in ("libcudart.so.13", *links):
            assert _loaded_from_venv(record, soname), (
                f"{row_id}: {soname} was not loaded from the venv's nvidia/cu13/lib"
            )


@pytest.mark.parametrize("row_id", ["cu130-py312-x86_64", "cu132-py312-x86_64"])
def test_cublas_builds_audits_and_smoke_tests_for_x86_64_on_both_trains(
    row_id: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Host nvcc 13.0 (no cuBLAS in its toolkit) and the pinned PyPI 13.2 toolchain: the math library
    comes from nvidia-cublas's x86_64 wheel at the train's pin, and the wheel's libcublas from the venv."""
    built = _build("cublas_target", (row_id,), tmp_path_factory.mktemp(f"dist-cublas-{row_id}"))
    needed = {
        n
        for p in _libraries(built.wheels[row_id], tmp_path_factory.mktemp("x")).values()
        for n in read_elf(p).needed
    }
    assert {"libcudart.so.13", "libcublas.so.13"} <= needed
    _audit(built, row_id)
    record = _smoke(built, row_id, "x86_64")
    assert _loaded_from_venv(record, "libcublas.so.13") and _loaded_from_venv(record, "libcudart.so.13")
