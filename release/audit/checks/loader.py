"""Check ``loader``: every library finds its CUDA libraries where the declared packages put them.

Installed layout: the wheel's root is the site-packages directory (``*.data/purelib``
and ``*.data/platlib`` land there too), and the declared CUDA packages install their
libraries into ``installs_to`` under it (``nvidia/cu13/lib``).

* For every ELF file, every RPATH/RUNPATH entry must be ``$ORIGIN``-relative: an
  absolute entry (``/usr/local/cuda/lib64``, a build tree, ``/tmp/...``) points at the
  build machine, and a relative one at the user's working directory.
* For every library whose DT_NEEDED names a CUDA library (:mod:`release.resources.cuda`
  or a library of the row's packages): an ``$ORIGIN`` entry of its search path (RUNPATH, or
  RPATH when there is no RUNPATH, as the loader does) must resolve to the declared
  package's ``installs_to``. A CUDA library shipped in the wheel itself and reached
  through the search path is the wheel's own (a CUDA package's own wheel ships its libraries);
  one the wheel ships where the search path does not reach fails as such (the sibling is there,
  the loader does not look there); a CUDA library that neither the wheel nor a declared package
  provides fails.
* The driver (``libcuda.so.1`` and the other driver libraries) comes from the system, never from a
  package: linking it needs no search path.
* A CPU wheel links no CUDA library at all.
* A library the CUDA runtime cannot load (relocatable device code never device-linked) fails
  here when ``device_code`` does not run (a standalone audit without a claim), so it never
  passes unnoticed (:mod:`release.audit.checks.link_state`).

Where a member installs and where an ``$ORIGIN`` entry points is the one rule of :mod:`release.runpath`,
which the build's repair writes RUNPATHs by.

On a machine whose loader cache holds a CUDA runtime (this one), a missing or wrong
RUNPATH still loads: only this check catches it before a user does.
"""

from __future__ import annotations

import posixpath
import re

from release.audit.checks.link_state import cannot_load
from release.audit.model import Check, Contents, Expectation, Finding, Library, fail, ok
from release.policy.model import CudaPackage
from release.resources import cuda
from release.resources.cuda import stem
from release.runpath import installed_dir, is_origin_entry, origin_entry, resolve

CHECK = "loader"
# a toolkit's conventional, unversioned install prefix: it exists on users' machines too, holding their toolkit
_SYSTEM_TOOLKIT = re.compile(r"^/(?:usr/local/cuda|opt/rocm)(?=/|$)")
DEVICE_CODE = "device_code"  # the check that reports a library that cannot load when it runs


def is_driver_library(soname: str) -> bool:
    """The driver (``libcuda.so.1`` and its kin): installed with the GPU driver, never by a package."""
    return cuda.is_driver_library(soname)


def is_cuda_library(soname: str, packages: tuple[CudaPackage, ...] = ()) -> bool:
    """A library from a CUDA package or the driver: by :mod:`release.resources.cuda` or the row's packages."""
    return any(soname in p.libraries for p in packages) or cuda.is_cuda_library(soname)


def exclusion_patterns(packages: tuple[CudaPackage, ...]) -> tuple[str, ...]:
    """fnmatch patterns for the platform analysis: CUDA libraries come from packages, not from manylinux."""
    return tuple(sorted({*cuda.repair_excludes(), *(lib for p in packages for lib in p.libraries)}))


def search_path(lib: Library) -> tuple[str, tuple[str, ...]]:
    """What the loader uses for the library's own DT_NEEDED: RUNPATH, else RPATH."""
    assert lib.elf is not None
    if lib.elf.runpath:
        return "RUNPATH", lib.elf.runpath
    return "RPATH", lib.elf.rpath


def search_dirs(lib: Library) -> tuple[str, ...]:
    """The site-packages-relative folders the library's search path reaches (its ``$ORIGIN`` entries)."""
    if lib.elf is None:
        return ()
    origin = installed_dir(lib.path)
    return tuple(d for d in (resolve(e, origin) for e in search_path(lib)[1]) if d is not None)


def _bad_entries(lib: Library) -> list[Finding]:
    assert lib.elf is not None
    out = []
    for tag, entries in (("RPATH", lib.elf.rpath), ("RUNPATH", lib.elf.runpath)):
        for entry in dict.fromkeys(entries):  # each entry once: cucim's RUNPATH ':::::::' is one empty entry
            if is_origin_entry(entry):
                continue
            if entry.startswith("/"):
                toolkit = _SYSTEM_TOOLKIT.match(entry)
                where = (
                    "a temporary build directory"
                    if entry.startswith(("/tmp", "/var/tmp"))  # noqa: S108 - naming, not using, them
                    else "the build machine's filesystem"
                )
                out.append(
                    fail(
                        CHECK,
                        f"{lib.name} has an absolute {tag} entry {entry!r}: it points at whatever toolkit the "
                        f"user's machine has installed at {toolkit[0]} (any release, or none), whose libraries "
                        "the loader then takes before the system's and the declared packages' own; use "
                        "$ORIGIN-relative entries"
                        if toolkit is not None
                        else f"{lib.name} has an absolute {tag} entry {entry!r}: it points into {where}, which "
                        "does not exist (or holds something else) on a user's machine; use $ORIGIN-relative entries",
                        lib.path,
                        entry=entry,
                    )
                )
            else:
                out.append(
                    fail(
                        CHECK,
                        f"{lib.name} has a {tag} entry {entry!r} that is neither absolute nor $ORIGIN-relative: "
                        "the loader resolves it against the working directory of whoever runs Python"
                        if entry
                        else f"{lib.name} has an empty {tag} entry ({':'.join(entries)!r}): the loader reads "
                        "it as the working directory of whoever runs Python, and loads a library of that name "
                        "from there; remove it",
                        lib.path,
                        entry=entry,
                    )
                )
    return out


def _cuda_major(expectation: Expectation) -> int | None:
    return int(expectation.train.split(".")[0]) if expectation.train else None


def _who_ships(needed: str, expectation: Expectation) -> str:
    """``; for CUDA 13 nvidia-cublas ships it (installs to nvidia/cu13/lib): declare it`` or nothing.

    The CUDA major is the soname's own when one release ships it (``libcudart.so.12`` is CUDA 12's, whatever
    the train: a wheel of libraries for several CUDA releases, as bitsandbytes, links each), else the train's."""
    known = cuda.library(needed)
    major = (known.cuda_major_of(needed) if known is not None else None) or _cuda_major(expectation)
    shipping = known.shipped_for(major) if known is not None and major is not None else None
    if shipping is None:
        return ""
    return f"; for CUDA {major} {shipping.package} ships it (installs to {shipping.installs_to}): declare it"


def wrong_soname(lib: Library, needed: str, provider: CudaPackage, expectation: Expectation) -> Finding:
    """A CUDA library of a declared package, but not the soname the package installs: say which one it is.

    A repair's grafted copy (``libcudart-1a2b3c4d.so.13``) is a renamed copy; ``libcudart.so.12``
    on a CUDA 13 row is CUDA 12's runtime (the build used the wrong toolkit); anything else is a
    soname no CUDA release in wheelwright's table ships.
    """
    wanted = " / ".join(provider.libraries)
    base, dot, rest = needed.partition(".so")
    original = stem(needed) + dot + rest
    known = cuda.library(needed)
    train = expectation.train or "?"
    whose = "wheel is" if expectation.standalone else "row is"
    if original != needed:
        what = f"a renamed copy of {original} (a repair grafted it into the wheel)"
        fix = f"repair with --exclude '{known.repair_pattern if known else original}'"
    elif known is not None and known.cuda_majors_of(needed):
        what = known.describe(needed)
        built = " or ".join(str(m) for m in known.cuda_majors_of(needed))
        fix = f"the library was built against CUDA {built}; rebuild it with the CUDA {train} toolkit"
    else:
        what = (
            f"a soname that no CUDA release in wheelwright's table ships for {known.title if known else base}"
        )
        fix = f"rebuild it with the CUDA {train} toolkit"
    return fail(
        CHECK,
        f"{lib.name} needs {needed}, {what}, but the {whose} CUDA {train}, whose {provider.name} installs "
        f"{wanted}; {fix}",
        lib.path,
        needed=needed,
        package=provider.name,
    )


def _not_on_search_path(
    lib: Library, needed: str, member: str, installed_as: str, tag: str, entries: tuple[str, ...]
) -> Finding:
    """The wheel ships the CUDA library ``lib`` needs (``member``), but ``lib``'s search path misses its folder."""
    folder = posixpath.dirname(installed_as)
    origin = installed_dir(lib.path)
    fix = origin_entry(folder, origin) if origin is not None else None
    where = f"its {tag} {list(entries)} does not reach" if entries else "it has no RPATH/RUNPATH to reach"
    return fail(
        CHECK,
        f"{lib.name} needs {needed}, which the wheel ships ({member}), but {where} {folder or 'site-packages'}: "
        f"the loader looks for a library in the folders of the search path, not beside the file that needs it, "
        f"so loading {lib.name} fails with '{needed}: cannot open shared object file' unless something loaded "
        f"{needed} first (or the system's loader cache holds another one)"
        + (f"; add {fix!r}" if fix is not None else ""),
        lib.path,
        needed=needed,
        shipped=member,
        search_path={tag: list(entries)},
    )


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    packages = expectation.cuda_packages
    members = {m.name for m in contents.wheel.files}
    installed = {}
    for name in members:
        d = installed_dir(name)
        if d is not None:
            installed[posixpath.join(d, name.rsplit("/", 1)[-1])] = name
    out: list[Finding] = []
    reached: list[str] = []
    for lib in contents.libraries:
        if lib.elf is None:
            continue
        out += _bad_entries(lib)
        cuda_needed = [n for n in lib.elf.needed if is_cuda_library(n, packages)]
        if not expectation.is_cuda:
            out += [
                fail(
                    CHECK,
                    f"{lib.name} links the CUDA library {n}, but this is a CPU wheel; the CPU wheel links no CUDA",
                    lib.path,
                    needed=n,
                )
                for n in cuda_needed
            ]
            continue
        origin = installed_dir(lib.path)
        tag, entries = search_path(lib)
        resolved = [(e, resolve(e, origin)) for e in entries]
        dirs = [d for _, d in resolved if d is not None]
        for needed in cuda_needed:
            if is_driver_library(needed):
                continue
            provider = next(
                (p for p in packages if any(stem(lib) == stem(needed) for lib in p.libraries)), None
            )
            if provider is None:
                shipped = [d for d in dirs if posixpath.join(d, needed) in installed]
                if shipped:
                    reached.append(f"{lib.path} -> {needed} (shipped in the wheel: {shipped[0]})")
                    continue
                elsewhere = sorted(p for p in installed if p.rsplit("/", 1)[-1] == needed)
                if elsewhere:
                    out.append(
                        _not_on_search_path(lib, needed, installed[elsewhere[0]], elsewhere[0], tag, entries)
                    )
                    continue
                out.append(
                    fail(
                        CHECK,
                        f"{lib.name} needs {needed}, which neither the wheel nor "
                        f"{'a CUDA package the wheel declares' if expectation.standalone else 'a declared CUDA package of the row'} "
                        f"({', '.join(p.name for p in packages) or 'none'}) provides"
                        + _who_ships(needed, expectation),
                        lib.path,
                        needed=needed,
                        search_path={tag: list(entries)},
                    )
                )
                continue
            if needed not in provider.libraries:
                out.append(wrong_soname(lib, needed, provider, expectation))
                continue
            want = provider.installs_to.strip("/")
            fix = origin_entry(want, origin) if origin is not None else None
            if want in dirs:
                entry = next(e for e, d in resolved if d == want)
                reached.append(f"{lib.path} -> {needed} via {entry} = {want} ({provider.name})")
                continue
            if not entries:
                message = (
                    f"{lib.name} needs {needed} from {provider.name} (installed to {want}) but has no "
                    f"RPATH/RUNPATH: it loads only where the system's loader cache happens to hold {needed}"
                )
            else:
                shown = [d if d is not None else "(not inside site-packages)" for _, d in resolved]
                message = (
                    f"{lib.name} needs {needed} from {provider.name} (installed to {want}) but its {tag} "
                    f"{list(entries)} resolves to {shown}, not {want}"
                )
            if fix is not None:
                message += f"; add {fix!r}"
            out.append(
                fail(
                    CHECK,
                    message,
                    lib.path,
                    needed=needed,
                    package=provider.name,
                    installs_to=want,
                    search_path={tag: list(entries)},
                )
            )
    if not expectation.runs(DEVICE_CODE):  # else device_code says it, beside the claim
        out += [cannot_load(lib, CHECK) for lib in contents.libraries if lib.cannot_load]
    if not out:
        if not expectation.is_cuda:
            out.append(ok(CHECK, "no library links a CUDA library and every search path is $ORIGIN-relative"))
        elif reached:
            out.append(
                ok(
                    CHECK,
                    "every CUDA library is reached through an $ORIGIN-relative search path where its package "
                    "installs it; no absolute or build-tree path anywhere",
                    reached=reached,
                )
            )
        else:
            out.append(
                ok(
                    CHECK,
                    "no library links a CUDA library dynamically; every search path is $ORIGIN-relative",
                )
            )
    return out


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "loader (RPATH/RUNPATH)", check, needs_claim=False)
