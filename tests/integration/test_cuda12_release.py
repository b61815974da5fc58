"""The CUDA 12 path end to end on this machine (issue 22 item 6): a `cu124` variant built with
Debian's CUDA 12.4 toolkit (scripts/fetch_cuda12_debian.py; no CUDA 12 nvcc is on PyPI),
declaring `nvidia-cuda-runtime-cu12`, its kernels library finding libcudart.so.12 through
`nvidia/cuda_runtime/lib`, audited, smoke-tested in a fresh venv with that runtime from the
default index, published to the local index and its install lines checked. The policy is
tests/fixtures/cuda12/rows.toml. Without the toolkit the row is left out, naming the fix.

The same path for aarch64 (issue 22 item 6): the cu124 row of the seed's CUDA 12 aarch64 arch
list cross-compiled with that x86_64 toolkit (nvcc 12.4 reads no ``NVCC_CCBIN``: the cross
CUDA_HOME's own gcc/g++ must be the cross compilers) against the aarch64
``nvidia-cuda-runtime-cu12`` the wheel declares, smoke-tested under emulation with that runtime
loaded from the venv, and its install lines checked for an aarch64 machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.repo import commit_all, copy_example
from helpers.text import edited

from release.binary.cuobjdump import ensure_cuobjdump, list_device_code
from release.binary.elf import read_elf
from release.core.machine import default_cache_dir
from release.resources.cpus import host_arch

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "fixtures" / "cuda12" / "rows.toml"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,
    pytest.mark.usefixtures("stop_rehearsal_index"),
]


@pytest.fixture(scope="module")
def cuda12_home() -> Path:
    """The private CUDA 12.4 tree (downloaded once from Debian's archive, then cached)."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fetch_cuda12_debian.py"), "--print-cuda-home"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


EM_AARCH64 = 183
# the fixture policy for both CPU archs, one Python both have here (no aarch64 CPython 3.12 is
# reachable), the seed's cu126 aarch64 arch list
BOTH_ARCHS = (
    ('platforms = ["x86_64"]', 'platforms = ["x86_64", "aarch64"]'),
    ('pythons = ["3.12"]', 'pythons = ["3.11"]'),
    (
        'builder_image = { x86_64 = "pytorch/manylinux2_28-builder:cuda12.4" }',
        'builder_image = { x86_64 = "pytorch/manylinux2_28-builder:cuda12.4", '
        'aarch64 = "pytorch/manylinuxaarch64-builder:cuda12.4" }\ngpu_archs.aarch64 = ["8.0", "9.0+PTX"]',
    ),
)


def _repo(tmp_path: Path, edits: tuple[tuple[str, str], ...] = ()) -> Path:
    repo = copy_example(tmp_path / "repo")
    text = POLICY.read_text(encoding="utf-8")
    for edit in edits:
        text = edited(text, edit)
    (repo / "rows.toml").write_text(text, encoding="utf-8")
    return commit_all(repo)


def _release(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return python_m(
        "release", "release", "--policy", str(repo / "rows.toml"), "--rehearsal", "--backend", "host", *args,
        cwd=repo, env={**env, "PYTHONPATH": str(ROOT)}, timeout=900,
    )  # fmt: skip


def _no_cuda_home() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "WHEELWRIGHT_ARCH")}
    return env


def test_a_cu124_row_is_built_audited_smoked_and_published(cuda12_home: Path, tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    proc = _release(repo, {**_no_cuda_home(), "CUDA_HOME": str(cuda12_home)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("cu124-py312-x86_64 "))
    assert line.split()[4:7] == ["ok", "ok", "ok"] and "uploaded" in line, line

    (wheel,) = (repo / "dist" / "cu124").glob("tinyaxpy-*+cu124-cp312-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Requires-Dist: nvidia-cuda-runtime-cu12==12.4.*" in zf.read(meta).decode().splitlines()
        lib = tmp_path / "libtinyaxpy_kernels.so"
        lib.write_bytes(zf.read("tinyaxpy/lib/libtinyaxpy_kernels.so"))
    elf = read_elf(lib)
    assert "libcudart.so.12" in elf.needed
    assert elf.runpath == ("$ORIGIN/../../nvidia/cuda_runtime/lib",)

    audit = json.loads((wheel.parent / f"{wheel.name}.audit.json").read_text())
    assert audit["passed"] is True
    probe = json.loads((wheel.parent / f"{wheel.name}.smoke.json").read_text())["evidence"]["probe"]
    cudart = [p for p in probe["loaded"] if Path(p).name.startswith("libcudart.so")]
    assert len(cudart) == 1 and cudart[0].endswith(
        "/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
    ), cudart
    for tool, first in (
        ("pip", "cu124"),
        ("uv", "cu124"),
        ("pip", "the default index"),
        ("uv", "the default index"),
    ):
        assert f"✓ {tool}, --index-url {first}: {tool} picks {wheel.name}" in proc.stdout, proc.stdout


def test_without_the_toolkit_the_cu124_row_is_left_out_naming_the_fix(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    proc = _release(repo, _no_cuda_home(), "--no-publish", "cu124-py312")
    out = proc.stdout + proc.stderr
    assert "cu124-py312-x86_64: needs a CUDA 12.4 toolchain" in out, out
    assert "run scripts/fetch_cuda12_debian.py and set CUDA_HOME to the tree it prints" in out
    assert not list((repo / "dist").glob("**/*.whl"))


@pytest.mark.skipif(host_arch() != "x86_64", reason="a cross build and emulation from x86_64")
def test_a_cu124_aarch64_row_cross_builds_with_the_cuda_12_toolkit_and_smokes_under_emulation(
    cuda12_home: Path, tmp_path: Path
) -> None:
    repo = _repo(tmp_path, BOTH_ARCHS)
    proc = _release(repo, {**_no_cuda_home(), "CUDA_HOME": str(cuda12_home)}, "--arch", "all")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    table = proc.stdout.split("\n\n")[0]
    for row in ("cu124-py311-aarch64", "cu124-py311-x86_64", "cpu-py311-aarch64"):
        line = next(x for x in table.splitlines() if x.startswith(f"{row} "))
        assert line.split()[4:7] == ["ok", "ok", "ok"] and "uploaded" in line, line

    (wheel,) = (repo / "dist" / "cu124").glob("tinyaxpy-*+cu124-cp311-*aarch64.whl")
    assert wheel.name == "tinyaxpy-0.3.0+cu124-cp311-cp311-manylinux_2_28_aarch64.whl"
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        assert "Requires-Dist: nvidia-cuda-runtime-cu12==12.4.*" in zf.read(meta).decode().splitlines()
        libs = [n for n in zf.namelist() if ".so" in Path(n).name]
        for name in libs:  # every library an aarch64 ELF file, the host side included
            (tmp_path / Path(name).name).write_bytes(zf.read(name))
            assert read_elf(tmp_path / Path(name).name).machine == EM_AARCH64, name
    kernels = read_elf(tmp_path / "libtinyaxpy_kernels.so")
    assert "libcudart.so.12" in kernels.needed
    assert kernels.runpath == ("$ORIGIN/../../nvidia/cuda_runtime/lib",)
    listed = list_device_code(
        tmp_path / "libtinyaxpy_kernels.so", cuobjdump=ensure_cuobjdump(default_cache_dir(os.environ))
    )
    assert sorted(listed) == sorted([("sass", "sm_80"), ("sass", "sm_90"), ("ptx", "compute_90")])

    probe = json.loads((wheel.parent / f"{wheel.name}.smoke.json").read_text())["evidence"]["probe"]
    assert probe["emulation"]["arch"] == "aarch64"
    cudart = [p for p in probe["loaded"] if Path(p).name.startswith("libcudart.so")]
    assert len(cudart) == 1 and cudart[0].endswith(
        "/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12"
    ), cudart
    assert probe["run_check"] is False and probe["no_gpu_reason"]

    # each arch's install checks under that arch's own header line
    lines = proc.stdout.splitlines()
    header = next(i for i, x in enumerate(lines) if "checked with Python 3.11 for an aarch64 machine" in x)
    below = lines[header + 1 : header + 5]
    assert all(x.strip().startswith("✓") and x.split(":")[0].endswith(", aarch64") for x in below), below
    assert any(f"pip picks {wheel.name}" in x for x in below), below
