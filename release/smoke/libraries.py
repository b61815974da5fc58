"""Which of a wheel's libraries the smoke step loads itself: every shipped ELF library that
links a CUDA library (by its ``DT_NEEDED``), as installed in the fresh venv.

Importing a package proves nothing about a library it loads on first use (a kernels library
opened through ``ctypes`` by the first call), or about one only a later import needs. So after
the import the probe loads each of these with ``ctypes.CDLL`` and reports what failed; which
CUDA runtime the process then holds is read from ``/proc/self/maps`` as before. The import
comes first on purpose: a torch extension finds torch's ``libc10.so`` only once ``import
torch`` has loaded it (it has no RUNPATH of its own, as PyTorch's extensions do not).

:func:`site_relative` and :func:`library_name` are pure; :func:`cuda_linking` reads the wheel's
member names and the installed files' ELF headers.
"""

from __future__ import annotations

import posixpath
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.binary.elf import read_elf
from release.binary.elf_core import ElfError, is_elf
from release.core.errors import InputError
from release.resources import cuda

EM_CUDA = 190  # a cubin's e_machine: device code, not a host library
LIBRARIES_FILE = "wheelwright_libraries.json"  # beside the probe: what it loads after the import


@dataclass(frozen=True)
class ShippedLibrary:
    """A library of the wheel, as installed: what it links from CUDA, and where it is."""

    member: str  # site-packages-relative ("lazysaxpy/liblazysaxpy_kernels.so")
    path: str  # absolute, in the fresh venv
    needs: tuple[str, ...]  # the CUDA sonames in its DT_NEEDED
    problem: str | None = None  # its ELF headers could not be read

    def to_json(self) -> dict[str, Any]:
        return {"member": self.member, "path": self.path, "needs": list(self.needs), "problem": self.problem}


def library_name(member: str) -> bool:
    """A member whose name is a shared library's: ``libx.so``, ``libx.so.1``, ``_C.abi3.so`` (pure)."""
    name = posixpath.basename(member)
    return name.endswith(".so") or ".so." in name


def site_relative(member: str, data_dir: str | None) -> str | None:
    """Where a wheel member is installed, relative to site-packages (pure): itself, or the rest
    of a ``.data/purelib`` or ``.data/platlib`` member; None for scripts, headers, data and the
    ``.dist-info`` folder."""
    if member.endswith("/") or member.split("/", 1)[0].endswith(".dist-info"):
        return None
    if data_dir is not None and member.startswith(data_dir + "/"):
        kind, _, inner = member[len(data_dir) + 1 :].partition("/")
        return posixpath.normpath(inner) if kind in ("purelib", "platlib") and inner else None
    return posixpath.normpath(member)


def _members(wheel: Path) -> list[str]:
    try:
        with zipfile.ZipFile(wheel) as zf:
            return zf.namelist()
    except (OSError, zipfile.BadZipFile) as exc:
        raise InputError(f"{wheel}: cannot read the wheel's member names: {exc}") from None


def _installed(wheel: Path, sites: Sequence[Path]) -> Iterator[tuple[str, Path]]:
    """Each shared library of the wheel as installed under one of ``sites``: (site-relative, path)."""
    names = _members(wheel)
    tops = {n.split("/", 1)[0] for n in names}
    data_dir = next((t for t in sorted(tops) if t.endswith(".data")), None)
    for member in names:
        rel = site_relative(member, data_dir) if library_name(member) else None
        if rel is None:
            continue
        installed = next((s / rel for s in sites if (s / rel).is_file()), None)
        if installed is not None:  # else the installer did not put it there: the import or the audit says why
            yield rel, installed


def cuda_linking(wheel: Path, sites: Sequence[Path]) -> tuple[ShippedLibrary, ...]:
    """The wheel's shared libraries that link a CUDA library, found installed under one of
    ``sites`` (the venv's platlib and purelib), in member order. A library whose ELF headers
    cannot be read is kept, with its problem: the probe cannot vouch for it."""
    out: list[ShippedLibrary] = []
    for rel, installed in _installed(wheel, sites):
        try:
            if not is_elf(installed):
                continue
            needs = tuple(n for n in read_elf(installed).needed if cuda.is_cuda_library(n))
        except ElfError as exc:
            out.append(ShippedLibrary(rel, str(installed), (), f"its ELF headers cannot be read: {exc}"))
            continue
        if needs:
            out.append(ShippedLibrary(rel, str(installed), needs))
    return tuple(out)


def other_cpu(wheel: Path, sites: Sequence[Path], platform: str) -> tuple[tuple[str, str], ...]:
    """The wheel's installed shared libraries built for another CPU than the row's ``platform``
    (``"aarch64"``): (site-relative member, its CPU). No interpreter of the row can load them; the
    loader says only "cannot open shared object file" of such a file, so the smoke step names them."""
    out: list[tuple[str, str]] = []
    for rel, installed in _installed(wheel, sites):
        try:
            if not is_elf(installed):
                continue
            elf = read_elf(installed)
        except ElfError:
            continue  # cuda_linking reports it
        if elf.machine != EM_CUDA and elf.machine_name != platform:
            out.append((rel, elf.machine_name))
    return tuple(out)
