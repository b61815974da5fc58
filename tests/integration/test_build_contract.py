"""The CUDA repair step on real wheels holding real ELF libraries (compiled here with g++ and
nvcc), through the same function the host and container builds call.

A wheel written without wheelwright in mind comes out with the row's label, Requires-Dist and
RUNPATH, a valid RECORD, installable by pip; a wheel that already satisfies the contract comes
out byte-identical; what cannot be fixed stops naming the library.
"""

from __future__ import annotations

import base64
import csv
import email.parser
import hashlib
import io
import os
import subprocess
import zipfile
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.binary.elf import read_elf
from release.core.machine import default_cache_dir, find_python
from release.wheelbuild.host.tools import ensure_patchelf
from release.wheelbuild.repair.contract import ContractError, Fix, apply_contract, row_contract

pytestmark = pytest.mark.integration

ROWS = rows_by_id()
CACHE = default_cache_dir(os.environ)
TOOLKIT = Path("/usr/local/cuda-13.0")
HAS_TOOLKIT = (TOOLKIT / "lib64" / "libcudart.so").exists() and (TOOLKIT / "bin" / "nvcc").is_file()
needs_toolkit = pytest.mark.skipif(
    not HAS_TOOLKIT, reason="needs the CUDA 13.0 toolkit at /usr/local/cuda-13.0"
)
EPOCH = 1700000000


def _run(argv: list[str], cwd: Path) -> None:
    result = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stderr


def apply_row_contract(wheel: Path, row_id: str, work: Path, patchelf: Path) -> tuple[Path, Fix]:
    """apply_contract with the contract of the repository's row ``row_id``, at EPOCH."""
    return apply_contract(wheel, row_contract(ROWS[row_id]), work=work, patchelf=patchelf, epoch=EPOCH)


def stub(folder: Path, soname: str) -> None:
    """A real shared library whose SONAME is ``soname`` (stands for a CUDA library not installed here)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "empty.c").write_text("int wheelwright_stub;\n")
    link = soname.split(".so")[0] + ".so"
    _run(["gcc", "-shared", "-fPIC", "-o", link, f"-Wl,-soname,{soname}", "empty.c"], folder)


def library(tmp: Path, name: str, *, links: list[str], libdirs: list[Path]) -> Path:
    """A shared library that calls into each of ``links`` (``-lcudart`` and the like)."""
    src = tmp / f"{name}.c"
    src.write_text("int wheelwright_entry(void) { return 0; }\n")
    out = tmp / f"{name}.so"
    argv = ["gcc", "-shared", "-fPIC", "-o", str(out), str(src), "-Wl,--no-as-needed"]
    argv += [f"-L{d}" for d in libdirs] + [f"-l{lib}" for lib in links]
    _run(argv, tmp)
    return out


def record_line(name: str, data: bytes) -> list[str]:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return [name, f"sha256={digest}", str(len(data))]


def make_wheel(
    folder: Path,
    *,
    name: str = "pkg",
    version: str = "0.1.0",
    files: dict[str, bytes],
    requires: tuple[str, ...] = (),
    tag: str = "cp312-cp312-manylinux_2_28_x86_64",
) -> Path:
    """A wheel as a build backend writes one, with a correct RECORD."""
    dist_info = f"{name}-{version}.dist-info"
    meta = f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n"
    meta += "".join(f"Requires-Dist: {r}\n" for r in requires) + "\nA package.\n"
    members = dict(files)
    members[f"{dist_info}/METADATA"] = meta.encode()
    members[f"{dist_info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {tag}\n".encode()
    )
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for member, data in members.items():
        writer.writerow(record_line(member, data))
    writer.writerow([f"{dist_info}/RECORD", "", ""])
    members[f"{dist_info}/RECORD"] = out.getvalue().encode()
    path = folder / f"{name}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for member, data in members.items():
            info = zipfile.ZipInfo(member, (2024, 1, 2, 3, 4, 6))
            info.external_attr = (0o100755 if member.endswith(".so") else 0o100644) << 16
            zf.writestr(info, data)
    return path


def check_record(wheel: Path) -> dict[str, bytes]:
    """Every member is in RECORD with its hash and size, and nothing else is."""
    with zipfile.ZipFile(wheel) as zf:
        contents = {n: zf.read(n) for n in zf.namelist()}
    record_name = next(n for n in contents if n.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(contents[record_name].decode())))
    assert {r[0] for r in rows} == set(contents)
    for row in rows:
        if row[0] != record_name:
            assert row == record_line(row[0], contents[row[0]]), row[0]
    return contents


@pytest.fixture(scope="module")
def patchelf() -> Path:
    return ensure_patchelf(env=dict(os.environ), cache_dir=CACHE, row_id="test")


@needs_toolkit
def test_a_plain_wheel_is_brought_to_the_contract_and_stays_there(tmp_path: Path, patchelf: Path) -> None:
    lib = library(tmp_path, "libk", links=["cudart"], libdirs=[TOOLKIT / "lib64"])
    wheel = make_wheel(tmp_path, files={"pkg/__init__.py": b"", "pkg/lib/libk.so": lib.read_bytes()})
    contract = row_contract(ROWS["cu130-py312-x86_64"])
    fixed, fix = apply_contract(wheel, contract, work=tmp_path / "w1", patchelf=patchelf, epoch=EPOCH)
    assert fixed.name == "pkg-0.1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert fix.requires == ("nvidia-cuda-runtime==13.0.*",)
    contents = check_record(fixed)
    meta = email.parser.Parser().parsestr(contents["pkg-0.1.0+cu130.dist-info/METADATA"].decode())
    assert meta["Version"] == "0.1.0+cu130"
    assert meta.get_all("Requires-Dist") == ["nvidia-cuda-runtime==13.0.*"]
    assert meta.get_payload() == "A package.\n"
    (tmp_path / "libk.so").write_bytes(contents["pkg/lib/libk.so"])
    info = read_elf(tmp_path / "libk.so")
    assert info.runpath == ("$ORIGIN/../../nvidia/cu13/lib",) and info.rpath == ()
    assert "libcudart.so.13" in info.needed
    with zipfile.ZipFile(fixed) as zf:
        so = zf.getinfo("pkg/lib/libk.so")
        assert (so.external_attr >> 16) & 0o777 == 0o755 and so.date_time == (2023, 11, 14, 22, 13, 20)

    # deterministic: the same input gives the same bytes
    again, _ = apply_contract(wheel, contract, work=tmp_path / "w2", patchelf=patchelf, epoch=EPOCH)
    assert again.read_bytes() == fixed.read_bytes()
    # a wheel that satisfies the contract is kept byte for byte
    before = fixed.read_bytes()
    kept, fix2 = apply_contract(fixed, contract, work=tmp_path / "w3", patchelf=patchelf, epoch=EPOCH)
    assert kept == fixed and not fix2.needed and kept.read_bytes() == before
    assert not (tmp_path / "w3" / "contract").exists()

    # pip installs it as it is (names, RECORD)
    python = find_python("3.12", env=dict(os.environ))
    target = tmp_path / "site"
    result = subprocess.run(
        [
            str(python.path),
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(fixed),
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
        env={**os.environ, "PIP_CONFIG_FILE": os.devnull},
    )
    assert result.returncode == 0, result.stderr
    assert (target / "pkg-0.1.0+cu130.dist-info" / "METADATA").is_file()
    assert (target / "pkg" / "lib" / "libk.so").is_file()


@needs_toolkit
def test_a_data_folder_is_renamed_and_its_libraries_placed(tmp_path: Path, patchelf: Path) -> None:
    lib = library(tmp_path, "libk", links=["cudart"], libdirs=[TOOLKIT / "lib64"])
    wheel = make_wheel(tmp_path, files={"pkg-0.1.0.data/platlib/pkg/libk.so": lib.read_bytes()})
    fixed, fix = apply_row_contract(wheel, "cu130-py312-x86_64", tmp_path / "w", patchelf)
    contents = check_record(fixed)
    assert "pkg-0.1.0+cu130.data/platlib/pkg/libk.so" in contents
    assert fix.runpaths == (("pkg-0.1.0.data/platlib/pkg/libk.so", ("$ORIGIN/../nvidia/cu13/lib",)),)


@needs_toolkit
def test_a_statically_linked_runtime_is_refused_naming_the_library(tmp_path: Path, patchelf: Path) -> None:
    src = tmp_path / "k.cu"
    src.write_text(
        '__global__ void k(float* x) { x[0] = 1; }\nextern "C" void go(float* x) { k<<<1, 1>>>(x); }\n'
    )
    out = tmp_path / "libstatic.so"
    # nvcc's default: the static CUDA runtime
    _run(
        [
            str(TOOLKIT / "bin" / "nvcc"),
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-arch=sm_80",
            str(src),
            "-o",
            str(out),
        ],
        tmp_path,
    )
    assert not any(n.startswith("libcudart") for n in read_elf(out).needed)
    wheel = make_wheel(tmp_path, files={"pkg/libstatic.so": out.read_bytes()})
    with pytest.raises(ContractError) as info:
        apply_row_contract(wheel, "cu130-py312-x86_64", tmp_path / "w", patchelf)
    assert "pkg/libstatic.so links the CUDA runtime statically" in str(info.value)
    assert info.value.return_code == 4


def test_a_cuda_library_no_package_provides_is_refused(tmp_path: Path, patchelf: Path) -> None:
    stub(tmp_path / "stubs", "libcudla.so.1")
    lib = library(tmp_path, "libk", links=["cudla"], libdirs=[tmp_path / "stubs"])
    assert "libcudla.so.1" in read_elf(lib).needed
    wheel = make_wheel(tmp_path, files={"pkg/libk.so": lib.read_bytes()})
    with pytest.raises(
        ContractError, match=r"pkg/libk.so needs libcudla.so.1 \(cuDLA\), which no pip package provides"
    ):
        apply_row_contract(wheel, "cu130-py312-x86_64", tmp_path / "w", patchelf)


def test_a_runtime_of_another_cuda_major_is_refused(tmp_path: Path, patchelf: Path) -> None:
    stub(tmp_path / "stubs", "libcudart.so.12")
    lib = library(tmp_path, "libk", links=["cudart"], libdirs=[tmp_path / "stubs"])
    wheel = make_wheel(tmp_path, files={"pkg/libk.so": lib.read_bytes()})
    with pytest.raises(
        ContractError,
        match=r"pkg/libk.so needs the CUDA runtime of CUDA 12 .*row cu130-py312-x86_64 is CUDA 13.0",
    ):
        apply_row_contract(wheel, "cu130-py312-x86_64", tmp_path / "w", patchelf)
    # the same library is what a cu126 wheel should hold: it gets the CUDA 12 package's folder
    fixed, fix = apply_row_contract(wheel, "cu126-py312-x86_64", tmp_path / "w12", patchelf)
    assert fixed.name.startswith("pkg-0.1.0+cu126-") and fix.requires == ("nvidia-cuda-runtime-cu12==12.6.*",)
    assert fix.runpaths == (("pkg/libk.so", ("$ORIGIN/../nvidia/cuda_runtime/lib",)),)


def test_a_cpu_wheel_that_needs_cuda_is_refused(tmp_path: Path, patchelf: Path) -> None:
    stub(tmp_path / "stubs", "libcudart.so.13")
    lib = library(tmp_path, "libk", links=["cudart"], libdirs=[tmp_path / "stubs"])
    wheel = make_wheel(tmp_path, files={"pkg/libk.so": lib.read_bytes()})
    with pytest.raises(ContractError, match="a CPU wheel needs no CUDA library"):
        apply_row_contract(wheel, "cpu-py312-x86_64", tmp_path / "w", patchelf)
    (tmp_path / "plain").mkdir()
    plain = make_wheel(tmp_path / "plain", files={"pkg/x.py": b""})
    kept, fix = apply_row_contract(plain, "cpu-py312-x86_64", tmp_path / "w2", patchelf)
    assert kept == plain and not fix.needed
