"""Read every ELF file and device code file of an extracted wheel once.

Per host library: headers, dynamic section, device code (executable ``.nv_fatbin`` and
relocatable ``__nv_relfatbin``, :mod:`release.binary.fatbin`), which of its translation units
hold kernels (:mod:`release.binary.cubin`), device code embedded as data
(:mod:`release.binary.embedded`), the ``__cudaRegisterLinkedBinary_*`` functions relocatable
device code needs, and whether it exports the functions that identify a CUDA driver library
(:mod:`release.audit.reading.cuda_identity`). Device code shipped as files (``*.cubin``, ``*.fatbin``,
``*.ptx``) is read like a library's: a cubin is one SASS entry, a PTX file one PTX entry.

A file is inspected when it starts with the ELF magic, is named like a shared library
(``*.so``, ``*.so.N``) or like a device code file: a ``.so`` that is a linker script or a
truncated file is inspected too, so the audit can say what is wrong with it instead of
skipping it. Errors are kept on the :class:`Library`, never raised: the checks decide what a
failed inspection means (for a CUDA wheel: a failing finding). Files are read by a few threads.
"""

from __future__ import annotations

import os
import re
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from release.audit.model import Library, Member, WheelFile, is_library_name
from release.binary.cubin import PREFIX, DecodeError, cubin_target, is_cubin_header, unit_facts
from release.binary.elf import ElfError, ElfInfo, read_elf
from release.binary.elf_symbols import STT_FUNC, lookup, undefined_symbols
from release.binary.embedded import EmbeddedImage, find_embedded
from release.binary.fatbin import (
    Fatbinary,
    FatbinEntry,
    FatbinError,
    Variant,
    has_device_code,
    parse_range,
    read_fatbins,
)
from release.resources.cuda import cuda

RUNTIME_LOOKUP = frozenset({"dlsym", "dlvsym"})  # how a shim finds the functions it forwards to

__all__ = ["DEVICE_FILE_SUFFIXES", "inspect_libraries", "inspect_member"]

DEVICE_FILE_SUFFIXES = (".cubin", ".fatbin", ".ptx")
LINKED_BINARY = "__cudaRegisterLinkedBinary_"
MAX_PTX_FILE = 64 * 1024 * 1024
_PTX_VERSION = re.compile(rb"(?m)^\s*\.version\s+(\d+)\.(\d+)")
_PTX_TARGET = re.compile(rb"(?m)^\s*\.target\s+sm_(\d{2,3})([af]?)\b")
_PTX_ENTRY = re.compile(rb"(?m)^\s*(?:\.visible\s+|\.weak\s+)?\.entry\s")


def _variant(text: str) -> Variant:
    return "a" if text == "a" else "f" if text == "f" else ""


def inspect_member(member: Member, *, embedded: bool = True) -> Library | None:
    """A :class:`Library` for an extracted ELF file, ``.so``-named file or device code file, else None.
    ``embedded=False``: without the scan for device code embedded as data (:func:`scan_embedded`)."""
    if member.path is None or member.kind != "file":
        return None
    name = member.name.rsplit("/", 1)[-1]
    device_file = name.endswith(DEVICE_FILE_SUFFIXES)
    if not member.is_elf and not is_library_name(name) and not device_file:
        return None
    if device_file and not member.is_elf:
        return _device_file(member, name)
    try:
        info = read_elf(member.path)
        if info.machine == 190:
            return _cubin_file(member, info)
        found = lookup(member.path, _markers())
    except ElfError as exc:
        return Library(member.name, member.path, member.sha256, None, _short(exc, member), False, (), None)
    defines = frozenset(name for name, sym in found.items() if sym.defined and sym.type == STT_FUNC)
    lib = _host_library(member, member.path, info, defines)
    if defines & _driver_markers():  # the driver, or a shim forwarding to it: does it look functions up?
        lib = replace(lib, imports=frozenset(s.name for s in undefined_symbols(member.path)) & _imports())
    try:
        if embedded:
            lib = replace(lib, embedded=find_embedded(member.path, info))
        if not has_device_code(member.path, info):
            return lib
        fatbins = read_fatbins(member.path, info)
        relocatable = read_fatbins(member.path, info, relocatable=True)
    except (FatbinError, ElfError, OSError) as exc:
        return replace(lib, has_device_code=True, fatbin_error=_short(exc, member))
    lib = replace(lib, has_device_code=True, fatbins=fatbins, relocatable=relocatable)
    lib = _with_units(lib)
    if relocatable:
        needs = sorted(s.name for s in undefined_symbols(member.path) if s.name.startswith(LINKED_BINARY))
        lib = replace(lib, link_needs=tuple(needs))
    return lib


Scanned = tuple[EmbeddedImage, ...] | str | None  # the images; the error that stopped the scan; not scanned


def scan_embedded(member: Member, lib: Library | None) -> Scanned:
    """The embedded-image scan :func:`inspect_member` skips with ``embedded=False``, for its result ``lib``."""
    if lib is None or lib.elf is None or lib.device_file is not None or member.path is None:
        return None  # not a host library: inspect_member does not scan it either
    try:
        return find_embedded(member.path, lib.elf)
    except (FatbinError, ElfError, OSError) as exc:
        return _short(exc, member)


def with_embedded(member: Member, lib: Library | None, scanned: Scanned) -> Library | None:
    """``inspect_member(member)`` from ``lib = inspect_member(member, embedded=False)`` and its scan."""
    if lib is None or scanned is None:
        return lib
    if isinstance(scanned, str):  # inspect_member scans first: its error stops the rest, as there
        base = replace(_host_library(member, lib.file, lib.elf, lib.defines), imports=lib.imports)
        return replace(base, has_device_code=True, fatbin_error=scanned)
    return replace(lib, embedded=scanned)


def _host_library(member: Member, file: Path, info: ElfInfo | None, defines: frozenset[str]) -> Library:
    """A host library read up to its device code: what :func:`inspect_member` starts from and
    :func:`with_embedded` goes back to when the embedded scan failed."""
    return Library(member.name, file, member.sha256, info, None, False, (), None, defines)


def _with_units(lib: Library) -> Library:
    """Which fatbinaries hold kernels, and the ptxas releases their cubins name."""
    if not lib.fatbins:
        return lib
    kernels: list[bool | None] = []
    toolkits: set[tuple[int, int]] = set()
    problem: str | None = None
    fd = os.open(lib.file, os.O_RDONLY)
    try:
        for fb in lib.fatbins:
            facts = unit_facts(fd, fb)
            kernels.append(facts.kernels)
            toolkits.update(facts.toolkits)
            problem = problem or facts.problem
    finally:
        os.close(fd)
    return replace(
        lib, unit_kernels=tuple(kernels), toolkits=tuple(sorted(toolkits)), kernels_unknown=problem
    )


def _cubin_file(member: Member, info: ElfInfo) -> Library:
    """A ``.cubin`` (an ELF file for EM_CUDA): one SASS entry, kernels by its ``.text.*`` sections."""
    assert member.path is not None
    with member.path.open("rb") as f:
        data = f.read(PREFIX)
    target = cubin_target(data[:0x40], data) if is_cubin_header(data) else None
    if target is None:
        return Library(member.name, member.path, member.sha256, info, "a CUDA ELF file that is not a 64-bit cubin",
                       False, (), None, device_file="cubin")  # fmt: skip
    kernels = any(s.name.startswith(".text.") for s in info.sections)
    entry = FatbinEntry("sass", target.arch, _variant(target.variant), payload_size=member.size)
    unit = Fatbinary(0, (entry,), member.size)
    return Library(member.name, member.path, member.sha256, info, None, True, (unit,), None,
                   unit_kernels=(kernels,), toolkits=(target.toolkit,) if target.toolkit else (),
                   device_file="cubin")  # fmt: skip


def _device_file(member: Member, name: str) -> Library:
    """A ``.fatbin`` (fatbinaries end to end) or ``.ptx`` (PTX text) file of the wheel."""
    assert member.path is not None
    base = Library(member.name, member.path, member.sha256, None, None, True, (), None)
    if name.endswith(".fatbin"):
        base = replace(base, device_file="fatbin")
        try:
            fatbins = parse_range(member.path, 0, member.size, what="a .fatbin file")
        except (FatbinError, ElfError) as exc:
            return replace(base, fatbin_error=_short(exc, member))
        return _with_units(replace(base, fatbins=fatbins))
    base = replace(base, device_file="ptx" if name.endswith(".ptx") else "cubin")
    with member.path.open("rb") as f:
        text = f.read(MAX_PTX_FILE)
    if name.endswith(".cubin"):
        return replace(base, fatbin_error=f"{member.name} is named .cubin but is not an ELF file")
    version = _PTX_VERSION.search(text)
    target = _PTX_TARGET.search(text)
    if version is None or target is None:
        return replace(
            base, fatbin_error=f"{member.name} is named .ptx but has no .version and .target lines"
        )
    entry = FatbinEntry(
        "ptx", int(target[1]), _variant(target[2].decode()), payload_size=member.size,
        code_version=(int(version[1]), int(version[2])),
    )  # fmt: skip
    unit = Fatbinary(0, (entry,), member.size)
    return replace(base, fatbins=(unit,), unit_kernels=(_PTX_ENTRY.search(text) is not None,))


def _markers() -> frozenset[str]:
    """The functions that tell a CUDA or driver library by its content (release/resources/cuda.toml)."""
    return frozenset(name for lib in cuda().libraries for name in lib.defines)


def _imports() -> frozenset[str]:
    """The imports that tell a driver library from a shim of it: run-time lookup, the kernel interface."""
    return RUNTIME_LOOKUP | frozenset(name for lib in cuda().libraries for name in lib.calls)


def _driver_markers() -> frozenset[str]:
    """The functions that tell a driver library by its exports (cuDriverGetVersion)."""
    return frozenset(name for lib in cuda().libraries if lib.is_driver for name in lib.defines)


def _short(exc: Exception, member: Member) -> str:
    """The reader's message with the temporary path replaced by the wheel path."""
    text = str(exc)
    if member.path is not None:
        text = text.replace(str(member.path), member.name)
    return text


def _resolve_link_needs(libs: list[Library]) -> list[Library]:
    """Drop the ``__cudaRegisterLinkedBinary_*`` a library needs that another file of the wheel defines."""
    needing = [lib for lib in libs if lib.link_needs]
    if not needing:
        return libs
    wanted = {name for lib in needing for name in lib.link_needs}
    defined: set[str] = set()
    for other in libs:
        if other.elf is None or other.device_file is not None:
            continue
        try:
            found = lookup(other.file, wanted)
        except (ElfError, DecodeError, OSError):
            continue
        defined |= {name for name, sym in found.items() if sym.defined}
    return [replace(lib, link_needs=tuple(n for n in lib.link_needs if n not in defined)) for lib in libs]


def _threads() -> int:
    return max(2, min(8, os.cpu_count() or 2))


class Inspector:
    """Inspects each file as the extraction pass finishes it (:meth:`submit` is ``open_wheel``'s
    ``on_extracted``), so reading a library overlaps unpacking the rest of the wheel. The scan for
    embedded images is a task of its own (``memmem``, without the GIL): :meth:`libraries` with
    ``embedded=False`` does not wait for it, so the platform analysis can run beside it."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="inspect")
        self._futures: dict[str, tuple[Future[Library | None], Future[Scanned]]] = {}
        self._lock = threading.Lock()
        # an embedded scan stopped on an error: the libraries differ beyond ``embedded``
        self.scan_failed = False

    def submit(self, member: Member) -> None:
        quick = self._pool.submit(inspect_member, member, embedded=False)
        scan = self._pool.submit(lambda: scan_embedded(member, quick.result()))
        with self._lock:
            self._futures[member.name] = (quick, scan)

    def libraries(self, wheel: WheelFile, *, embedded: bool = True) -> tuple[Library, ...]:
        """Every inspected file of the wheel, in member order (files not submitted are inspected now);
        ``embedded=False``: without the embedded images (the rest as with them, unless ``scan_failed``)."""
        libs: list[Library] = []
        for member in wheel.members:
            if member.path is None or member.kind != "file":
                continue
            with self._lock:
                futures = self._futures.get(member.name)
            if futures is None:
                lib = inspect_member(member)
            else:
                lib = futures[0].result()
                if embedded:
                    scanned = futures[1].result()
                    self.scan_failed |= isinstance(scanned, str)
                    lib = with_embedded(member, lib, scanned)
            if lib is not None:
                libs.append(lib)
        return tuple(_resolve_link_needs(libs))

    def __enter__(self) -> Inspector:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def inspect_libraries(wheel: WheelFile) -> tuple[Library, ...]:
    """Inspect every file of an opened wheel (a few threads, biggest first)."""
    members = [m for m in wheel.members if m.path is not None and m.kind == "file"]
    biggest_first = sorted(range(len(members)), key=lambda i: -members[i].size)
    with ThreadPoolExecutor(max_workers=_threads(), thread_name_prefix="inspect") as pool:
        done = dict(
            zip(biggest_first, pool.map(lambda i: inspect_member(members[i]), biggest_first), strict=True)
        )
    libs = [lib for i in range(len(members)) if (lib := done[i]) is not None]
    return tuple(_resolve_link_needs(libs))
