"""The kernels library, loaded through ctypes on first use and never at import."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path

LIBRARY = "liblazysaxpy_kernels.so"

_float_p = ctypes.POINTER(ctypes.c_float)
_int_p = ctypes.POINTER(ctypes.c_int)


class LazySaxpyError(RuntimeError):
    """A kernels-library call failed; the message carries its error text (a CUDA error's name)."""


def library_path() -> Path:
    """Where the kernels library lies, beside this file."""
    return Path(__file__).resolve().with_name(LIBRARY)


@functools.cache
def library() -> ctypes.CDLL:
    """Load the kernels library (and, in CUDA builds, the CUDA runtime it links) once."""
    path = library_path()
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as exc:
        raise LazySaxpyError(f"cannot load {path}: {exc}") from exc
    lib.lazysaxpy_backend.restype = ctypes.c_char_p
    lib.lazysaxpy_backend.argtypes = []
    lib.lazysaxpy_runtime_version.restype = ctypes.c_int
    lib.lazysaxpy_runtime_version.argtypes = [_int_p]
    lib.lazysaxpy_device.restype = ctypes.c_int
    lib.lazysaxpy_device.argtypes = [ctypes.c_char_p, ctypes.c_size_t, _int_p, _int_p]
    lib.lazysaxpy_saxpy.restype = ctypes.c_int
    lib.lazysaxpy_saxpy.argtypes = [ctypes.c_float, _float_p, _float_p, _float_p, ctypes.c_size_t]
    lib.lazysaxpy_error_string.restype = ctypes.c_char_p
    lib.lazysaxpy_error_string.argtypes = [ctypes.c_int]
    return lib


def check_status(code: int, what: str) -> None:
    if code != 0:
        text = library().lazysaxpy_error_string(code).decode(errors="replace")
        raise LazySaxpyError(f"{what} failed with error {code}: {text}")
