"""Which CUDA or driver library a file of a wheel is: by what the file is, not what it is called.

A file is known as a library of :mod:`release.resources.cuda`, in this order, by:

1. its SONAME (``libcudart.so.13``, whatever the file is named);
2. a symbol version it defines: every NVIDIA library defines a version node named after its
   soname (``libcudart.so.13``), which a rename or a rewritten SONAME leaves in place;
3. the functions only that library exports (the table's ``defines``: ``cuDriverGetVersion``
   for the driver, which defines no version node);
4. its file name, for a file that is not readable as ELF (a link, a text file).

Pure: the ELF facts were read once by :mod:`release.audit.inspect`.
"""

from __future__ import annotations

from dataclasses import dataclass

from release.audit.model import Library, is_library_name
from release.resources.cuda import CudaLibrary, cuda

__all__ = ["Identity", "identify", "identify_name"]


@dataclass(frozen=True)
class Identity:
    library: CudaLibrary
    soname: str  # the soname the file answers to ("libcudart.so.13")
    evidence: str  # how it was known: "its SONAME", "the symbol version it defines (...)", ...

    def describe(self) -> str:
        """``the CUDA runtime of CUDA 13 (libcudart.so.13, from nvidia-cuda-runtime)``."""
        return self.library.describe(self.soname)


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
            if hit:
                return Identity(known, lib.name, f"the functions it exports ({', '.join(hit)})")
    return identify_name(lib.path)
