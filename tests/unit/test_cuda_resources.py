"""release/resources/cuda.toml: one table of CUDA's libraries, headers, GPUs and runners, and no second list.
The [headers] section's validation: tests/unit/test_cuda_headers_table.py."""

from __future__ import annotations

import ast
import fnmatch
import re
from pathlib import Path

import pytest
from helpers.text import edited

from release.audit.checks import loader
from release.resources import cuda
from release.resources.cuda import ResourceError, parse

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "release" / "resources" / "cuda.toml"
# The runtime and the driver are what the code reasons about by name ("which libcudart did the
# smoke test load", "the driver libcuda.so.1 the probe opens"); every other name is a list entry.
NAMED_IN_CODE = {"libcudart", "libcuda"}
# Prose that names one library, not a list: the CUDA 12 nvcc wheels' contents (toolchain's message).
PROSE = {("release/wheelbuild/toolchain.py", "libnvvm")}
# The one [headers] entry the code reasons about by name: cuda.h carries the driver API's CUDA_VERSION
# (release/audit/cpp/cuda_headers.py reads the version from it, release/wheelbuild/host/backend.py probes a toolkit by it).
HEADERS_NAMED_IN_CODE = {"cuda.h"}


def _mentions(text: str, stem: str) -> bool:
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(stem)}(?![A-Za-z0-9_])", text) is not None


def test_the_table_loads_once_and_is_frozen() -> None:
    facts = cuda.cuda()
    assert facts is cuda.cuda()
    stems = [lib.stem for lib in facts.libraries]
    assert len(stems) == len(set(stems))
    assert {lib.kind for lib in facts.libraries} == {"driver", "runtime", "toolkit"}
    assert [g.name for g in facts.gpus][:2] == ["T4 / RTX 20", "A100"]
    assert cuda.runners() == {"x86_64": "ubuntu-24.04", "aarch64": "ubuntu-24.04-arm"}


@pytest.mark.parametrize(
    ("soname", "kind", "major", "package", "installs_to"),
    [
        ("libcudart.so.13", "runtime", 13, "nvidia-cuda-runtime", "nvidia/cu13/lib"),
        ("libcudart.so.12", "runtime", 12, "nvidia-cuda-runtime-cu12", "nvidia/cuda_runtime/lib"),
        ("libcublasLt.so.13", "toolkit", 13, "nvidia-cublas", "nvidia/cu13/lib"),
        ("libcufft.so.11", "toolkit", 12, "nvidia-cufft-cu12", "nvidia/cufft/lib"),
        ("libnvrtc-builtins.so.13.0", "toolkit", 13, "nvidia-cuda-nvrtc", "nvidia/cu13/lib"),
        ("libnvjpeg.so.12", "toolkit", 12, "nvidia-nvjpeg-cu12", "nvidia/nvjpeg/lib"),
    ],
)
def test_each_soname_has_its_package_per_cuda_major(
    soname: str, kind: str, major: int, package: str, installs_to: str
) -> None:
    lib = cuda.library(soname)
    assert lib is not None and lib.kind == kind
    assert lib.cuda_major_of(soname) == major
    shipping = lib.shipped_for(major)
    assert shipping is not None and (shipping.package, shipping.installs_to) == (package, installs_to)


def test_a_soname_two_majors_ship_names_both() -> None:
    nvvm = cuda.library("libnvvm.so.4")
    assert nvvm is not None and nvvm.cuda_majors_of("libnvvm.so.4") == (12, 13)
    assert nvvm.cuda_major_of("libnvvm.so.4") is None
    assert nvvm.describe("libnvvm.so.4") == (
        "NVVM of CUDA 12 or 13 (libnvvm.so.4, from nvidia-cuda-nvcc-cu12 or nvidia-nvvm)"
    )


def test_families_and_the_driver() -> None:
    cudnn = cuda.library("libcudnn_engines_precompiled.so.9")
    assert cudnn is not None and cudnn.stem == "libcudnn" and cudnn.family
    shipping = cudnn.shipped_for(13)
    assert shipping is not None and shipping.package == "nvidia-cudnn-cu13"
    for driver in ("libcuda.so.1", "libnvidia-ml.so.1", "libnvidia-encode.so.1", "libnvcuvid.so.1"):
        assert cuda.is_driver_library(driver), driver
    assert not cuda.is_cuda_library("libcudaext.so")
    assert cuda.stem("pkg.libs/libcudart-1a2b3c4d.so.13") == "libcudart"


def test_the_two_former_lists_now_agree() -> None:
    """Issue 10: repair excluded libnvvm/libnvfatbin that the audit did not call CUDA, and the audit
    called libnvjpeg/libnvcuvid/libnvidia-encode CUDA that repair would graft."""
    excludes = cuda.repair_excludes()
    for soname in (
        "libnvvm.so.4",
        "libnvfatbin.so.13",
        "libnvjpeg.so.13",
        "libnvcuvid.so.1",
        "libnvidia-encode.so.1",
        "libnvJitLink.so.13",
    ):
        assert any(fnmatch.fnmatch(soname, p) for p in excludes), soname
        assert loader.is_cuda_library(soname), soname
    for soname in ("libc.so.6", "libstdc++.so.6", "libgomp.so.1", "libtinyaxpy_kernels.so"):
        assert not any(fnmatch.fnmatch(soname, p) for p in excludes), soname
        assert not loader.is_cuda_library(soname), soname


def test_no_second_list_under_release() -> None:
    """Only the table names CUDA's libraries: no module under release/ keeps its own list."""
    stems = [lib.stem for lib in cuda.cuda().libraries if lib.stem not in NAMED_IN_CODE]
    found: list[tuple[str, str]] = []
    for source in sorted((ROOT / "release").rglob("*.py")):
        text = source.read_text(encoding="utf-8")
        rel = str(source.relative_to(ROOT))
        found += [(rel, s) for s in stems if _mentions(text, s) and (rel, s) not in PROSE]
    assert found == [], f"CUDA library names outside release/resources/cuda.toml: {found}"
    holders = [p for p in (ROOT / "release").rglob("*") if p.is_file() and b"libnvjpeg" in p.read_bytes()]
    assert holders == [TABLE], "grep -rl libnvjpeg release must find one file"


def _header_entries() -> set[str]:
    """Every name and pattern of cuda.toml's [headers] (toolkit, driver, system) but those named in code."""
    facts = cuda.cuda()
    toolkit = {p for _, patterns in facts.toolkit_headers for p in patterns}
    system = {n for s in facts.system_libraries for n in (s.pattern, s.header, *s.needed_by)}
    return (toolkit | facts.driver_headers | system) - HEADERS_NAMED_IN_CODE


def _header_literals(code: str) -> list[str]:
    """The string literals of Python ``code`` that are [headers] entries: a header table kept in code.
    Prose (docstrings, comments, messages) names headers inside longer text and is not caught."""
    entries = _header_entries()
    strings = (n.value for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Constant))
    return sorted({s for s in strings if isinstance(s, str) and s in entries})


def test_no_header_table_under_release() -> None:
    """Only the table says which package installs a CUDA header, which headers are the driver's and which
    need a system library: no module under release/ keeps its own list."""
    found: list[tuple[str, str]] = []
    for source in sorted((ROOT / "release").rglob("*.py")):
        rel = str(source.relative_to(ROOT))
        found += [(rel, s) for s in _header_literals(source.read_text(encoding="utf-8"))]
    assert found == [], f"CUDA header table entries outside release/resources/cuda.toml: {found}"
    holders = [
        p
        for p in (ROOT / "release").rglob("*")
        if p.is_file() and p.suffix != ".pyc" and b"cudaVDPAUTypedefs.h" in p.read_bytes()
    ]
    assert holders == [TABLE], "grep -rl cudaVDPAUTypedefs.h release must find one file"


def test_the_header_scan_sees_a_table_in_code() -> None:
    """Must fail: header tables written as Python literals (the shape release/audit/cpp/cuda_headers.py once had).
    Must pass: headers named in prose, cuda.h, and headers that are no table's entry."""
    code = (
        'TOOLKIT = (("nvidia-cuda-crt", ("crt/*",)), ("nvidia-cublas", ("cublas*.h", "nvblas.h")))\n'
        'DRIVER = frozenset({"cudaGL.h", "cudaProfiler.h"})\n'
        'SYSTEM = (("GL/*", "GL/gl.h", "OpenGL", ("cuda_gl_interop.h",)),)\n'
    )
    assert _header_literals(code) == [
        "GL/*",
        "GL/gl.h",
        "crt/*",
        "cublas*.h",
        "cudaGL.h",
        "cudaProfiler.h",
        "cuda_gl_interop.h",
        "nvblas.h",
    ]
    prose = (
        '"""Includes of crt/* and nvrtc.h; cudaGL.h needs GL/gl.h."""\n'
        "# cublas*.h: nvidia-cublas\n"
        'VERSION_IN = ("cuda_runtime_api.h", "cuda.h")\n'
        'raise ValueError(f"{path}: includes cudaGL.h")\n'
    )
    assert _header_literals(prose) == []


def test_the_scan_sees_a_second_list() -> None:
    """Must fail: the scan finds a list written in code."""
    code = 'EXCLUDES = ("libnvjpeg.so.*", "libcublasLt.so.*")\n'
    assert _mentions(code, "libnvjpeg") and _mentions(code, "libcublasLt")
    assert not _mentions("libcublasLt.so.13", "libcublas")


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (('kind = "runtime"', 'kind = "runtme"'), "library.libcudart.kind: 'runtme' is not one of"),
        (('title = "the CUDA driver"', 'title = "the CUDA driver"\ncuda13 = { package = "x", installs_to = "y" }'),
         "library.libcuda: a driver library comes with the driver"),
        (('{ name = "A100", cc = "8.0",', '{ name = "A100", cc = "8.5",'), "gpu.named[1].cc: '8.5' is not in gpu.capabilities"),
        (('soname = "libcublasLt.so.13"', 'soname = "libcublas.so.13"'), "library.libcublasLt.cuda13.soname"),
        (('installs_to = "nvidia/cu13/lib" }', 'installs_to = "../cu13/lib" }'), "must be relative to site-packages"),
        (("schema_version = 1", "schema_version = 2"), "schema_version: 2 is not 1"),
        (("[runners]", "[runers]"), "unknown keys ['runers']"),
        (('cc = "8.7", cpus = ["aarch64"], kind = "tegra"', 'cc = "8.7", cpus = ["aarch64"], kind = "jetson"'),
         "gpu.named[3].kind: 'jetson' is not one of"),
        (('{ name = "GH200", cc = "9.0", cpus = ["aarch64"] }', '{ name = "GH200", cc = "9.0", cpus = [] }'),
         "gpu.named[6].cpus: must be a non-empty list"),
        (('{ name = "B300", cc = "10.3", cpus = ["x86_64", "aarch64"] }', '{ name = "B300", cc = "10.3" }'),
         "gpu.named[9]: must be { name, cc, cpus }"),
        (('{ jetpack = "6.2", cuda = "12.6", stack = "l4t" }', '{ jetpack = "6.2", cuda = "12.6", stack = "L4T" }'),
         "gpu.named[3].jetpack[0].stack: 'L4T' is not one of"),
        (('cc = "12.1", cpus = ["aarch64"], kind = "integrated"', 'cc = "12.1", cpus = ["aarch64"], kind = "tegra"'),
         "gpu.named[13].jetpack: a tegra GPU names the JetPack releases"),
    ],
)  # fmt: skip
def test_a_broken_table_is_refused_by_key(edit: tuple[str, str], expected: str) -> None:
    with pytest.raises(ResourceError) as info:
        parse(edited(TABLE.read_text(encoding="utf-8"), edit))
    assert expected in str(info.value)
    assert info.value.return_code == 3
    assert str(info.value).startswith("release/resources/cuda.toml: ")


def test_the_packaged_table_is_the_checked_in_one() -> None:
    import importlib.resources

    packaged = importlib.resources.files("release.resources").joinpath("cuda.toml")
    assert packaged.read_text(encoding="utf-8") == TABLE.read_text(encoding="utf-8")
    assert parse(TABLE.read_text(encoding="utf-8")) == cuda.cuda()
