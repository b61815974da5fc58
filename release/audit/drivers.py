"""Which driver a path to a GPU needs: CUDA releases, PTX ISA versions and driver versions. Pure.

Facts from :mod:`release.resources.cuda` (``[release."X.Y"]``): the PTX ISA each release's
compiler writes and the oldest driver of each release. The rules (measured on the lent H200,
driver 580.159.04, a CUDA 13.0 driver; see docs/gpu-smoke.md):

* SASS runs on a driver of the same CUDA major or newer (minor version compatibility: a CUDA
  13.2 library's sm_90 SASS ran on the 13.0 driver); the CUDA runtime the library links
  (``libcudart.so.13``) needs that major's driver too;
* PTX JIT-compiles only on a driver whose release writes that PTX ISA or newer: PTX ISA 9.2
  (CUDA 13.2) failed on the 13.0 driver with ``cudaErrorUnsupportedPtxVersion``, 9.0 ran;
* a GPU needs a driver that knows it (``since`` in the GPU table).
"""

from __future__ import annotations

from dataclasses import dataclass

from release.audit.model import Expectation, Library
from release.binary.fatbin import FatbinEntry
from release.resources.cuda import CudaRelease, Gpu, cuda

__all__ = ["Need", "library_cuda_major", "need_for_entry", "need_for_major", "parse_driver"]


class DriverSyntaxError(ValueError):
    """A --driver value that is neither a known CUDA release nor a driver version."""


def parse_driver(text: str) -> CudaRelease:
    """``13.0`` (the CUDA version ``nvidia-smi`` prints) or ``580.159.04`` (the driver version) ->
    the CUDA release that driver runs. DriverSyntaxError naming what is known."""
    try:
        return cuda().driver_named(text)
    except ValueError as exc:
        raise DriverSyntaxError(f"--driver {exc}") from None


@dataclass(frozen=True, order=True)
class Need:
    """The oldest driver a path needs: a CUDA release, or one newer than any wheelwright knows."""

    version: tuple[int, int]  # (13, 2); for an unknown PTX ISA: one past the newest release known
    release: CudaRelease | None  # None: newer than every release in the table

    def label(self) -> str:
        if self.release is not None:
            return self.release.describe()
        newest = cuda().releases[-1]
        return f"a CUDA release newer than {newest.label} (newer than any wheelwright knows)"

    def met_by(self, driver: CudaRelease) -> bool:
        return self.release is not None and driver.version >= self.version


def need_for_major(major: int) -> Need:
    """What SASS (and the runtime) of a CUDA ``major`` library needs: that major's first release."""
    release = next((r for r in cuda().releases if r.version[0] == major), None)
    return Need(release.version if release else (major, 0), release)


def need_for_entry(entry: FatbinEntry) -> Need | None:
    """What JIT-compiling a PTX entry needs: the first release writing its ISA. None: not PTX or no ISA."""
    isa = entry.ptx_isa
    if isa is None:
        return None
    release = cuda().release_for_ptx_isa(isa)
    if release is None:
        newest = cuda().releases[-1].version
        return Need((newest[0], newest[1] + 1), None)
    return Need(release.version, release)


def need_for_gpu(gpu: Gpu) -> Need | None:
    if gpu.since is None:
        return None
    release = cuda().release(gpu.since)
    return Need(gpu.since, release)


def library_cuda_major(lib: Library, expectation: Expectation) -> int | None:
    """The CUDA major a library was built for: the runtime it links, else the train claimed, else its
    PTX's ISA, else the ptxas that wrote its cubins. None when nothing says."""
    facts = cuda()
    if lib.elf is not None:
        for needed in lib.elf.needed:
            known = facts.library(needed)
            if known is not None and known.kind == "runtime":
                major = known.cuda_major_of(needed)
                if major is not None:
                    return major
    if expectation.train:
        return int(expectation.train.split(".")[0])
    isas = [e.ptx_isa for fb in lib.fatbins for e in fb.entries if e.ptx_isa is not None]
    if isas:
        release = facts.release_for_ptx_isa(max(isas))
        return release.version[0] if release else facts.releases[-1].version[0]
    if lib.toolkits:
        return max(lib.toolkits)[0]
    return None
