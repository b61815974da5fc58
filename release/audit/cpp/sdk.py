"""Where a wheel ships a C++ SDK, from its member names alone: an ``include`` directory with headers
directly in it, next to a ``lib`` or ``lib64`` directory. Pure.

One rule for the three that ask: :func:`release.audit.cpp.consumer.find_sdks` (the check, once the
libraries are read), the audit's early start of the check while the libraries still unpack
(:mod:`release.audit.run`), and the cache key of its findings (:mod:`release.audit.cpp.cache`).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable

from release.audit.model import Member

__all__ = ["HEADER_SUFFIXES", "lib_dirs", "sdk_dirs", "sdk_headers"]

HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx")  # top-level SDK headers


def sdk_headers(members: Iterable[Member]) -> dict[str, tuple[str, ...]]:
    """The top-level headers of each ``include`` directory among ``members``: ``find_sdks``'s first half."""
    headers: dict[str, list[str]] = {}
    for member in members:
        if member.kind != "file" or not member.read or not member.name.endswith(HEADER_SUFFIXES):
            continue
        directory, name = posixpath.split(member.name)
        if posixpath.basename(directory) == "include":
            headers.setdefault(directory, []).append(name)
    return {d: tuple(sorted(names)) for d, names in sorted(headers.items())}


def lib_dirs(include_dir: str) -> tuple[str, str]:
    """Where the libraries of the SDK whose headers are in ``include_dir`` lie: its ``lib`` and ``lib64``
    siblings."""
    parent = posixpath.dirname(include_dir)
    return (posixpath.join(parent, "lib"), posixpath.join(parent, "lib64"))


def sdk_dirs(
    members: Iterable[Member], pending: Iterable[str] = ()
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Each ``include`` directory with top-level headers whose ``lib``/``lib64`` sibling holds a file
    (one of ``members``, or one of ``pending``: names still being unpacked): its headers and those
    sibling directories that hold one."""
    members = list(members)
    dirs = {posixpath.dirname(m.name) for m in members if m.kind == "file"} | {
        posixpath.dirname(n) for n in pending
    }
    out = {}
    for include_dir, headers in sdk_headers(members).items():
        present = tuple(d for d in lib_dirs(include_dir) if d in dirs)
        if present:
            out[include_dir] = (headers, present)
    return out
