"""tinyaxpy: a*x+y in float32, on the GPU (CUDA wheels) or the CPU (the CPU wheel).

Importing makes no CUDA call (it works without a GPU or driver), but it does load the
kernels library and, on CUDA wheels, the CUDA runtime it links.
"""

from __future__ import annotations

import array
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from . import _tinyaxpy
from ._build_info import BUILD_INFO

__all__ = ["BackendError", "axpy", "axpy_reference", "build_info", "sdk_paths", "selftest"]
__version__: str = str(BUILD_INFO["version"])

BackendError: type[RuntimeError] = _tinyaxpy.BackendError

# Numbers: a list, or faster, an object with a float32/float64 buffer (array.array("f"), numpy).
Vector = Iterable[float]


def axpy(a: float, x: Vector, y: Vector) -> list[float]:
    """a*x+y in float32 on this wheel's backend; raises BackendError with the CUDA error text."""
    result: list[float] = _tinyaxpy.saxpy(float(a), x, y)
    return result


def axpy_reference(a: float, x: Vector, y: Vector) -> list[float]:
    """Pure-Python a*x+y with the inputs and the result rounded to float32."""
    a32 = array.array("f", [a])[0]
    xs, ys = array.array("f", x), array.array("f", y)
    if len(xs) != len(ys):
        raise ValueError(f"x and y differ in length: {len(xs)} != {len(ys)}")
    return array.array("f", [a32 * xi + yi for xi, yi in zip(xs, ys, strict=True)]).tolist()


def selftest(n: int = 1 << 20) -> dict[str, Any]:
    """Run the backend on exactly representable data and compare with axpy_reference.

    Raises BackendError (a RuntimeError) carrying the CUDA error string where the device
    cannot run the code (no GPU, no driver, no kernel image for this GPU), and RuntimeError
    when the results differ.
    """
    backend: str = _tinyaxpy.backend()
    device: str | None = None
    capability: str | None = None
    if backend == "cuda":
        device, (major, minor) = _tinyaxpy.device_query()
        capability = f"{major}.{minor}"
    a = 2.0
    x = array.array("f", [float(i % 2001 - 1000) for i in range(n)])
    y = array.array("f", [float(i * 7 % 1000) for i in range(n)])
    got = axpy(a, x, y)
    want = axpy_reference(a, x, y)
    diffs = [abs(g - w) for g, w in zip(got, want, strict=True)]
    max_abs_diff = max(diffs, default=0.0)
    if max_abs_diff != 0.0:
        i = next(i for i, d in enumerate(diffs) if d != 0.0)
        raise RuntimeError(
            f"tinyaxpy selftest on {backend} ({device}): max |diff| "
            f"{max_abs_diff}; first at [{i}]: got {got[i]}, want {want[i]}"
        )
    return {
        "backend": backend,
        "device": device,
        "compute_capability": capability,
        "max_abs_diff": max_abs_diff,
        "n": n,
    }


def build_info() -> dict[str, Any]:
    """How this wheel was built: variant, CUDA version, architectures compiled in."""
    return dict(BUILD_INFO)


def cuda_runtime_version() -> int:
    """The CUDA runtime's version as cudaRuntimeGetVersion gives it (13000), 0 on cpu."""
    version: int = _tinyaxpy.runtime_version()
    return version


def sdk_paths() -> dict[str, Any]:
    """Where the C++ SDK lies: compile with -I include_dir, link -L lib_dir -ltinyaxpy_kernels."""
    root = Path(__file__).resolve().parent
    lib_dir = root / "lib"
    return {
        "include_dir": str(root / "include"),
        "lib_dir": str(lib_dir),
        "libraries": ["tinyaxpy_kernels"],
        "header": str(root / "include" / "tinyaxpy.h"),
        "library": str(lib_dir / "libtinyaxpy_kernels.so"),
    }
