"""Which CUDA or driver library a file of a wheel is: by what the file is, not what it is called.

A file is known as a library of :mod:`release.resources.cuda`, in this order, by:

1. its SONAME (``libcudart.so.13``, whatever the file is named);
2. a symbol version it defines: every NVIDIA library defines a version node named after its
   soname (``libcudart.so.13``), which a rename or a rewritten SONAME leaves in place;
3. the functions only that library exports (the table's ``defines``: ``cuDriverGetVersion``
   for the driver, which defines no version node), unless the file is a shim of it (:func:`shim_of`:
   it looks the real functions up at run time and never imports the table's ``calls``);
4. its file name, for a file that is not readable as ELF (a link, a text file).

Pure: the ELF facts were read once by :mod:`release.audit.reading.inspector`.
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.utils import canonicalize_name

from release.audit.model import Library, is_library_name
from release.resources.cuda import CudaLibrary, cuda

__all__ = ["Identity", "identify", "identify_name", "shim_of"]


@dataclass(frozen=True)
class Identity:
    library: CudaLibrary
    soname: str  # the soname the file answers to ("libcudart.so.13")
    evidence: str  # how it was known: "its SONAME", "the symbol version it defines (...)", ...

    def describe(self) -> str:
        """``the CUDA runtime of CUDA 13 (libcudart.so.13, from nvidia-cuda-runtime)``."""
        return self.library.describe(self.soname)

    def packages(self) -> tuple[str, ...]:
        """The pip packages that ship this soname: those of its CUDA major only (CUPTI's CUDA 12 soname is
        the ``-cu12`` package's, not the CUDA 13 package's); every package of the library when the soname
        tells no major (cuDNN, NCCL, a soname no release in the table ships)."""
        shipping = self.library.shipping
        by_major = [s.package for s in shipping if s.ships(self.soname)]
        return tuple(sorted(set(by_major or [s.package for s in shipping])))

    def shipped_by(self, wheel_name: str) -> bool:
        """The wheel is a package that ships this library (for any CUDA major): its own library, not a copy."""
        own = canonicalize_name(wheel_name)
        return any(canonicalize_name(s.package) == own for s in self.library.shipping)


def identify_name(name: str) -> Identity | None:
    """By file name alone: for members that are not readable ELF files."""
    base = name.rsplit("/", 1)[-1]
    known = cuda().library(base) if is_library_name(base) else None
    return Identity(known, base, "its file name") if known is not None else None


def identify(lib: Library) -> Identity | None:
    """The CUDA or driver library ``lib`` is, by SONAME, symbol versions, exports, then name."""
    facts = cuda()
    elf = lib.elf
    if elf is not None:
        if elf.soname and (known := facts.library(elf.soname)) is not None:
            return Identity(known, elf.soname, "its SONAME")
        for node in elf.version_definitions:
            if ".so" in node and (known := facts.library(node)) is not None:
                return Identity(known, node, f"the symbol version it defines ({node})")
        for known in facts.libraries:
            hit = sorted(set(known.defines) & lib.defines)
            if hit and shim_of(lib) is not known:
                return Identity(known, lib.name, f"the functions it exports ({', '.join(hit)})")
    return identify_name(lib.path)


def shim_of(lib: Library) -> CudaLibrary | None:
    """The library ``lib`` is a shim of: it exports that library's functions (``cuDriverGetVersion``), looks
    functions up at run time (``dlsym``) and never calls what only the implementation calls (the driver's
    kernel interface, ``ioctl``): it forwards to the real one (``dlopen("libcuda.so.1")``), as XLA's driver
    stub in jax's CUDA plugin does, and is not a copy of it. None for anything else."""
    if lib.elf is None or not lib.imports & {"dlsym", "dlvsym"}:
        return None
    for known in cuda().libraries:
        if known.calls and set(known.defines) & lib.defines and not set(known.calls) & lib.imports:
            return known
    return None
