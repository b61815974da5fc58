"""lazysaxpy: a*x+y in float32, on the GPU (CUDA builds) or the CPU (builds without nvcc).

Importing loads nothing native: the kernels library (and the CUDA runtime it links) is
loaded through ctypes on the first call that needs it.
"""

from __future__ import annotations

import array
import ctypes
from collections.abc import Iterable
from typing import Any

from ._native import LazySaxpyError, check_status, library, library_path

__all__ = ["LazySaxpyError", "backend", "check", "library_path", "saxpy", "saxpy_reference"]
__version__ = "0.1.0"


def backend() -> str:
    """'cuda' or 'cpu': which kernels the library was built with (loads the library)."""
    name: bytes = library().lazysaxpy_backend()
    return name.decode()


def cuda_runtime_version() -> int:
    """The CUDA runtime's version as cudaRuntimeGetVersion reports it (13000), 0 for CPU."""
    version = ctypes.c_int(0)
    check_status(library().lazysaxpy_runtime_version(ctypes.byref(version)), "cudaRuntimeGetVersion")
    return version.value


def saxpy(a: float, x: Iterable[float], y: Iterable[float]) -> list[float]:
    """a*x+y in float32 with the library's kernels; raises LazySaxpyError with the CUDA error."""
    xs, ys = array.array("f", x), array.array("f", y)
    if len(xs) != len(ys):
        raise ValueError(f"x and y differ in length: {len(xs)} != {len(ys)}")
    out = array.array("f", bytes(4 * len(xs)))
    n = len(xs)
    if n:
        fp = ctypes.POINTER(ctypes.c_float)
        ptr = [ctypes.cast(buf.buffer_info()[0], fp) for buf in (xs, ys, out)]
        check_status(library().lazysaxpy_saxpy(a, ptr[0], ptr[1], ptr[2], n), "lazysaxpy_saxpy")
    return out.tolist()


def saxpy_reference(a: float, x: Iterable[float], y: Iterable[float]) -> list[float]:
    """Pure Python a*x+y, inputs and result rounded to float32."""
    a32 = array.array("f", [a])[0]
    xs, ys = array.array("f", x), array.array("f", y)
    if len(xs) != len(ys):
        raise ValueError(f"x and y differ in length: {len(xs)} != {len(ys)}")
    return array.array("f", [a32 * xi + yi for xi, yi in zip(xs, ys, strict=True)]).tolist()


def check(n: int = 1 << 20) -> dict[str, Any]:
    """Run saxpy on exactly representable data and compare it with saxpy_reference.

    Returns the backend, the device and the largest absolute difference; raises
    LazySaxpyError where the device cannot run the kernels (no GPU, no kernel image).
    """
    lib = library()
    name = ctypes.create_string_buffer(256)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    check_status(
        lib.lazysaxpy_device(name, len(name), ctypes.byref(major), ctypes.byref(minor)), "device query"
    )
    a = 2.0
    x = [float(i % 2001 - 1000) for i in range(n)]
    y = [float(i * 7 % 1000) for i in range(n)]
    got = saxpy(a, x, y)
    want = saxpy_reference(a, x, y)
    kind = backend()
    return {
        "backend": kind,
        "device": name.value.decode(errors="replace"),
        "compute_capability": f"{major.value}.{minor.value}" if kind == "cuda" else None,
        "library": str(library_path()),
        "max_abs_diff": max((abs(g - w) for g, w in zip(got, want, strict=True)), default=0.0),
        "n": n,
    }
