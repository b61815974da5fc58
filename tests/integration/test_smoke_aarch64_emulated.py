"""aarch64 rows smoke-tested on this x86_64 machine under emulation (qemu-user, binfmt qemu-aarch64),
end to end by the real smoke code: real aarch64 wheels built here with aarch64-linux-gnu-gcc, a real
arm64 CPython from Debian's packages (release.emulate, cached in the wheelwright cache), a fresh venv,
pip installing the aarch64 ``nvidia-cuda-runtime`` from PyPI (through the smoke wheelhouse, downloaded
with --platform), the probe's /proc/self/maps read under qemu, the same evaluate() as x86_64.

Must-pass: a CPU wheel whose check runs (an aarch64 library computing saxpy), a CUDA wheel whose
library links libcudart.so.13 by an $ORIGIN RUNPATH (check skipped: no GPU, said so) and whose C++ SDK
a cross-compiled consumer links and loads under emulation. Must-fail: the CUDA wheel without its
RUNPATH (libcudart cannot load from the venv), and an aarch64 wheel shipping an x86_64 library.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from helpers.elf import write_wheel

from release import records
from release.core.errors import ToolError
from release.core.machine import PythonInfo, default_cache_dir
from release.core.pip import NO_PIP_CONFIG
from release.emulate import binfmt
from release.emulate.python import find_python
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Policy, Project
from release.resources.cpus import host_arch
from release.smoke.record import write_record
from release.smoke.run import smoke_wheel
from release.smoke.wheelhouse import Wheelhouse, target_for, wheelhouse_for

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = "nvidia-cuda-runtime==13.0.96"
TAG = "manylinux_2_28_aarch64"
CC = "aarch64-linux-gnu-gcc"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,  # Debian's arm64 packages and PyPI's aarch64 runtime wheel, cached after
    pytest.mark.skipif(host_arch() != "x86_64", reason="emulation of aarch64 on an x86_64 machine"),
    pytest.mark.skipif(shutil.which(CC) is None, reason=f"{CC} (g++-aarch64-linux-gnu) is not installed"),
]


@pytest.fixture(scope="module", autouse=True)
def _emulation() -> None:
    cap = binfmt.capability("aarch64")
    if not cap.runs:
        pytest.skip(f"{cap.reason}; {'; '.join(cap.fix)}")


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(ROOT / "rows.toml")


@pytest.fixture(scope="module")
def rows(policy: Policy) -> dict[str, Row]:
    return {r.id: r for r in expand(policy)}


@pytest.fixture(scope="module")
def py311() -> PythonInfo:
    return find_python("3.11", "aarch64", env=os.environ)


# --------------------------------------------------------------------------- real aarch64 wheels

SAXPY_C = """
void emu_saxpy(int n, float a, const float *x, float *y) { for (int i = 0; i < n; i++) y[i] = a * x[i] + y[i]; }
"""
CUDA_C = """
extern int cudaGetDeviceCount(int *count);
int emu_devices(void) { int n = 0; int rc = cudaGetDeviceCount(&n); return rc ? -rc : n; }
"""
CPU_INIT = """
import ctypes, os, platform
_lib = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "libemusaxpy.so"))

def selftest():
    n = 1024
    x = (ctypes.c_float * n)(*[float(i) for i in range(n)])
    y = (ctypes.c_float * n)(*[1.0] * n)
    _lib.emu_saxpy(n, ctypes.c_float(2.0), x, y)
    diff = max(abs(y[i] - (2.0 * i + 1.0)) for i in range(n))
    return {"max_abs_diff": diff, "device": "cpu (" + platform.machine() + ")"}
"""
CUDA_INIT = """
import ctypes, os
HERE = os.path.dirname(__file__)
_lib = None

def _load():  # lazily, as a kernels library opened on first use
    global _lib
    if _lib is None:
        _lib = ctypes.CDLL(os.path.join(HERE, "lib", "libemucuda.so"))
    return _lib

def selftest():
    n = _load().emu_devices()
    if n <= 0:
        raise RuntimeError("cudaGetDeviceCount failed: %d" % n)
    return {"max_abs_diff": 0.0, "device": "cuda"}

def sdk_paths():
    return {"include_dir": os.path.join(HERE, "include"), "lib_dir": os.path.join(HERE, "lib"),
            "libraries": ["emucuda"], "header": "emu.h"}
"""


def _cc(out: Path, source: str, *args: str, compiler: str = CC) -> bytes:
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(src), *args], check=True, timeout=120
    )
    return out.read_bytes()


@pytest.fixture(scope="module")
def aarch64_cudart(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder holding libcudart.so.13 of PyPI's aarch64 nvidia-cuda-runtime wheel (to link against)."""
    tmp = tmp_path_factory.mktemp("cudart-aarch64")
    args = target_for("manylinux_2_28", "aarch64", "3.11").pip_args()
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--isolated", "--quiet", "--no-deps", "--only-binary=:all:",
         *args, "--dest", str(tmp), RUNTIME],
        check=True, timeout=600, env={**os.environ, **NO_PIP_CONFIG},
    )  # fmt: skip
    (wheel,) = tmp.glob("nvidia_cuda_runtime-*aarch64*.whl")
    with zipfile.ZipFile(wheel) as zf:
        zf.extract("nvidia/cu13/lib/libcudart.so.13", tmp)
    return tmp / "nvidia/cu13/lib"


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory, aarch64_cudart: Path) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("emu-wheels")
    build = tmp / "build"
    build.mkdir()
    cuda_args = (f"-L{aarch64_cudart}", "-Wl,--no-as-needed", "-l:libcudart.so.13")
    runpath = ("-Wl,--enable-new-dtags", "-Wl,-rpath,$ORIGIN/../../nvidia/cu13/lib")
    cuda_lib = _cc(build / "libemucuda.so", CUDA_C, *cuda_args, *runpath)
    no_runpath = _cc(build / "libemucuda_norunpath.so", CUDA_C, *cuda_args)
    cpu_lib = _cc(build / "libemusaxpy.so", SAXPY_C)
    x86_lib = _cc(build / "libemusaxpy_x86.so", SAXPY_C, compiler="gcc")
    header = b'#pragma once\nextern "C" int emu_devices(void);\n'
    requires = ("nvidia-cuda-runtime==13.0.*",)

    def cuda_files(lib: bytes) -> dict[str, bytes]:
        return {
            "emuaxpy/__init__.py": CUDA_INIT.encode(),
            "emuaxpy/lib/libemucuda.so": lib,
            "emuaxpy/include/emu.h": header,
        }

    return {
        "cuda": write_wheel(tmp / "cuda", "emuaxpy", cuda_files(cuda_lib), tag=TAG, requires=requires),
        "cuda-no-runpath": write_wheel(
            tmp / "bad", "emuaxpy", cuda_files(no_runpath), tag=TAG, requires=requires
        ),
        "cpu": write_wheel(
            tmp / "cpu",
            "emuaxpy",
            {"emuaxpy/__init__.py": CPU_INIT.encode(), "emuaxpy/libemusaxpy.so": cpu_lib},
            tag=TAG,
        ),
        "cpu-x86-lib": write_wheel(
            tmp / "x86",
            "emuaxpy",
            {"emuaxpy/__init__.py": CPU_INIT.encode(), "emuaxpy/libemusaxpy.so": x86_lib},
            tag=TAG,
        ),
    }


def _project(policy: Policy, *, sdk: bool) -> Project:
    return dataclasses.replace(
        policy.project,
        name="emuaxpy",
        import_name="emuaxpy",
        check="emuaxpy:selftest",
        sdk="emuaxpy:sdk_paths" if sdk else None,
    )


def _house(row: Row) -> Wheelhouse:
    return wheelhouse_for(default_cache_dir(os.environ), row.variant, index_url=None)


# --------------------------------------------------------------------------- the interpreter


def test_emulated_interpreter_and_its_venv_run_aarch64_only_with_the_prefix(
    py311: PythonInfo, tmp_path: Path
) -> None:
    assert py311.arch == "aarch64" and py311.version.startswith("3.11.")
    assert py311.emulated is not None and "qemu-user" in py311.emulated and "bookworm" in py311.emulated
    env = py311.environ(os.environ)
    assert Path(env["QEMU_LD_PREFIX"]).is_dir()
    subprocess.run(
        [str(py311.path), "-m", "venv", "--without-pip", str(tmp_path / "v")],
        env=env,
        check=True,
        timeout=120,
    )
    vpy = tmp_path / "v" / "bin" / "python"
    code = "import json, platform, sys; print(json.dumps([platform.machine(), sys.prefix]))"
    out = subprocess.run(
        [str(vpy), "-c", code], env=env, capture_output=True, text=True, check=True, timeout=120
    )
    assert json.loads(out.stdout) == ["aarch64", str(tmp_path / "v")]
    bare = {k: v for k, v in os.environ.items() if k != "QEMU_LD_PREFIX"}
    without = subprocess.run([str(vpy), "-c", "pass"], env=bare, capture_output=True, text=True, timeout=120)
    assert without.returncode != 0 and "ld-linux-aarch64.so.1" in without.stderr, without.stderr


def test_the_sysroot_is_made_once_and_then_found_in_the_cache(py311: PythonInfo) -> None:
    started = time.monotonic()
    again = find_python("3.11", "aarch64", env=os.environ)
    assert again == py311
    assert time.monotonic() - started < 5.0  # no apt, no emulated run: the manifest is read
    manifest = json.loads((Path(dict(py311.env)["QEMU_LD_PREFIX"]).parent / "manifest.json").read_text())
    assert manifest["recipe"]["suite"] == "bookworm" and manifest["python_version"] == py311.version
    assert {p["name"] for p in manifest["packages"]} >= {"python3.11", "python3.11-venv", "libc6", "libssl3"}


@pytest.mark.parametrize("version", ["3.10", "3.12"])
def test_a_python_no_source_has_for_aarch64_is_refused_saying_why(version: str) -> None:
    with pytest.raises(
        ToolError, match=rf"no aarch64 CPython {version} reachable here: Debian has no python{version}"
    ):
        find_python(version, "aarch64", env=os.environ)


# --------------------------------------------------------------------------- the smoke step


def test_cpu_wheel_runs_its_check_under_emulation(
    wheels: dict[str, Path], rows: dict[str, Row], policy: Policy, py311: PythonInfo
) -> None:
    row = rows["cpu-py311-aarch64"]
    outcome = smoke_wheel(row, _project(policy, sdk=False), wheels["cpu"], py311, wheelhouse=_house(row))
    text = "\n".join(outcome.lines)
    assert outcome.passed and outcome.executed, text
    assert "✓ check computation ran on cpu (aarch64): max |diff| vs CPU reference = 0" in text
    assert "✓ CPU wheel: no CUDA runtime loaded" in text
    assert [ln for ln in outcome.lines if "ran under emulation" in ln] == [outcome.lines[-1]]
    assert outcome.details["emulation"]["arch"] == "aarch64"


def test_cuda_wheel_loads_libcudart_from_the_venv_under_emulation_and_says_no_gpu(
    wheels: dict[str, Path], rows: dict[str, Row], policy: Policy, py311: PythonInfo, tmp_path: Path
) -> None:
    row = rows["cu130-py311-aarch64"]
    wheel = shutil.copy2(wheels["cuda"], tmp_path)
    outcome = smoke_wheel(row, _project(policy, sdk=True), Path(wheel), py311, wheelhouse=_house(row))
    text = "\n".join(outcome.lines)
    assert outcome.passed, text
    # /proc/self/maps under qemu-user names the real files: the venv's aarch64 libcudart, not the host's
    assert outcome.libcudart is not None and outcome.libcudart.endswith(
        "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcudart.so.13"
    ), text
    assert (
        "✓ loaded the shipped library that links a CUDA library, after the import: emuaxpy/lib/libemucuda.so"
        in text
    )
    assert not outcome.executed and "no GPU here: execution skipped" in text
    assert "✓ a C++ program outside the wheel compiled, linked and loaded the SDK" in text
    emulated = [ln for ln in outcome.lines if "ran under emulation" in ln]
    assert len(emulated) == 1 and "CPython 3.11" in emulated[0] and "s wall time" in emulated[0]
    assert outcome.details["emulation"]["wall_seconds"] > 0
    record = write_record(Path(wheel), row, outcome, policy_sha256=policy.sha256)
    data = json.loads(record.read_text())
    assert data["executed"] is False and data["skipped_reason"].startswith("no CUDA driver")
    assert sum("ran under emulation" in ln for ln in data["lines"]) == 1
    assert data["evidence"]["probe"]["emulation"]["how"] == py311.emulated
    assert records.read(Path(wheel), records.SmokeRecord) is not None


def test_cuda_wheel_without_its_runpath_fails_under_emulation(
    wheels: dict[str, Path], rows: dict[str, Row], policy: Policy, py311: PythonInfo
) -> None:
    row = rows["cu130-py311-aarch64"]
    outcome = smoke_wheel(
        row, _project(policy, sdk=False), wheels["cuda-no-runpath"], py311, wheelhouse=_house(row)
    )
    text = "\n".join(outcome.lines)
    assert not outcome.passed, text
    assert (
        "✗ emuaxpy/lib/libemucuda.so (links libcudart.so.13) does not load after importing the package: "
        "libcudart.so.13: cannot open shared object file: No such file or directory" in text
    ), text
    assert "✗ no libcudart was loaded" in text


def test_an_x86_64_library_in_an_aarch64_wheel_fails_under_emulation(
    wheels: dict[str, Path], rows: dict[str, Row], policy: Policy, py311: PythonInfo
) -> None:
    row = rows["cpu-py311-aarch64"]
    outcome = smoke_wheel(
        row, _project(policy, sdk=False), wheels["cpu-x86-lib"], py311, wheelhouse=_house(row)
    )
    text = "\n".join(outcome.lines)
    assert not outcome.passed, text
    # the loader says only "cannot open shared object file" of a library of another CPU; the smoke names it
    assert (
        "✗ import failed in a fresh venv: OSError: " in text
        and "libemusaxpy.so: cannot open shared object file" in text
    )
    assert (
        "✗ emuaxpy/libemusaxpy.so is built for x86_64, not for this aarch64 row: no aarch64 interpreter can load it"
        in text
    )


def test_python_3_13_from_trixie_smokes_the_cpu_wheel(
    wheels: dict[str, Path], rows: dict[str, Row], policy: Policy
) -> None:
    row = rows["cpu-py313-aarch64"]
    py313 = find_python("3.13", "aarch64", env=os.environ)
    assert py313.version.startswith("3.13.") and "trixie" in (py313.emulated or "")
    outcome = smoke_wheel(row, _project(policy, sdk=False), wheels["cpu"], py313, wheelhouse=_house(row))
    assert outcome.passed and outcome.executed, "\n".join(outcome.lines)
