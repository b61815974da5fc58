"""Check ``hygiene``, one owner per component: every library shipped once, no CUDA library copied in.

* The same bytes twice (one SONAME under several names, or one ELF file under two names) is
  waste: each copy can be loaded (``dlopen`` by path), each with its own state.
* One SONAME with different bytes:

  - in one folder, a stale or conflicting build: the loader finds a library in a folder by its
    file name, so only one of them is ever loaded through DT_NEEDED;
  - in separate folders, different builds chosen at run time (triton 3.8 ships CUPTI's libraries
    for CUDA 12 in ``cupti/`` and for CUDA 13 in ``cupti-blackwell/``): fine, unless one ELF file's
    search path reaches two of them (it loads whichever folder comes first in its RPATH/RUNPATH,
    never the other).

* No CUDA driver or runtime grafted in, and no library a CUDA package provides copied into any
  wheel but that package's own, known by what the file is (its SONAME, the symbol version it
  defines, the driver functions it exports; see :mod:`release.audit.reading.cuda_identity`), not by its
  name. A CUDA package's own wheel (the CUDA runtime's package shipping the runtime) ships its
  own libraries: no graft.

Pure: the ELF facts were read once by :mod:`release.audit.reading.inspector`.
"""

from __future__ import annotations

import posixpath
import re
from collections import defaultdict

from release.audit.checks.loader import search_dirs, search_path
from release.audit.model import Contents, Finding, Library, fail, ok
from release.audit.reading.cuda_identity import Identity, identify, identify_name, shim_of
from release.resources.cuda import CudaLibrary, stem
from release.runpath import installed_dir

__all__ = ["grafted_findings", "owner_findings"]

CHECK = "hygiene"
_GRAFTED_DIR = re.compile(r"(^|/)[^/]+\.libs/")


def _key(lib: Library) -> str | None:
    """The name the loader knows the library by: its SONAME, else a ``lib*`` shared library's file name."""
    assert lib.elf is not None
    return lib.elf.soname or (lib.name if lib.name.startswith("lib") and lib.is_shared_library else None)


def _folder(path: str) -> str:
    """Where the member installs (site-packages-relative), or its folder in the wheel outside site-packages."""
    found = installed_dir(path)
    return found if found is not None else posixpath.dirname(path)


def _builds(libs: list[Library]) -> list[list[Library]]:
    """The copies grouped by their bytes (a copy that was not hashed is a build of its own)."""
    by_bytes: dict[bytes | str, list[Library]] = defaultdict(list)
    for lib in libs:
        by_bytes[lib.sha256 if lib.sha256 is not None else lib.path].append(lib)
    return list(by_bytes.values())


def _conflicts(key: str, builds: list[list[Library]], everyone: tuple[Library, ...]) -> list[Finding]:
    """Different builds of one SONAME: failing when two share a folder or one search path reaches two."""
    out: list[Finding] = []
    folders: dict[str, list[str]] = defaultdict(list)
    build_of: dict[str, int] = {}
    for index, build in enumerate(builds):
        for lib in build:
            build_of[lib.path] = index
            folders[_folder(lib.path)].append(lib.path)
    for folder, paths in sorted(folders.items()):
        if len({build_of[p] for p in paths}) > 1:
            out.append(
                fail(
                    CHECK,
                    f"{key} is shipped as {len({build_of[p] for p in paths})} different builds in one folder "
                    f"({', '.join(paths)}): the loader finds a library in {folder or 'site-packages'} by its "
                    "file name, so only one of them is ever loaded through DT_NEEDED and the other is a stale "
                    "or conflicting build; ship one",
                    paths=paths,
                )
            )
    copies = [lib for build in builds for lib in build]
    for consumer in everyone:
        if consumer.elf is None:
            continue
        dirs = search_dirs(consumer)
        for needed in consumer.elf.needed:
            hits = sorted(
                (dirs.index(_folder(c.path)), c.path)
                for c in copies
                if c.name == needed and _folder(c.path) in dirs
            )
            if len({build_of[p] for _, p in hits}) < 2:
                continue
            tag, entries = search_path(consumer)
            out.append(
                fail(
                    CHECK,
                    f"{consumer.path} needs {needed} and its {tag} {list(entries)} reaches "
                    f"{len({build_of[p] for _, p in hits})} different builds of it "
                    f"({', '.join(p for _, p in hits)}): it loads {hits[0][1]}, the first in its search path, "
                    "never the other; give each build its own folder that only its own users reach",
                    consumer.path,
                    needed=needed,
                    paths=[p for _, p in hits],
                )
            )
    return out


def owner_findings(contents: Contents) -> list[Finding]:
    """Each library once: the same bytes twice is waste; one SONAME as two builds only in separate folders."""
    groups: dict[str, list[Library]] = defaultdict(list)
    by_hash: dict[bytes, list[str]] = defaultdict(list)
    for lib in contents.libraries:
        if lib.elf is None:
            continue
        key = _key(lib)
        if key is not None:
            groups[key].append(lib)
        if lib.sha256 is not None:
            by_hash[lib.sha256].append(lib.path)
    out: list[Finding] = []
    notes: list[Finding] = []
    reported: list[set[str]] = []
    for key, libs in sorted(groups.items()):
        if len(libs) < 2:
            continue
        builds = _builds(libs)
        for build in builds:
            if len(build) > 1:
                paths = [lib.path for lib in build]
                reported.append(set(paths))
                out.append(
                    fail(
                        CHECK,
                        f"{key} is shipped {len(paths)} times, the same bytes each time ({', '.join(paths)}): "
                        "each copy can be loaded (by path), each with its own state, and the wheel carries "
                        f"the bytes {len(paths)} times; ship it once",
                        paths=paths,
                    )
                )
        if len(builds) < 2:
            continue
        conflicts = _conflicts(key, builds, contents.libraries)
        reported.append({lib.path for lib in libs})
        out += conflicts
        if not conflicts:
            shown = [build[0].path for build in builds]
            notes.append(
                ok(
                    CHECK,
                    f"{key} is shipped as {len(builds)} different builds in separate folders "
                    f"({', '.join(shown)}) and no file's search path reaches two of them: builds chosen at "
                    "run time, not a second copy",
                    paths=shown,
                )
            )
    for paths in sorted(by_hash.values()):
        if len(paths) > 1 and not any(set(paths) <= r for r in reported):
            out.append(
                fail(
                    CHECK,
                    f"the same ELF file is shipped {len(paths)} times under different names: {', '.join(paths)}",
                    paths=paths,
                )
            )
    if not out:
        out.append(ok(CHECK, "one owner per component: no library shipped twice"))
    return out + notes


def _graft_finding(path: str, ident: Identity, wheel_name: str) -> Finding | None:
    """A failing finding when the file is the driver or the runtime, or a CUDA library a CUDA package
    provides (known by its content, not its name), in a wheel that is not a package shipping it."""
    if ident.shipped_by(wheel_name):
        return None  # the package's own wheel ships its own libraries (the driver has no package)
    lib = ident.library
    what = ident.describe()
    renamed = (
        "" if path.rsplit("/", 1)[-1].startswith(ident.soname.split(".so", 1)[0]) else ", under another name"
    )
    details = {"member": path, "identified_by": ident.evidence, "soname": ident.soname}
    if lib.is_driver:
        return fail(
            CHECK,
            f"{path} is {what}, known by {ident.evidence}{renamed}: a copy of the CUDA driver grafted into "
            f"the wheel; it must come from the user's GPU driver; repair with --exclude '{lib.repair_pattern}'",
            **details,
        )
    if lib.kind == "runtime":
        return fail(
            CHECK,
            f"{path} is {what}, known by {ident.evidence}{renamed}: a copy of the CUDA runtime grafted into "
            f"the wheel; it must come from the declared runtime package; repair with --exclude "
            f"'{lib.repair_pattern}'",
            packages=list(ident.packages()),
            **details,
        )
    packages = list(ident.packages())
    name = path.rsplit("/", 1)[-1]
    hashed = stem(name) != name.split(".so", 1)[0] or stem(ident.soname) != ident.soname.split(".so", 1)[0]
    grafted = _GRAFTED_DIR.search(path) is not None and hashed
    if not packages or (ident.evidence == "its file name" and not grafted):
        return None  # no pip package ships it, or only its name says so (a library of the wheel's own)
    how = "grafted into the wheel by a repair step" if grafted else "bundled in the wheel"
    return fail(
        CHECK,
        f"{path} is {what}, known by {ident.evidence}: a CUDA library {how}, which "
        f"{' or '.join(packages)} provides; two copies of it can end up in one process: declare the package "
        f"and ship no copy (repair with --exclude '{lib.repair_pattern}')",
        packages=packages,
        **details,
    )


def _shim_note(lib: Library, shim: CudaLibrary) -> Finding:
    """A passing note: ``lib`` exports ``shim``'s functions but forwards to it at run time; not a copy."""
    exported = sorted(set(shim.defines) & lib.defines)
    return ok(
        CHECK,
        f"{lib.path} exports {shim.title}'s functions ({', '.join(exported)}) but looks them up at run time "
        f"({', '.join(sorted(lib.imports))}) and never calls {', '.join(shim.calls)}, which {shim.title} itself "
        f"does: a shim that forwards to {shim.title} of the user's system, not a copy of it",
        lib.path,
        shim_of=shim.stem,
    )


def grafted_findings(contents: Contents) -> list[Finding]:
    """No CUDA driver or runtime in the wheel, known by SONAME and content (see :mod:`release.audit.reading.cuda_identity`)."""
    out: list[Finding] = []
    notes: list[Finding] = []
    inspected = {lib.path: lib for lib in contents.libraries}
    own: list[str] = []
    for member in contents.wheel.members:
        if member.kind not in ("file", "symlink"):
            continue
        lib = inspected.get(member.name)
        ident = identify(lib) if lib is not None else identify_name(member.name)
        if ident is None:
            shim = shim_of(lib) if lib is not None else None
            if lib is not None and shim is not None:
                notes.append(_shim_note(lib, shim))
            continue
        finding = _graft_finding(member.name, ident, contents.wheel.name)
        if finding is not None:
            out.append(finding)
        elif ident.shipped_by(contents.wheel.name):
            own.append(member.name)
    if not out:
        out.append(
            ok(
                CHECK,
                "no CUDA driver or runtime grafted into the wheel, and no CUDA package's library copied into it "
                "(by SONAME, symbol versions and exports)"
                + (
                    f"; the wheel is {contents.wheel.name}, which ships its own "
                    + ", ".join(own[:3])
                    + (f" and {len(own) - 3:,} more" if len(own) > 3 else "")
                    if own
                    else ""
                ),
                **({"own": own} if own else {}),
            )
        )
    return out + notes
