"""release/wheelbuild/host/driver_stub.py: the driver API's names from cuda.h (pure), and a real link
stub compiled from this machine's toolkit's cuda.h, read back as an ELF file."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from release.binary.elf import read_elf
from release.core.errors import ToolError
from release.wheelbuild.host.driver_stub import (
    MAX_HEADER_BYTES,
    SONAME,
    STUB_NAME,
    driver_functions,
    ensure_driver_stub,
    has_driver_stub,
    header_functions,
    native_driver_stub,
    stub_source,
)

HOST_INCLUDE = Path("/usr/local/cuda/include")  # this machine's CUDA 13.0 (DESIGN.md)


def test_declarations_give_the_exported_names_and_typedefs_of_pointers_do_not() -> None:
    text = (
        "extern CUresult cuInit(unsigned int Flags);\n"
        "extern CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *p, unsigned int f, CUdevice d);\n"
        "typedef CUresult (*PFN_cuInit)(unsigned int);\n"
        "CUresult cuInit(unsigned int Flags);\n"
    )
    assert driver_functions(text) == ("cuCtxCreate_v4", "cuInit")


def test_an_interop_header_read_as_text_gives_its_names_and_what_its_defines_map_them_to() -> None:
    text = (
        "#define cuGLCtxCreate cuGLCtxCreate_v2\n"
        "#define cuUnrelated cuSomethingElse\n"
        "CUresult CUDAAPI cuGLCtxCreate(CUcontext *pCtx, unsigned int Flags, CUdevice device);\n"
        "CUresult CUDAAPI cuGLGetDevices(unsigned int *pCudaDeviceCount, CUdevice *pCudaDevices);\n"
    )
    assert header_functions(text) == ("cuGLCtxCreate", "cuGLCtxCreate_v2", "cuGLGetDevices")


def test_the_stub_source_defines_each_name_once_and_nothing_else() -> None:
    source = stub_source(("cuInit", "cuMemAlloc_v2"))
    assert source.count("void ") == 2 and "void cuMemAlloc_v2(void) {}" in source


def test_a_stub_made_from_this_toolkits_cuda_h_is_libcuda_so_1_for_every_api_form(tmp_path: Path) -> None:
    if not (HOST_INCLUDE / "cuda.h").is_file():
        pytest.fail(f"no cuda.h under {HOST_INCLUDE}: this machine's CUDA 13.0 toolkit is expected there")
    gcc = shutil.which("gcc")
    assert gcc is not None
    folder = ensure_driver_stub(HOST_INCLUDE, Path(gcc), "x86_64", tmp_path)
    stub = read_elf(folder / STUB_NAME)
    assert stub.soname == SONAME
    names = set((folder / "functions.txt").read_text(encoding="utf-8").split())
    # the default names, the per-thread default stream forms, the legacy names, the interop headers'
    assert {"cuInit", "cuCtxCreate_v4", "cuMemcpyHtoD_v2", "cuDriverGetVersion"} <= names
    assert {"cuMemcpy_ptds", "cuLaunchKernel_ptsz"} <= names
    assert {"cuCtxCreate", "cuMemAlloc"} <= names
    assert {"cuGLGetDevices_v2", "cuProfilerStart"} <= names
    assert len(names) > 600
    # made once: a second call is the same folder, untouched
    stamp = (folder / STUB_NAME).stat().st_mtime_ns
    assert ensure_driver_stub(HOST_INCLUDE, Path(gcc), "x86_64", tmp_path) == folder
    assert (folder / STUB_NAME).stat().st_mtime_ns == stamp


def test_must_fail_a_cuda_h_that_is_not_the_driver_apis_is_refused(tmp_path: Path) -> None:
    include = tmp_path / "include"
    include.mkdir()
    (include / "cuda.h").write_text("/* not the driver API */\nint cuda_version(void);\n", encoding="utf-8")
    gcc = shutil.which("gcc")
    assert gcc is not None
    with pytest.raises(ToolError, match=r"declares 0 driver functions"):
        ensure_driver_stub(include, Path(gcc), "x86_64", tmp_path / "cache")
    assert not list((tmp_path / "cache").rglob(STUB_NAME))  # nothing half-made is left to be taken


def test_must_fail_no_cuda_h_names_the_folder(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match=f"no cuda.h under {tmp_path}"):
        ensure_driver_stub(tmp_path, Path("gcc"), "x86_64", tmp_path)


# --------------------------------------------------------------------------- a native toolkit's stub


def _toolkit(root: Path, *, stub: str | None) -> Path:
    """A toolkit folder with this machine's cuda.h, and a stub at ``stub`` (relative) or none."""
    (root / "include").mkdir(parents=True)
    shutil.copyfile(HOST_INCLUDE / "cuda.h", root / "include" / "cuda.h")
    if stub is not None:
        (root / stub).parent.mkdir(parents=True)
        (root / stub).write_bytes(b"\x7fELF")
    return root


@pytest.mark.parametrize(
    "where", ["lib64/stubs/libcuda.so", "lib/stubs/libcuda.so", "targets/x86_64-linux/lib/stubs/libcuda.so"]
)
def test_a_toolkit_with_its_own_stub_gets_none_made(tmp_path: Path, where: str) -> None:
    """Must-not-make: the toolkit's own stub is the one its builds link, wherever a toolkit keeps it."""
    home = _toolkit(tmp_path / "cuda", stub=where)
    assert has_driver_stub(home)
    assert native_driver_stub(home, tmp_path / "cache", os.environ) is None
    assert not (tmp_path / "cache").exists()


def test_a_toolkit_without_one_gets_a_stub_from_its_own_cuda_h(tmp_path: Path) -> None:
    home = _toolkit(tmp_path / "cuda", stub=None)
    assert not has_driver_stub(home)
    folder = native_driver_stub(home, tmp_path / "cache", os.environ)
    assert folder is not None and read_elf(folder / STUB_NAME).soname == SONAME


def test_must_fail_a_header_past_the_cap_is_not_read(tmp_path: Path) -> None:
    include = tmp_path / "include"
    include.mkdir()
    with (include / "cuda.h").open("wb") as f:
        f.truncate(MAX_HEADER_BYTES + 1)
    with pytest.raises(ToolError, match="not a CUDA driver header"):
        ensure_driver_stub(include, Path("gcc"), "x86_64", tmp_path / "cache")
