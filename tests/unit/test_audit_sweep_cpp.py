"""The C++ consumer check's CUDA headers (release.audit.cpp.cuda_headers / cpp_consumer): which includes are CUDA
toolkit headers, which the wheel lacks, where the CUDA headers of a consumer are looked for, and the
compiler's "No such file or directory" read back; then the check on generated SDK wheels: the headers
it leaves out (device, internal, lacking a system library), the #error retry, C++ overloads, the
functions C lists and the CUDA driver's. The compile with a real toolkit, the fail-closed audit
and real NVIDIA wheels: tests/integration/test_audit_sweep_cpp_real.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers.elf import sdk_finding

from release.audit.cpp.cuda_headers import (
    SITE_VAR,
    CudaHeaders,
    CudaSearch,
    cuda_env,
    cuda_includes,
    find_cuda_headers,
    toolkit_package,
)
from release.audit.cpp.tools import missing_header, system_include_dirs
from release.audit.model import Finding
from release.core import proc


@pytest.mark.parametrize(
    ("header", "major", "package"),
    [
        ("cuda_runtime.h", None, "nvidia-cuda-runtime"),
        ("cuComplex.h", 13, "nvidia-cuda-runtime"),
        ("driver_types.h", 13, "nvidia-cuda-runtime"),
        ("cuda.h", 13, "nvidia-cuda-runtime"),
        ("crt/host_defines.h", 13, "nvidia-cuda-crt"),
        ("thrust/device_vector.h", 13, "nvidia-cuda-cccl"),
        ("cuda/std/atomic", 13, "nvidia-cuda-cccl"),
        ("nvtx3/nvToolsExt.h", 13, "nvidia-nvtx"),
        ("cupti.h", 13, "nvidia-cuda-cupti"),
        ("cublas_v2.h", 13, "nvidia-cublas"),
        ("cusparse.h", 13, "nvidia-cusparse"),
        # CUDA 12's names come from wheelwright's CUDA table (release/resources/cuda.toml)
        ("cuda_runtime.h", 12, "nvidia-cuda-runtime-cu12"),
        ("cublas_v2.h", 12, "nvidia-cublas-cu12"),
        ("crt/host_config.h", 12, "the CUDA 12 form of nvidia-cuda-crt"),
    ],
)
def test_toolkit_headers_are_named_by_their_package(header: str, major: int | None, package: str) -> None:
    assert toolkit_package(header, major) == package


@pytest.mark.parametrize(
    "header",
    [
        "CL/cl.h",
        "vdpau/vdpau.h",
        "stdio.h",
        "vector",
        "cudnn.h",
        "nccl.h",
        "cusparseLt.h",
        "wheelwright_nope.h",
    ],
)
def test_other_headers_are_not_the_toolkits(header: str) -> None:
    """Must not match: system, third-party and other NVIDIA products' headers (cuDNN, NCCL, cuSPARSELt)."""
    assert toolkit_package(header) is None


def test_cuda_includes_lists_the_toolkit_headers_the_wheel_lacks() -> None:
    files = {
        "fx.h": b'#include <cuda_runtime.h>\n#include "sub/b.h"\n#include <vector>\n#include <CL/cl.h>\n',
        "sub/b.h": b'#include "crt/host_defines.h"\n#include "c.h"\n#if __has_include(<cublas_v2.h>)\n#endif\n',
        "sub/c.h": b"int c(void);\n",
    }
    assert cuda_includes(files) == ("crt/host_defines.h", "cublas_v2.h", "cuda_runtime.h")
    # a header the wheel ships itself is not wanted from a toolkit (its own cuda_runtime.h, relative or not)
    files["cuda_runtime.h"] = b""
    files["sub/crt/host_defines.h"] = b""
    assert cuda_includes(files) == ("cublas_v2.h",)
    assert cuda_includes({"tinyaxpy.h": b"#include <stddef.h>\nint f(void);\n"}) == ()


def test_missing_header_read_from_the_compiler(tmp_path: Path) -> None:
    """The real g++'s message for a header it cannot find, as the check runs it (plain diagnostics)."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "fx.h").write_text("#pragma once\n#include <cuda_runtime.h>\n", encoding="utf-8")
    (tmp_path / "consumer.cpp").write_text('#include "fx.h"\n', encoding="utf-8")
    ran = subprocess.run(
        ["g++", "-fdiagnostics-plain-output", "-E", "-Iinclude", "consumer.cpp", "-o", "/dev/null"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    assert ran.returncode != 0
    assert missing_header(ran.stderr) == ("cuda_runtime.h", "include/fx.h")
    assert missing_header("fx.h:3:10: error: expected ';'\n") is None


def _toolkit(home: Path, version: int, *, cccl: bool = False) -> Path:
    """A toolkit's header tree without nvcc: include/cuda_runtime_api.h as CUDA writes its version."""
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime_api.h").write_text(
        f"#pragma once\n#define CUDART_VERSION {version}\n", encoding="utf-8"
    )
    if cccl:
        (home / "include" / "cccl").mkdir()
    return home


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    base = {"PATH": str(empty), "HOME": str(empty), "WHEELWRIGHT_CACHE": str(empty), SITE_VAR: str(empty)}
    return base | values


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    search = find_cuda_headers(cuda_env(_env(tmp_path)))
    assert search.packages == () and search.toolkits == () and search.select(13) == ()
    text = search.looked_at()
    assert "no nvcc on PATH" in text and "no PyPI toolchain in the wheelwright cache" in text
    assert "no CUDA package's headers installed in" in text


def test_cuda_home_is_the_only_toolkit_when_set(tmp_path: Path) -> None:
    home = _toolkit(tmp_path / "cuda-12.4", 12040, cccl=True)
    cache = tmp_path / "cache"
    _toolkit(cache / "cuda-13.2.86" / "nvidia" / "cu13", 13020)
    (cache / "cuda-13.2.86" / "wheelwright-toolchain.json").write_text('{"cuda_home": "nvidia/cu13"}')
    search = find_cuda_headers(cuda_env(_env(tmp_path, CUDA_HOME=str(home), WHEELWRIGHT_CACHE=str(cache))))
    assert search.toolkits == (
        CudaHeaders(
            (str(home / "include"), str(home / "include" / "cccl")), "12.4", str(home), f"CUDA_HOME={home}"
        ),
    )
    assert "no other toolkit was looked at" in search.looked_at()
    assert (
        search.select(13) == ()
        and search.select(12) == search.toolkits
        and search.select(None) == search.toolkits
    )
    # an empty CUDA_HOME: nothing, and it says so (the fail-closed case)
    empty = find_cuda_headers(cuda_env(_env(tmp_path, CUDA_HOME=str(tmp_path / "empty"))))
    assert empty.toolkits == () and f"CUDA_HOME={tmp_path / 'empty'}: no CUDA headers" in empty.looked_at()


def test_pypi_toolchains_in_the_cache_newest_first(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for name, version in (("cuda-13.0.88", 13000), ("cuda-13.2.86", 13020)):
        _toolkit(cache / name / "nvidia" / "cu13", version)
        (cache / name / "wheelwright-toolchain.json").write_text(json.dumps({"cuda_home": "nvidia/cu13"}))
    _toolkit(tmp_path / "outside", 13090)
    (cache / "cuda-13.9.0").mkdir()  # a manifest pointing out of its folder is not followed
    (cache / "cuda-13.9.0" / "wheelwright-toolchain.json").write_text('{"cuda_home": "../../outside"}')
    (cache / "cuda-13.8.0").mkdir()
    (cache / "cuda-13.8.0" / "wheelwright-toolchain.json").write_text("not json")
    search = find_cuda_headers(cuda_env(_env(tmp_path, WHEELWRIGHT_CACHE=str(cache))))
    assert [t.version for t in search.toolkits] == ["13.2", "13.0"]
    assert search.select(13) == search.toolkits[:1]
    assert search.toolkits[0].source == "PyPI toolchain in the wheelwright cache"


def test_installed_packages_come_first(tmp_path: Path) -> None:
    """The folders where the wheel's CUDA packages install (cuda.toml's installs_to, beside lib/), in a
    pip --target folder: for CUDA 13 nvidia/cu13/include, for CUDA 12 one per package."""
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "include" / "cccl").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "include" / "cublas_v2.h").write_text("", encoding="utf-8")
    (site / "nvidia" / "cublas" / "include").mkdir(parents=True)
    home = _toolkit(tmp_path / "cuda-13.0", 13000)
    search = find_cuda_headers(cuda_env(_env(tmp_path, CUDA_HOME=str(home), **{SITE_VAR: str(site)})))
    cu13 = site / "nvidia" / "cu13" / "include"
    assert [(p.dirs, p.version) for p in search.packages] == [
        ((str(cu13), str(cu13 / "cccl")), "13"),
        ((str(site / "nvidia" / "cublas" / "include"),), "12"),
    ]
    assert [h.where for h in search.select(13)] == [str(cu13), str(home)]
    assert [h.where for h in search.select(12)] == [str(site / "nvidia" / "cublas" / "include")]
    holder = search.holding("cublas_v2.h")
    assert holder is not None and holder.where == str(cu13)
    assert search.holding("cusparse.h") is None


def test_select_with_an_unknown_major_takes_the_first_toolkits() -> None:
    t13 = CudaHeaders(("/a",), "13.0", "/a", "x")
    t12 = CudaHeaders(("/b",), "12.4", "/b", "y")
    p12 = CudaHeaders(("/c",), "12", "/c", "z")
    search = CudaSearch((p12,), (t13, t12), ())
    assert search.select(None) == (t13,)
    assert search.select(12) == (p12, t12)
    assert CudaSearch((), (), ()).select(None) == ()


# The check on generated SDK wheels (fxsdk/include/*.h next to fxsdk/lib/libfx.so, built by gcc): the
# headers it leaves out (release.audit.cpp.headers), the #error retry, C++ overloads, C's enumeration.
C_API = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'
LIB = "int fx_version(void) { return 1; }\nint fx_a(void) { return 2; }\nint fx_b(void) { return 3; }\n"


def _check(tmp_path: Path, headers: dict[str, str], lib: str = LIB) -> Finding:
    """The cpp_consumer finding for a wheel shipping ``headers`` in fxsdk/include and ``lib`` built into
    fxsdk/lib/libfx.so, as the audit gives it."""
    return sdk_finding(tmp_path, headers, lib)


# cuRAND's way: a device header defines its qualifier macro and declares functions for nvcc only; this
# one also uses __global__, which g++ does not know: compiling it would fail.
DEVICE = (
    "#pragma once\n#define FX_QUALIFIERS static inline __device__\n"
    "__global__ void fx_kernel(float *x);\nFX_QUALIFIERS float fx_dev(float x) { return x; }\n"
)


def test_a_device_header_is_left_out_and_named(tmp_path: Path) -> None:
    """Must pass: fx_kernels.h is for nvcc (its __global__ would not even compile with g++)."""
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);", "fx_kernels.h": DEVICE})
    assert finding.ok, finding.message
    assert (
        "referencing 1 declared function; 1 device header, for nvcc, left to a CUDA consumer: fx_kernels.h"
        in (finding.message)
    )
    assert finding.details["device_headers"] == {"count": 1, "first": {"fx_kernels.h": "__global__"}}


def test_a_host_header_declaring_what_the_library_lacks_still_fails(tmp_path: Path) -> None:
    """Must fail: the check's purpose, with a device header beside it."""
    headers = {"fx.h": C_API % "int fx_version(void);\nint fx_missing(void);", "fx_kernels.h": DEVICE}
    finding = _check(tmp_path, headers)
    assert not finding.ok and "does not link" in finding.message and "fx_missing" in finding.message
    assert "1 device header, for nvcc, left to a CUDA consumer: fx_kernels.h" in finding.message


@pytest.mark.parametrize("qualifier", ["__host__ __device__", ""])
def test_host_device_functions_are_host_code(tmp_path: Path, qualifier: str) -> None:
    """Must fail: a __host__ __device__ function is callable from host code, so its header is compiled and
    what it declares must link (the fallback defines make it compile with g++, as such headers do)."""
    header = (
        "#pragma once\n#ifndef __CUDACC__\n#define __host__\n#define __device__\n#endif\n"
        + C_API % f"{qualifier} int fx_missing(void);"
    )
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);", "fx_hd.h": header})
    assert not finding.ok and "fx_missing" in finding.message and "device header" not in finding.message


def test_only_device_headers_leave_nothing_to_check(tmp_path: Path) -> None:
    finding = _check(tmp_path, {"fx_kernels.h": DEVICE, "fx_more.h": "__global__ void fx_more(int n);\n"})
    assert finding.ok and finding.details["nothing_to_check"] is True
    assert finding.message.startswith(
        "nothing to check: no header of fxsdk/include is for a host C++ program"
    )
    assert "2 device headers, for nvcc, left to a CUDA consumer: fx_kernels.h, fx_more.h" in finding.message


@pytest.mark.parametrize("device", [True, False])
def test_a_host_header_including_a_device_header(tmp_path: Path, device: bool) -> None:
    """What a consumer including fx.h gets: fx_dev.h is compiled with it. Its function is device code, so
    it need not link (must pass); the same header without __device__ declares host code (must fail)."""
    qualifier = "__device__" if device else ""
    dev = "#pragma once\n#ifndef __CUDACC__\n#define __device__\n#endif\n" + C_API % (
        f"{qualifier} int fx_dev_only(void);"
    )
    headers = {"fx.h": '#pragma once\n#include "detail/fx_dev.h"\n' + C_API % "int fx_version(void);"}
    headers["detail/fx_dev.h"] = dev
    finding = _check(tmp_path, headers)
    assert finding.ok is device, finding.message
    assert ("fx_dev_only" in finding.message) is not device


INTERNAL = '#pragma once\n#warning "fx_impl.h is an internal header file and must not be used directly"\n'


@pytest.mark.parametrize("says", ["internal", "deprecated"])
def test_internal_headers_are_left_out(tmp_path: Path, says: str) -> None:
    """fx_impl.h does not compile on its own. It says it is internal: left out, named (must pass); it says
    only that it is deprecated: compiled, and the check fails (must fail)."""
    warning = INTERNAL if says == "internal" else '#pragma once\n#warning "fx_impl.h is deprecated"\n'
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);", "fx_impl.h": warning + "fx_t f;\n"})
    assert finding.ok is (says == "internal"), finding.message
    if says == "internal":
        assert (
            "1 internal header, left out as their own #warning or #error asks: fx_impl.h" in finding.message
        )
    else:
        assert "does not compile" in finding.message and "fx_impl.h" in finding.message


def _exclusive(name: str, other: str, declares: str) -> str:
    """A header that cannot be included with ``other`` (cuBLAS's cublas.h and cublas_v2.h)."""
    guard = name.upper().replace(".", "_")
    return (
        f"#ifndef {guard}\n#define {guard}\n#ifdef {other.upper().replace('.', '_')}\n"
        f'#error "It is an error to include both {name} and {other}"\n#endif\n'
        + C_API % declares
        + "#endif\n"
    )


def _pair(c: str = "int fx_version(void);") -> dict[str, str]:
    return {
        "fx_a.h": _exclusive("fx_a.h", "fx_b.h", "int fx_a(void);"),
        "fx_b.h": _exclusive("fx_b.h", "fx_a.h", "int fx_b(void);"),
        "fx_c.h": '#include "fx_b.h"\n' + C_API % c,  # fx_b.h's #error fires through it
    }


def test_mutually_exclusive_headers_compile_in_two_programs(tmp_path: Path) -> None:
    """Must pass: fx_a.h with the others; fx_b.h and fx_c.h (which includes it) in a second program; the
    functions of both programs link."""
    finding = _check(tmp_path, _pair())
    assert finding.ok, finding.message
    assert "referencing 3 declared functions" in finding.message
    assert (
        'fx_b.h, fx_c.h compiled in a second program: they cannot be included with the others ("It is an error '
        'to include both fx_b.h and fx_a.h")'
    ) in finding.message
    assert finding.details["apart"] == {
        "headers": ["fx_b.h", "fx_c.h"],
        "error": '"It is an error to include both fx_b.h and fx_a.h"',
    }


@pytest.mark.parametrize(
    ("headers", "words"),
    [
        # the second program's functions are linked too
        (_pair("int fx_version(void);\nint fx_missing(void);"), "does not link"),
        # a real error beside the pair: the first program fails without them
        (_pair() | {"fx_d.h": "fx_t broken;\n"}, "fx_b.h, fx_c.h set apart, not compiled: they cannot be included"),
        # a header whose #error fires on its own: the second program fails
        ({"fx.h": C_API % "int fx_version(void);", "fx_bad.h": '#error "fx_bad.h is broken"\n'},
         "apart from the others (an #error fired in the first), does not compile"),
    ],
)  # fmt: skip
def test_the_error_retry_still_fails(tmp_path: Path, headers: dict[str, str], words: str) -> None:
    finding = _check(tmp_path, headers)
    assert not finding.ok and words in finding.message, finding.message
    assert "does not compile" in finding.message or "does not link" in finding.message


@pytest.mark.parametrize("exported", [True, False])
def test_a_function_overloaded_in_cpp_is_referenced_through_its_c_type(
    tmp_path: Path, exported: bool
) -> None:
    """cuBLAS's cublasGemmEx: an extern "C" function with a C++ overload (a static inline) beside it. Must
    pass when the library exports it; must fail when it does not (the C one is still referenced)."""
    header = C_API % "int fx_over(int x);" + (
        "#ifdef __cplusplus\nstatic inline int fx_over(double x) { return fx_over((int)x); }\n#endif\n"
    )
    lib = LIB + ("int fx_over(int x) { return x; }\n" if exported else "")
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);", "fx_over.h": header}, lib)
    assert finding.ok is exported, finding.message
    assert ("referencing 2 declared functions" in finding.message) is exported
    assert ("undefined reference to `fx_over'" in finding.message) is not exported


def test_headers_that_are_not_c_do_not_hide_the_others_functions(tmp_path: Path) -> None:
    """Must fail: fx_cpp.h is C++ only; C's enumeration leaves it out and still lists fx.h's functions,
    one of which the library lacks (cuRAND's curand.h beside its C++ headers)."""
    headers = {
        "fx.h": C_API % "int fx_version(void);\nint fx_missing(void);",
        "fx_cpp.h": "#pragma once\nnamespace fx { inline int twice(int x) { return 2 * x; } }\n",
    }
    finding = _check(tmp_path, headers)
    assert not finding.ok and "does not link" in finding.message and "fx_missing" in finding.message


@pytest.mark.parametrize("name", ["cuda.h", "fx.h"])
def test_the_cuda_drivers_functions_need_not_link(tmp_path: Path, name: str) -> None:
    """nvidia-cuda-runtime ships cuda.h beside libcudart.so: its functions are the driver's (libcuda.so.1).
    Must pass as cuda.h; the same declaration in another header must fail."""
    headers = {"fx_api.h": C_API % "int fx_version(void);", name: C_API % "int cuInit(unsigned flags);"}
    finding = _check(tmp_path, headers)
    assert finding.ok is (name == "cuda.h"), finding.message
    if name == "cuda.h":
        assert (
            "the functions of cuda.h not linked: the CUDA driver's (libcuda.so.1, in no wheel)"
            in finding.message
        )


def test_a_header_needing_a_system_library_absent_here(tmp_path: Path) -> None:
    """Must pass: fx_vdpau.h includes VDPAU's header, which this machine lacks: left out, named. A header of
    no known library still fails: test_a_header_that_is_not_cudas_still_fails (integration)."""
    found = [
        d for d in system_include_dirs(proc.which("g++"), "c++") if (Path(d) / "vdpau/vdpau.h").is_file()
    ]
    assert not found, f"this test needs a machine without VDPAU's headers (libvdpau-dev): {found}"
    headers = {"fx.h": C_API % "int fx_version(void);", "fx_vdpau.h": "#include <vdpau/vdpau.h>\n"}
    finding = _check(tmp_path, headers)
    assert finding.ok, finding.message
    assert (
        "not compiled here, for want of VDPAU's headers (vdpau/vdpau.h; Debian: libvdpau-dev): fx_vdpau.h"
        in (finding.message)
    )
