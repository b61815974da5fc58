"""Relocatable device code never device-linked fails "cannot load" whatever else the wheel holds
(issue 33, item 4).

Two libraries built here with the real nvcc: ``libk.so`` from ``-rdc=true`` objects, never
device-linked (it calls ``__cudaRegisterLinkedBinary_*``), and ``libklink.so``, the device link of
the same objects, which defines those symbols. When ``libklink.so`` is not in ``libk.so``'s NEEDED
closure the loader cannot resolve the call (a Python extension loads ``RTLD_LOCAL``): the audit fails
``libk.so`` as "cannot be loaded" and its GPU table says so; before, any file of the wheel defining
the symbol counted, and every library "ran natively". The twin whose ``libk.so`` needs
``libklink.so`` (RUNPATH ``$ORIGIN``) loads, and passes on that ground.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from helpers.proc import python_m, repo_env

pytestmark = pytest.mark.integration

KERNEL = """
__global__ void kern(float* x) { x[threadIdx.x] *= 2.0f; }
extern "C" int launch(float* x) { kern<<<1, 32>>>(x); return (int)cudaGetLastError(); }
"""
RUNTIME = "$ORIGIN/../../nvidia/cu13/lib"  # where nvidia-cuda-runtime installs libcudart.so.13


def _run(argv: list[str], cwd: Path) -> None:
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, f"{argv[0]}: {proc.stderr[-2000:]}"


def _wheel(folder: Path, name: str, libs: dict[str, bytes]) -> Path:
    info = f"{name}-1.0.dist-info"
    files = {f"{name}/lib/{n}": data for n, data in libs.items()}
    files[f"{name}/__init__.py"] = b""
    files[f"{info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: nvidia-cuda-runtime==13.0.*\n"
    ).encode()
    files[f"{info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: py3-none-manylinux_2_28_x86_64\n"
    )
    digest = {
        n: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
        for n, d in files.items()
    }
    record = "".join(f"{n},sha256={digest[n]},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    path = folder / f"{name}-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in {**files, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(member, data)
    return path


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The two wheels (about 2 s of nvcc and g++): ``apart`` and ``needed``."""
    nvcc = shutil.which("nvcc")
    assert nvcc is not None, (
        "nvcc is not on PATH: scripts/setup.sh installs the CUDA toolkit this test builds with"
    )
    work = tmp_path_factory.mktemp("rdc")
    (work / "k.cu").write_text(KERNEL, encoding="utf-8")
    (work / "apart").mkdir()
    (work / "needed").mkdir()
    cu = [nvcc, "-arch=sm_80", "-cudart", "shared", "-Xcompiler", "-fPIC"]
    _run([*cu, "-c", "-rdc=true", "k.cu", "-o", "k.o"], work)
    _run([*cu, "-dlink", "k.o", "-o", "k_dlink.o"], work)

    # the device link's library, by nvcc (it needs libcudart.so.13, reached where the runtime installs it)
    _run([*cu, "-shared", "k_dlink.o", "-o", "libklink.so", "-Xlinker", "-soname,libklink.so",
          "-Xlinker", "--enable-new-dtags", "-Xlinker", f"-rpath,{RUNTIME}"], work)  # fmt: skip
    # libk.so by g++: nvcc would device-link the -rdc object on its own; its cudart calls come through
    # libklink.so's NEEDED (the twin) or stay undefined (a shared library may leave them so)
    gxx = ["g++", "-shared", "k.o", "-Wl,-soname,libk.so", "-Wl,--enable-new-dtags"]
    _run([*gxx, "-o", "apart/libk.so"], work)
    _run([*gxx, "-o", "needed/libk.so", "-L.", "-l:libklink.so", "-Wl,-rpath,$ORIGIN"], work)
    link = (work / "libklink.so").read_bytes()
    out = {}
    for case in ("apart", "needed"):
        out[case] = _wheel(
            work, f"rdc{case}", {"libk.so": (work / case / "libk.so").read_bytes(), "libklink.so": link}
        )
    return out


def _audit(wheel: Path, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    proc = python_m(
        "release",
        "audit",
        str(wheel),
        "--gpu-archs",
        "8.0",
        "--json",
        cwd=tmp_path,
        env=repo_env(),
        timeout=300,
    )
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout)["results"][0]


def test_a_definition_outside_the_needed_closure_does_not_count(
    pair: dict[str, Path], tmp_path: Path
) -> None:
    code, result = _audit(pair["apart"], tmp_path)
    failing = [f["message"] for f in result["findings"] if not f["ok"]]
    assert code == 1, result["findings"]
    assert any(m.startswith("libk.so cannot be loaded:") for m in failing), failing
    (libk,) = [lib for lib in result["inventory"] if lib["library"].endswith("/libk.so")]
    assert libk["link_needs"] and libk["link_needs"][0].startswith("__cudaRegisterLinkedBinary_"), libk
    cells = {row["gpu"]: row for row in result["gpu_table"]}
    assert cells, result["gpu_table"]
    assert all(
        "native" not in json.dumps(row.get("libraries", {}).get("rdcapart/lib/libk.so", ""))
        for row in cells.values()
    )
    passing = [f["message"] for f in result["findings"] if f["ok"]]
    assert not any("every library runs" in m for m in passing), passing


def test_a_definition_in_the_needed_closure_counts(pair: dict[str, Path], tmp_path: Path) -> None:
    _code, result = _audit(pair["needed"], tmp_path)
    messages = [f["message"] for f in result["findings"]]
    assert not any("cannot be loaded" in m for m in messages), messages
    (libk,) = [lib for lib in result["inventory"] if lib["library"].endswith("/libk.so")]
    assert libk["link_needs"] == [], libk


def test_the_gpu_table_says_the_library_cannot_load(pair: dict[str, Path], tmp_path: Path) -> None:
    proc = python_m(
        "release",
        "audit",
        str(pair["apart"]),
        "--gpu-archs",
        "8.0",
        cwd=tmp_path,
        env=repo_env(),
        timeout=300,
    )
    table = proc.stdout.split("\nGPU support (", 1)[1].splitlines()
    header = table[1].split()
    a100 = next(line for line in table if line.strip().startswith("A100"))
    assert "libk.so" in header and "cannot load" in a100, table
    assert "libk.so does not run natively on A100 (8.0)" in proc.stdout
