"""What the sweep of 18 third-party CUDA wheels found in the device-code checks, on real binaries.

* Cubins written by the CUDA 12.4 ptxas (ELF ABI version 7: the SM in the low byte of ``e_flags``)
  and by nvcc 13.0 (ABI version 8: bits 8-15) read as the architecture they were built for, as
  cuobjdump reads them; so do the 94 cubins CUPTI 13.0 embeds as data (CUDA 9.0 to 13.1 builds,
  sm_35 to sm_121), which the audit once reported as ``sm_5`` and ``sm_13``.
* ``--runs-on X`` on libraries built with per-unit arch lists: a unit with kernels only for other
  GPUs (an arch-specific ``sm_90a`` unit, as in cuBLAS) is noted, not failed; a library with no
  unit for X fails; a strict claim (a row's ``gpu_archs``) still fails a unit built without it.
* With ``--allow embedded-device-code``, CUPTI (device code only as data) is not told it has none.

Builds with the host nvcc 13.0 and Debian's CUDA 12.4 (scripts/fetch_cuda12_debian.py, cached);
cuobjdump is the pinned wheel's (release.binary.cuobjdump); CUPTI is pinned in tests/helpers/real_wheels.py.
"""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from device_fixtures import RPATH12, Cuda, DeviceBuilder, cuda124
from helpers.proc import python_m, repo_env
from helpers.real_wheels import real_wheel
from make_fixtures import WheelSpec, write_wheel

from release.binary.cubin import cubin_target
from release.binary.cuobjdump import ensure_cuobjdump
from release.binary.elf import read_elf
from release.binary.embedded import find_embedded
from release.core.machine import default_cache_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "tests" / "fixtures" / "policy.toml"  # cu130: gpu_archs 8.0;9.0+PTX
HOST = Cuda(Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")), 13)
CU = "1.0.0+cu130"

KERNEL = r"""
__global__ void {name}_kernel(float *x, int n) {{
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 2.0f * x[i] + 1.0f;
}}
extern "C" __attribute__((visibility("default"))) void {name}_launch(float *x, int n) {{
  {name}_kernel<<<(n + 255) / 256, 256>>>(x, n);
}}
"""


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def cuobjdump() -> Path:
    return ensure_cuobjdump(default_cache_dir(os.environ))


@pytest.fixture(scope="module")
def cuda12() -> Cuda:
    return cuda124()


@pytest.fixture(scope="module")
def empty(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("empty")  # no rows.toml: a standalone audit
    return folder


def compile_cubin(cuda: Cuda, target: str, work: Path) -> bytes:
    """``nvcc -cubin -arch=sm_90a``: one kernel, written by that toolkit's ptxas."""
    work.mkdir(parents=True, exist_ok=True)
    src = work / f"k_{target}.cu"
    src.write_text(KERNEL.format(name="k"), encoding="utf-8")
    out = src.with_suffix(".cubin")
    subprocess.run([str(cuda.nvcc), "-cubin", f"-arch={target}", str(src), "-o", str(out)],
                   cwd=work, env=cuda.env, check=True, capture_output=True)  # fmt: skip
    return out.read_bytes()


def cuobjdump_elf(tool: Path, cubin: Path) -> tuple[str, str]:
    """cuobjdump's reading of a cubin's ELF header: (``sm``, ``toolkit``) from ``-elf``'s first line
    (``64bit elf: type=2, abi=7, sm=90a, toolkit=124`` or ``64-bit ELF: ..., ABI=8, sm=80, toolkit=13.0``);
    for an architecture this cuobjdump no longer supports, the one it names in refusing it."""
    proc = subprocess.run([str(tool), "-elf", str(cubin)], capture_output=True, text=True, check=False)
    m = re.search(r"\bsm=(\d+[af]?), toolkit=([\d.]+)", proc.stdout)
    if m is not None:
        toolkit = m[2] if "." in m[2] else f"{int(m[2]) // 10}.{int(m[2]) % 10}"
        return m[1], toolkit
    refused = re.search(r"Support for 'sm_(\d+)' has been removed", proc.stdout + proc.stderr)
    assert refused is not None, f"cuobjdump -elf {cubin}: {proc.stdout[:300]}{proc.stderr[:300]}"
    return refused[1], "?"


def elf_extent(data: bytes, at: int) -> int:
    """The bytes of the ELF image at ``at``: its header tables and every section with file bytes."""
    phoff, shoff = struct.unpack_from("<QQ", data, at + 0x20)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", data, at + 0x36)
    end: int = max(shoff + shentsize * shnum, phoff + phentsize * phnum)
    for i in range(shnum):
        sh = at + shoff + i * shentsize
        (kind,) = struct.unpack_from("<I", data, sh + 4)
        offset, size = struct.unpack_from("<QQ", data, sh + 0x18)
        if kind != 8:  # SHT_NOBITS has no file bytes
            end = max(end, offset + size)
    return end


def audit(wheel: Path, *args: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    proc = python_m("release", "audit", str(wheel), *args, "--json", "--no-record", cwd=cwd, env=repo_env(),
                    timeout=600)  # fmt: skip
    assert proc.returncode in (0, 1), f"exit {proc.returncode}: {proc.stderr[-2000:]}"
    doc = json.loads(proc.stdout)
    assert not doc["errors"], doc["errors"]
    (result,) = doc["results"]
    return proc.returncode, result


def messages(result: dict[str, Any], check: str, *, ok: bool) -> list[str]:
    return [f["message"] for f in result["findings"] if f["check"] == check and f["ok"] is ok]


# --------------------------------------------------------------------------- cubin headers, both ABIs


@pytest.mark.network
def test_cubins_of_the_cuda_12_4_ptxas_read_as_built(cuda12: Cuda, cuobjdump: Path, tmp_path: Path) -> None:
    """ELF ABI version 7: sm_80 is e_flags 0x500550, not arch 5; sm_90a keeps its a in bit 0x800."""
    for target, want in (("sm_80", (80, "")), ("sm_90", (90, "")), ("sm_90a", (90, "a"))):
        data = compile_cubin(cuda12, target, tmp_path)
        assert (data[7], data[8]) == (0x33, 7), f"{target}: OS/ABI {data[7]:#x}, ABI version {data[8]}"
        found = cubin_target(data[:0x40], data)
        assert found is not None
        assert (found.arch, found.variant, found.toolkit, found.kernels) == (*want, (12, 4), True)
        path = tmp_path / f"{target}.cubin"
        path.write_bytes(data)
        assert cuobjdump_elf(cuobjdump, path) == (f"{found.arch}{found.variant}", "12.4")


def test_cubins_of_nvcc_13_read_as_before(cuobjdump: Path, tmp_path: Path) -> None:
    """ELF ABI version 8: the SM in bits 8-15; the a/f variant only in the cubin's .note.nv.tkinfo."""
    for target, want in (("sm_80", (80, "")), ("sm_90a", (90, "a")), ("sm_100f", (100, "f"))):
        data = compile_cubin(HOST, target, tmp_path)
        assert (data[7], data[8]) == (0x41, 8), f"{target}: OS/ABI {data[7]:#x}, ABI version {data[8]}"
        found = cubin_target(data[:0x40], data)
        assert found is not None
        assert (found.arch, found.variant, found.toolkit, found.kernels) == (*want, (13, 0), True)
        path = tmp_path / f"{target}.cubin"
        path.write_bytes(data)
        sm, toolkit = cuobjdump_elf(cuobjdump, path)
        assert toolkit == "13.0"
        assert sm == f"{found.arch}{'a' if found.variant == 'a' else ''}"  # its header line shows no f


@pytest.mark.network
def test_a_cuda_12_wheel_reads_as_built(cuda12: Cuda, empty: Path, tmp_path: Path) -> None:
    """A .cubin file and a library of CUDA 12.4, both sm_90a: the audit reads 9.0a and CUDA 12.4."""
    builder = DeviceBuilder(tmp_path / "build", HOST)
    cubin = compile_cubin(cuda12, "sm_90a", tmp_path / "cubin")
    obj = builder.obj(KERNEL.format(name="k12"), ("sm_90a",), cuda=cuda12)
    library = builder.gxx_link([obj], cuda=cuda12, rpath=RPATH12, soname="libk12.so")
    files = {"fxcu12/__init__.py": b"", "fxcu12/kernels/k.cubin": cubin, "fxcu12/lib/libk12.so": library}
    wheel = tmp_path / write_wheel(tmp_path, WheelSpec("fxcu12", "1.0.0+cu124", files))
    code, result = audit(wheel, "--gpu-archs", "9.0a", "--checks", "device_code,gpus", cwd=empty)
    assert code == 0, result["findings"]
    inventory = {item["library"]: item for item in result["inventory"]}
    for path in ("fxcu12/kernels/k.cubin", "fxcu12/lib/libk12.so"):
        assert [e["target"] for e in inventory[path]["entries"]] == ["sm_90a"], inventory[path]
        assert inventory[path]["toolkits"] == ["12.4"]
    assert result["arch_list_found"] == "9.0a"


@pytest.mark.network
def test_cupti_embedded_cubins_are_the_gpus_cuobjdump_reads(
    cuobjdump: Path, empty: Path, tmp_path: Path
) -> None:
    """CUPTI 13.0.85 embeds 94 cubins as data, ABI versions 7 and 8: each reads as cuobjdump -elf reads it."""
    wheel = real_wheel("nvidia_cuda_cupti")
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.search(r"\.so(\.\d+)*$", n)]
        zf.extractall(tmp_path / "w", names)
    compared, abis, archs = 0, set(), set()
    for name in names:
        path = tmp_path / "w" / name
        data = path.read_bytes()
        for image in find_embedded(path, read_elf(path)):
            if image.kind != "cubin":
                continue
            one = tmp_path / f"{path.name}-{image.offset:x}.cubin"
            one.write_bytes(data[image.offset : image.offset + elf_extent(data, image.offset)])
            # the whole image (its section table comes first in 92 of the 94: it was cut there)
            assert image.size == elf_extent(data, image.offset), f"{name} at {image.offset:#x}"
            (target,) = image.targets
            sm, _toolkit = cuobjdump_elf(cuobjdump, one)
            assert target.removesuffix("f") == f"sm_{sm}", (
                f"{name} at {image.offset:#x}: {target}, cuobjdump sm={sm}"
            )
            compared += 1
            abis.add(data[image.offset + 8])
            archs.add(sm)
    assert compared == 94 and abis == {7, 8}
    assert archs == {"35", "50", "60", "62", "70", "72", "75", "80", "86", "87", "89", "90",
                     "100", "101", "103", "110", "120", "121"}  # fmt: skip

    code, result = audit(wheel, "--runs-on", "8.0", "--allow", "embedded-device-code",
                         "--checks", "libraries,device_code,gpus", cwd=empty)  # fmt: skip
    assert code == 1  # a GPU claim cannot be confirmed from device code embedded as data
    allowed = " ".join(messages(result, "device_code", ok=True))
    assert "libcupti.so.13 embeds device code as data: 42 cubins and 3 fatbins" in allowed
    assert "sm_35" in allowed and not re.search(r"\bsm_(5|13)\b", allowed)
    (failed,) = messages(result, "device_code", ok=False)
    assert failed.startswith(
        "the wheel's only device code is embedded as data (100 images in libcheckpoint.so"
    )
    assert "the GPUs of --runs-on cannot be confirmed" in failed
    (gpu,) = messages(result, "gpus", ok=False)
    assert gpu.startswith("the wheel's only device code is embedded as data (in libcheckpoint.so")
    assert not any("no library carries device code" in m for f in result["findings"] for m in [f["message"]])


# --------------------------------------------------------------------------- --runs-on and per-unit arch lists


def _library(builder: DeviceBuilder, soname: str, *units: tuple[str, ...]) -> bytes:
    """A library linked by g++ (no link-step unit) from one translation unit per arch list."""
    objs = [builder.obj(KERNEL.format(name=f"u{i}"), targets) for i, targets in enumerate(units)]
    return builder.gxx_link(objs, soname=soname)


def _wheel(folder: Path, dist: str, library: bytes) -> Path:
    files = {f"{dist}/__init__.py": b"", f"{dist}/lib/lib{dist}.so": library}
    return folder / write_wheel(folder, WheelSpec(dist, CU, files))


@pytest.fixture(scope="module")
def per_unit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("per_unit")
    builder = DeviceBuilder(folder / "build", HOST)
    return {
        # cuBLAS's shape: a unit for every claimed GPU, an arch-specific unit for H100 only
        "fxpart": _wheel(folder, "fxpart", _library(builder, "libfxpart.so",
                                                    ("sm_80", "sm_90", "compute_90"), ("sm_90a",))),
        # no unit runs on 8.0
        "fxnone": _wheel(folder, "fxnone", _library(builder, "libfxnone.so", ("sm_90a",), ("sm_100",))),
        # the row's list (8.0;9.0+PTX) in one unit; the other built without 8.0
        "fxrow": _wheel(folder, "fxrow", _library(builder, "libfxrow.so",
                                                  ("sm_80", "sm_90", "compute_90"), ("sm_90", "compute_90"))),
    }  # fmt: skip


def test_runs_on_passes_a_unit_with_kernels_only_for_other_gpus(
    per_unit: dict[str, Path], empty: Path
) -> None:
    code, result = audit(per_unit["fxpart"], "--runs-on", "8.0", "--checks", "device_code,gpus", cwd=empty)
    assert code == 0, messages(result, "gpus", ok=False)
    (note,) = [m for m in messages(result, "gpus", ok=True) if "hold kernels only for other GPUs" in m]
    assert note.startswith(
        "libfxpart.so runs on A100 (8.0), which --runs-on names, in 1 of its 2 translation units with kernels; "
        "the other 1 hold kernels only for other GPUs (1 with sm_90a; e.g. the unit at file offset 0x"
    )
    row = next(r for r in result["gpu_table"] if r["cc"] == "8.0")
    assert row["libraries"] == {"fxpart/lib/libfxpart.so": "partial"}


def test_runs_on_fails_a_library_with_no_unit_for_the_gpu(per_unit: dict[str, Path], empty: Path) -> None:
    code, result = audit(per_unit["fxnone"], "--runs-on", "8.0", "--checks", "device_code,gpus", cwd=empty)
    assert code == 1
    assert messages(result, "gpus", ok=False) == [
        "libfxnone.so does not run on A100 (8.0), which --runs-on names: 2 of its 2 translation units with "
        "kernels have neither SASS nor PTX for it"
    ]


def test_a_strict_claim_fails_the_unit_that_lacks_it(per_unit: dict[str, Path], empty: Path) -> None:
    code, result = audit(per_unit["fxpart"], "--gpu-archs", "8.0;9.0+PTX;sm_90a", "--runs-on", "8.0",
                         "--checks", "device_code,gpus", cwd=empty)  # fmt: skip
    assert code == 1
    assert messages(result, "gpus", ok=False) == [
        "libfxpart.so does not run natively on A100 (8.0), which the claim names: 1 of its 2 translation "
        "units with kernels carry no SASS for it; their kernels cannot run there"
    ]


def test_a_rows_own_list_still_holds_every_unit(per_unit: dict[str, Path], empty: Path) -> None:
    """The row (gpu_archs 8.0;9.0+PTX) is met by the library's union, so device_code passes; the unit
    built without 8.0 fails gpus, by the row its file name names, and by --row with --runs-on 8.0."""
    row = "cu130-py312-x86_64"
    for extra in ((), ("--row", row, "--runs-on", "8.0")):
        code, result = audit(per_unit["fxrow"], "--policy", str(POLICY), "--checks", "device_code,gpus",
                             *extra, cwd=empty)  # fmt: skip
        assert code == 1
        assert (result["row"], result["runs_on"]) == (row, list(extra[3:]))
        assert result["failed_checks"] == ["gpus"]
        assert messages(result, "gpus", ok=False) == [
            "libfxrow.so does not run natively on A100 (8.0), which the row claims: 1 of its 2 translation "
            "units with kernels carry no SASS for it; their kernels cannot run there"
        ]
