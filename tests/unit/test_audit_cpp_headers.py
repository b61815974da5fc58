"""release.audit.cpp.headers: which top-level headers of an SDK the C++ consumer check leaves out, read from
their text as a host compiler reads it: CUDA device headers (written for nvcc), internal headers (their own
#warning or #error says so), headers needing a system library's headers that are not found. Each rule with
headers that must be left out and headers that must not. The check itself on generated SDK wheels:
tests/unit/test_audit_sweep_cpp.py; on NVIDIA's wheels: tests/integration/test_audit_sweep_cpp_real.py."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from release.audit.cpp.cuda_headers import lacking_system_headers
from release.audit.cpp.headers import _condition, device_headers, internal_headers


@pytest.mark.parametrize(
    ("text", "uses"),
    [
        (b"__global__ void fx_kernel(float *x);\n", "__global__"),
        (b"extern __device__ float fx_dev(float x);\n", "__device__"),
        (b"static __forceinline__ __device__ float f(float x) { return x; }\n", "__device__"),
        (b"extern __constant__ float fx_table[16];\n", "__constant__"),
        (b"extern __shared__ float fx_smem[];\n", "__shared__"),
        (b"__managed__ int fx_counter;\n", "__managed__"),
        # a host header with one device-only member is for nvcc too
        (b"struct S { __host__ __device__ S(); __device__ void g(); };\n", "__device__"),
        # the macro is defined in the file itself, the way cuRAND's QUALIFIERS is
        (b"#define QUALIFIERS static __forceinline__ __device__\nQUALIFIERS float f(float x);\n",
         "QUALIFIERS (a macro for __device__)"),
        # nvcc-only branches are skipped, but only those: #else of #ifdef __CUDACC__ is read
        (b"#ifdef __CUDACC__\nint a;\n#else\n__global__ void k(void);\n#endif\n", "__global__"),
        (b"#if defined(_WIN32)\n#define Q\n#else\n#define Q __device__\n#endif\nQ int f(void);\n",
         None),  # _WIN32 is not known to be off: Q has an empty definition too, so it is not device code
    ],
)  # fmt: skip
def test_device_headers(text: bytes, uses: str | None) -> None:
    assert device_headers({"fx.h": text}, ["fx.h"]) == ({"fx.h": uses} if uses else {})


@pytest.mark.parametrize(
    "text",
    [
        b"int fx_version(void);\n",
        # __host__ __device__ is host code too (cuda_runtime.h's occupancy helpers, dim3, cuComplex.h)
        b"static inline __host__ __device__ float fx_abs(float x) { return x < 0 ? -x : x; }\n",
        b"#define HD __host__ __device__\nHD float fx_abs(float x);\n",
        b"struct dim3 {\n  __host__ __device__ constexpr dim3(unsigned x = 1) : x(x) {}\n  unsigned x;\n};\n",
        # hidden from host compilers: cooperative_groups.h's way
        b"#if defined(__cplusplus) && defined(__CUDACC__)\n__device__ void sync(void);\n#endif\n",
        b"#ifndef __CUDA_ARCH__\nint host_only(void);\n#else\n__device__ int dev(void);\n#endif\n",
        b"#if __CUDA_ARCH__ >= 700\n__device__ int dev(void);\n#endif\n",
        b"#if 0\n__global__ void old(void);\n#endif\n",
        # words, not code
        b"/* __global__ kernels live in fx_kernels.cu */\n// __device__ too\nint f(void);\n",
        b'static const char *fx_doc = "call it from __device__ code";\n',
        b'#error "__device__ code needs nvcc"\n',
        # a macro that is __device__ only for nvcc (cuda_runtime_api.h's CUDART_DEVICE): empty for g++
        b"#if defined(__CUDACC__)\n#define Q __device__\n#else\n#define Q\n#endif\nQ int f(void);\n",
    ],
)
def test_host_headers(text: bytes) -> None:
    assert device_headers({"fx.h": text}, ["fx.h"]) == {}


def test_a_macro_from_another_header_makes_a_device_header() -> None:
    """cuRAND: curand_discrete2.h uses QUALIFIERS, defined in curand_kernel.h (two levels of macros here)."""
    files = {
        "fx_kernel.h": b"#define FX_DEVICE __device__\n#define QUALIFIERS static inline FX_DEVICE\n",
        "fx_discrete.h": b"QUALIFIERS unsigned fx_discrete(unsigned *state);\n",
        "fx.h": b"int fx_version(void);\n",
    }
    found = device_headers(files, ["fx.h", "fx_discrete.h", "fx_kernel.h"])
    assert found == {"fx_discrete.h": "QUALIFIERS (a macro for __device__)"}  # fx_kernel.h only defines


@pytest.mark.parametrize(
    ("expr", "value"),
    [
        (b"defined(__CUDACC__)", False),
        (b"!defined(__CUDACC__)", True),
        (b"defined __CUDA_ARCH__ && __CUDA_ARCH__ >= 700", False),
        (b"defined(__CUDACC__) || defined(_NVHPC_CUDA)", False),
        (b"defined(_NVHPC_CUDA) || !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ >= 350)", True),
        (b"__CUDA_ARCH__ < 700", True),  # 0 for a host compiler
        (b"0", False),
        (b"1", True),
        (b"defined(__cplusplus)", None),
        (b"defined(__cplusplus) && defined(__CUDACC__)", False),
        (b"defined(__GNUC__) || defined(__CUDACC__)", None),
        (b"FOO(1)", None),
        (b"0700", None),  # not read: unknown
    ],
)
def test_conditions_as_a_host_compiler_reads_them(expr: bytes, value: bool | None) -> None:
    assert _condition(expr) is value


@pytest.mark.parametrize(
    "text",
    [
        b'#warning "math_functions.h is an internal header file and must not be used directly."\nint f(void);\n',
        b'#if !defined(__FX_H__)\n#error "Do not include this file directly. Instead, include fx.h."\n#endif\n',
        b"#  error fx_impl.h is internal: do not include this header directly\n",
    ],
)
def test_internal_headers(text: bytes) -> None:
    found = internal_headers({"fx_impl.h": text, "fx.h": b"int f(void);\n"}, ["fx.h", "fx_impl.h"])
    assert list(found) == ["fx_impl.h"]
    assert "internal" in found["fx_impl.h"] or "directly" in found["fx_impl.h"]


@pytest.mark.parametrize(
    "text",
    [
        b'#warning "fx_old.h is deprecated, use fx.h"\n',  # deprecated is not internal
        b'#error "It is an error to include both fx_old.h and fx.h"\n',  # exclusive: the compile decides
        b"/* #warning this internal header must not be used directly */\n",  # a comment
        b'#ifdef __CUDACC__\n#warning "internal header: do not include directly"\n#endif\n',  # nvcc only
        b'static const char *s = "an internal header, not used directly";\n',  # not a directive
    ],
)
def test_not_internal_headers(text: bytes) -> None:
    assert internal_headers({"fx_old.h": text}, ["fx_old.h"]) == {}


def test_headers_lacking_a_system_library() -> None:
    """VDPAU is not found: what includes its headers (directly, through an SDK header or through CUDA's
    interop header cuda_vdpau_interop.h), and CUDA's VDPAU headers themselves, are left out; a header of no
    known library (wheelwright_nope/nope.h) is not: the compile says whether it exists."""
    files = {
        "fx_vdpau.h": b"#include <vdpau/vdpau.h>\n",
        "fx_interop.h": b'#include "detail/interop.h"\n',
        "detail/interop.h": b"#include <cuda_vdpau_interop.h>\n",
        "cudaVDPAU.h": b"CUresult cuVDPAUGetDevice(CUdevice *d, VdpDevice v, VdpGetProcAddress *p);\n",
        "fx_gl.h": b"#include <GL/gl.h>\n",
        "fx_nope.h": b"#include <wheelwright_nope/nope.h>\n",
        "fx.h": b"int fx_version(void);\n",
    }
    top = ["cudaVDPAU.h", "fx.h", "fx_gl.h", "fx_interop.h", "fx_nope.h", "fx_vdpau.h"]
    vdpau = "VDPAU's headers (vdpau/vdpau.h; Debian: libvdpau-dev)"
    assert lacking_system_headers(files, top, lambda target: target == "GL/gl.h") == {
        "cudaVDPAU.h": vdpau,
        "fx_interop.h": vdpau,
        "fx_vdpau.h": vdpau,
    }
    assert lacking_system_headers(files, top, lambda target: True) == {}  # all found: none left out
    gl = lacking_system_headers(files, top, lambda target: target != "GL/gl.h")
    assert gl == {"fx_gl.h": "OpenGL's headers (GL/gl.h; Debian: libgl-dev)"}


def test_opencl_and_sycl_interop_headers_are_left_out_where_those_are_lacking() -> None:
    """oneDNN's interop headers in torch 2.14.1's include/ (x86_64 and aarch64): dnnl_ocl.h needs OpenCL's
    CL/cl.h, dnnl_sycl.hpp a SYCL implementation's sycl/sycl.hpp; a consumer opts into those APIs, so a
    machine without them leaves the headers out (named) instead of failing the SDK. Where they are found,
    nothing is left out: the compile decides."""
    files = {
        "oneapi/dnnl/dnnl_ocl.h": b'#include "oneapi/dnnl/dnnl.h"\n#include <CL/cl.h>\n',
        "dnnl_ocl.h": b'#include "oneapi/dnnl/dnnl_ocl.h"\n',
        "oneapi/dnnl/dnnl_sycl.hpp": b"#include <vector>\n#include <sycl/sycl.hpp>\n",
        "dnnl_sycl.hpp": b'#include "oneapi/dnnl/dnnl_sycl.hpp"\n',
        "oneapi/dnnl/dnnl.h": b"int dnnl_version(void);\n",
        "dnnl.h": b'#include "oneapi/dnnl/dnnl.h"\n',
    }
    top = ["dnnl.h", "dnnl_ocl.h", "dnnl_sycl.hpp"]
    lacking = lacking_system_headers(files, top, lambda target: False)
    assert lacking == {
        "dnnl_ocl.h": "OpenCL's headers (CL/cl.h; Debian: opencl-c-headers)",
        "dnnl_sycl.hpp": "a SYCL implementation's headers (sycl/sycl.hpp, as Intel's oneAPI DPC++ compiler ships them)",
    }
    assert lacking_system_headers(files, top, lambda target: True) == {}


def test_a_header_shipping_the_library_header_itself_is_not_lacking() -> None:
    files = {"fx.h": b'#include "vdpau/vdpau.h"\n', "vdpau/vdpau.h": b"typedef unsigned VdpDevice;\n"}
    assert lacking_system_headers(files, ["fx.h"], lambda target: False) == {}


def _timed(call: Callable[[], object]) -> tuple[object, float]:
    start = time.perf_counter()
    return call(), time.perf_counter() - start


def test_hostile_headers_cost_little() -> None:
    """The headers are a wheel's: deep #if nesting, a chain of 50,000 macros, a 4 MB unterminated comment
    and 200,000 __host__ __device__ uses with no delimiter are read in bounded time, without recursion
    errors; each bound errs toward compiling a header (host), never toward leaving it out."""
    deep = b"#if " + b"(" * 100_000 + b"1" + b")" * 100_000 + b"\n__global__ void k(void);\n#endif\n"
    chain = (
        b"".join(b"#define M%d M%d\n" % (i, i + 1) for i in range(50_000)) + b"#define M50000 __device__\n"
    )
    files = {
        "deep.h": deep,
        "chain.h": chain + b"M0 int f(void);\n",
        "comment.h": b"int f(void);\n/*" + b"\" ' x" * 1_000_000,
        "hd.h": b"__host__ __device__ " * 200_000,
    }
    headers = sorted(files)
    found, seconds = _timed(lambda: device_headers(files, headers))
    assert found == {"deep.h": "__global__"}, found  # deep #if: unknown, so read; the chain: cut, so host
    assert seconds < 10, seconds
    _, seconds = _timed(lambda: internal_headers({"w.h": b"#warning " + b"internal " * 500_000}, ["w.h"]))
    assert seconds < 5, seconds
