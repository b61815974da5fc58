"""Idiom (g): ``find_package(CUDAToolkit)`` + ``CUDA::cudart`` and ``CUDA::cuda_driver``
(tests/fixtures/idioms/driver_target), a CUDA library that calls the driver API too, on the host
backend: cross-built for aarch64 and built natively with the pinned PyPI toolchain, neither of
which has the driver's link stub a full toolkit carries. wheelwright makes one from the toolkit's
own cuda.h (release/wheelbuild/host/driver_stub.py). Real CMake, real nvcc, real cross compilers,
real auditwheel; no GPU (the driver is the system's, and this machine has none)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.rows import rows_by_id

from release.binary.elf import read_elf
from release.core.machine import default_cache_dir
from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import host_arch
from release.wheelbuild.host.cmake_toolchain import toolchain_text
from release.wheelbuild.run import build_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,  # the aarch64 CUDA runtime wheel, the CUDA 13.2 toolchain (cached after)
    pytest.mark.skipif(host_arch() != "x86_64", reason="cross builds from an x86_64 machine"),
]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "fixtures" / "idioms" / "driver_target"
POLICY = PROJECT / "rows.toml"
CACHE = default_cache_dir(os.environ)
ROWS = ("cu130-py311-aarch64", "cu132-py312-x86_64")  # cross; native on the pinned PyPI toolchain
KERNELS = "idiom_driver/libidiom_driver_kernels.so"
WHEELS = {
    "cu130-py311-aarch64": "idiom_driver-0.1.0+cu130-cp311-cp311-manylinux_2_28_aarch64.whl",
    "cu132-py312-x86_64": "idiom_driver-0.1.0+cu132-cp312-cp312-manylinux_2_28_x86_64.whl",
}


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist-driver")
    by_id = rows_by_id(POLICY)
    for row_id in ROWS:
        build_row(
            by_id[row_id], policy_path=POLICY, dist_dir=out, cache_dir=CACHE, backend="host", env=_env()
        )
    return out


@pytest.mark.parametrize("row_id", ROWS)
def test_the_driver_idiom_links_libcuda_so_1_packs_no_stub_and_passes_the_audit(
    dist: Path, row_id: str, tmp_path: Path
) -> None:
    (wheel,) = sorted(dist.glob(f"*/{WHEELS[row_id]}"))
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(tmp_path)
    assert not [n for n in names if Path(n).name.startswith("libcuda.")], names
    kernels = read_elf(tmp_path / KERNELS)
    cpu = cpu_arch(row_id.split("-")[2])
    assert cpu is not None and kernels.machine == cpu.elf_machine
    assert "libcuda.so.1" in kernels.needed and "libcudart.so.13" in kernels.needed
    assert kernels.runpath == ("$ORIGIN/../nvidia/cu13/lib",)  # no stub folder, no cache path
    done = python_m("release", "audit", row_id, "--policy", str(POLICY), "--dist", str(dist), env=_env())
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout


def _configure(tmp_path: Path, cuda_home: Path) -> subprocess.CompletedProcess[str]:
    """CMake's configure of the fixture in cross mode against ``cuda_home``, as the cross build hands
    it (the toolchain file), with this machine's Python for FindPython."""
    cc, cxx = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("aarch64-linux-gnu-g++")
    if cc is None or cxx is None:
        pytest.fail("aarch64-linux-gnu-g++ is missing: scripts/setup.sh installs g++-aarch64-linux-gnu")
    tmp_path.mkdir(parents=True)
    toolchain = tmp_path / "toolchain.cmake"
    toolchain.write_text(
        toolchain_text(
            "aarch64",
            cc=Path(cc),
            cxx=Path(cxx),
            sysroot=Path("/usr/aarch64-linux-gnu"),
            cuda_home=cuda_home,
            cuda_target=cuda_home / "targets" / "aarch64-linux",
        ),
        encoding="utf-8",
    )
    return subprocess.run(
        [
            "cmake",
            "-S",
            str(PROJECT),
            "-B",
            str(tmp_path / "build"),
            f"-DCMAKE_TOOLCHAIN_FILE={toolchain}",
            f"-DPython_EXECUTABLE={sys.executable}",
            f"-DPython_INCLUDE_DIR={sysconfig.get_paths()['include']}",
            "-DCMAKE_CUDA_ARCHITECTURES=90",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_must_fail_a_cross_cuda_home_without_the_stub_stops_cmake_at_cuda_driver(
    dist: Path, tmp_path: Path
) -> None:
    """The failure the stub answers: the same cross CUDA home with its stubs folder removed."""
    homes = sorted((CACHE / "cross" / "aarch64").glob("cuda-13.0.*"), key=lambda p: p.stat().st_mtime)
    home = next(h for h in reversed(homes) if (h / "targets" / "aarch64-linux" / "lib" / "stubs").is_dir())
    assert _configure(tmp_path / "with", home).returncode == 0
    bare = tmp_path / "bare"
    shutil.copytree(home, bare, symlinks=True)
    shutil.rmtree(bare / "targets" / "aarch64-linux" / "lib" / "stubs")
    done = _configure(tmp_path / "without", bare)
    assert done.returncode != 0
    assert "CUDA::cuda_driver" in done.stdout + done.stderr
