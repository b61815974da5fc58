"""The wheel's RUNPATH rule, once: where a library of a wheel installs, where its ``$ORIGIN`` entries
point, and the entry that reaches a folder. Pure: strings in, strings out; imports no stage.

The build's CUDA repair (:mod:`release.wheelbuild.repair.contract`) writes RUNPATHs by it and the audit's
loader check (:mod:`release.audit.checks.loader`, with ``hygiene``) judges them by it, so the
repair's output passes the audit by construction (tests/unit/test_runpath.py holds that for every
wheel shape: a library at the top of the package, two folders deep, in a ``.libs`` folder, at the
site-packages root, in ``.data/platlib``). tests/unit/test_runpath.py also fails when a second
resolver of ``$ORIGIN`` appears in release/.

Paths are relative to site-packages, the root of the installed layout (``""`` is the root itself).
An ``$ORIGIN`` entry that climbs out of site-packages reaches nothing a wheel installs: it resolves
to None (the loader check does not count it; it is ``$ORIGIN``-relative, so neither the check nor
the repair takes it for the build machine's path, and the repair keeps it as the wheel wrote it).
The runtime expansion of ``$ORIGIN`` into a real directory, for resolving libraries on disk, is
the loader's emulation in :mod:`release.binary.ldd`, not this rule.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence

__all__ = ["climbs_out", "installed_dir", "is_origin_entry", "origin_entry", "resolve", "runpath_for"]

_ORIGIN = re.compile(r"^\$(ORIGIN|\{ORIGIN\})(?=/|$)")


def is_origin_entry(entry: str) -> bool:
    """``$ORIGIN``, ``${ORIGIN}``, or either followed by ``/...``: relative to the library's folder."""
    return _ORIGIN.match(entry) is not None


def installed_dir(path: str) -> str | None:
    """The site-packages-relative directory a wheel member installs into; None outside site-packages
    (``*.data/scripts``, ``*.data/headers``, ``*.data/data``)."""
    parts = path.split("/")
    if parts[0].endswith(".data"):
        if len(parts) > 2 and parts[1] in ("purelib", "platlib"):
            return posixpath.dirname("/".join(parts[2:]))
        return None
    return posixpath.dirname(path)


def _joined(entry: str, origin: str) -> str | None:
    m = _ORIGIN.match(entry)
    if m is None:
        return None
    rest = entry[m.end() :].lstrip("/")
    return posixpath.normpath(posixpath.join(origin, rest)) if rest else (origin or ".")


def climbs_out(entry: str, origin: str) -> bool:
    """An ``$ORIGIN`` entry of a file installed in ``origin`` that points above site-packages."""
    joined = _joined(entry, origin)
    return joined is not None and (joined == ".." or joined.startswith("../"))


def resolve(entry: str, origin: str | None) -> str | None:
    """An ``$ORIGIN`` search path entry as a site-packages-relative directory, else None (another
    kind of entry, a file outside site-packages, or an entry that climbs out of it)."""
    if origin is None:
        return None
    joined = _joined(entry, origin)
    if joined is None or climbs_out(entry, origin):
        return None
    return "" if joined == "." else joined


def origin_entry(target: str, origin: str) -> str:
    """The ``$ORIGIN`` entry that reaches ``target`` from a file installed in ``origin`` (both
    site-packages-relative, ``""`` the root): ``$ORIGIN`` for its own folder, never ``$ORIGIN/.``."""
    rel = posixpath.relpath(posixpath.normpath(target or "."), posixpath.normpath(origin or "."))
    return "$ORIGIN" if rel == "." else f"$ORIGIN/{rel}"


def runpath_for(current: Sequence[str], origin: str, targets: Sequence[str]) -> tuple[str, ...] | None:
    """The RUNPATH a library installed in ``origin`` needs to reach each of ``targets`` (the folders
    its CUDA libraries' packages install to), starting from its search path ``current``: its
    ``$ORIGIN`` entries kept in order, any other entry (absolute, relative, empty) dropped, an entry
    added for each target not reached yet. None: ``current`` already reaches every target and holds
    only ``$ORIGIN`` entries (the library is left alone)."""
    reached = {resolve(e, origin) for e in current}
    missing = [t for t in dict.fromkeys(targets) if posixpath.normpath(t) not in reached]
    kept = [e for e in current if is_origin_entry(e)]
    if not missing and len(kept) == len(current):
        return None
    return (*kept, *(origin_entry(t, origin) for t in missing))
