"""Check ``cross_check`` (optional: ``--cross-check``): cuobjdump lists the same device code as the fatbin reader.

Every ELF file and device code file is listed by NVIDIA's cuobjdump (:mod:`release.binary.cuobjdump`,
installed once into the cache) and compared with what :mod:`release.binary.fatbin` read: the entries,
and for a fatbinary the headers too. A file cuobjdump cannot list is reported unavailable, not failed.
"""

from __future__ import annotations

from pathlib import Path

from release.audit.model import Check, Contents, Finding, Library, fail, ok
from release.binary import cuobjdump
from release.core.errors import WheelwrightError

CHECK = "cross_check"


def _cross_check_one(lib: Library, tool: Path, version: str) -> Finding:
    """One file against cuobjdump; a cuobjdump failure marks only this file's cross-check unavailable."""
    if lib.device_file == "ptx":
        return ok(
            CHECK,
            f"{lib.name}: a PTX file; cuobjdump does not read those",
            lib.path,
            cuobjdump=version,
        )
    try:
        if lib.device_file is not None:
            entries = [e for fb in lib.fatbins for e in fb.entries]
            result = cuobjdump.cross_check(lib.file, cuobjdump=tool, entries=entries,
                                           headers=lib.device_file != "cubin")  # fmt: skip
        else:
            result = cuobjdump.cross_check(lib.file, cuobjdump=tool)
    except (WheelwrightError, OSError) as exc:
        why = str(exc).replace(str(lib.file), lib.path)
        return ok(
            CHECK,
            f"{lib.name}: cross-check unavailable (cuobjdump could not list it: {why.splitlines()[0]}); "
            "the fatbin reader's table stands alone for this file",
            lib.path, cuobjdump=version, unavailable=True, error=why[-2000:],
        )  # fmt: skip
    if result.same_entries:
        return ok(
            CHECK,
            f"{lib.name}: cuobjdump lists the same {len(result.theirs)} device code entries as the fatbin reader"
            + (" (and the same headers: variants, PTX ISA, compression)" if result.their_headers else ""),
            lib.path, cuobjdump=version,
        )  # fmt: skip
    return fail(
        CHECK,
        f"{lib.name}: cuobjdump and the fatbin reader disagree: {'; '.join(result.differences())}",
        lib.path,
        cuobjdump=version,
    )


def check(contents: Contents, cache_dir: Path) -> list[Finding]:
    """Every ELF file and device code file, whether or not the reader found device code in it."""
    tool = cuobjdump.ensure_cuobjdump(cache_dir)
    version = cuobjdump.cuobjdump_version(tool)
    files = [lib for lib in contents.libraries if lib.elf is not None or lib.device_file is not None]
    out = [_cross_check_one(lib, tool, version) for lib in files if lib.fatbin_error is None]
    if not out:
        out.append(ok(CHECK, "no ELF or device code file to cross-check", cuobjdump=version))
    return out


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "cuobjdump cross-check", check)
