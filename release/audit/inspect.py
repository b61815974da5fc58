"""Read every ELF file of an extracted wheel once: headers, dynamic section, device code.

Besides headers and device code, each file is asked whether it exports the functions
that identify a CUDA driver library (:mod:`release.audit.cuda_identity`): a hash-table lookup,
a few small reads. A file is inspected when it starts with the ELF magic or is named like a shared
library (``*.so``, ``*.so.N``): a ``.so`` that is a linker script or a truncated
file is inspected too, so the audit can say what is wrong with it instead of
skipping it. Errors are kept on the :class:`Library`, never raised: the checks
decide what a failed inspection means (for a CUDA wheel: a failing finding).
"""

from __future__ import annotations

from release.audit.elf import ElfError, read_elf
from release.audit.elf_symbols import STT_FUNC, lookup
from release.audit.fatbin import FatbinError, has_device_code, read_fatbins
from release.audit.model import Library, Member, WheelFile, is_library_name
from release.resources.cuda import cuda

__all__ = ["inspect_libraries", "inspect_member"]


def inspect_member(member: Member) -> Library | None:
    """A :class:`Library` for an extracted ELF file or ``.so``-named file, else None."""
    if member.path is None or member.kind != "file":
        return None
    name = member.name.rsplit("/", 1)[-1]
    if not member.is_elf and not is_library_name(name):
        return None
    try:
        info = read_elf(member.path)
        found = lookup(member.path, _markers())
    except ElfError as exc:
        return Library(member.name, member.path, member.sha256, None, _short(exc, member), False, (), None)
    defines = frozenset(name for name, sym in found.items() if sym.defined and sym.type == STT_FUNC)
    try:
        device = has_device_code(member.path)
        fatbins = read_fatbins(member.path) if device else ()
    except (FatbinError, ElfError) as exc:
        return Library(
            member.name, member.path, member.sha256, info, None, True, (), _short(exc, member), defines
        )
    return Library(member.name, member.path, member.sha256, info, None, device, fatbins, None, defines)


def _markers() -> frozenset[str]:
    """The functions that tell a CUDA or driver library by its content (release/resources/cuda.toml)."""
    return frozenset(name for lib in cuda().libraries for name in lib.defines)


def _short(exc: Exception, member: Member) -> str:
    """The reader's message with the temporary path replaced by the wheel path."""
    text = str(exc)
    if member.path is not None:
        text = text.replace(str(member.path), member.name)
    return text


def inspect_libraries(wheel: WheelFile) -> tuple[Library, ...]:
    out = []
    for member in wheel.members:
        lib = inspect_member(member)
        if lib is not None:
            out.append(lib)
    return tuple(out)
