"""The ``[headers]`` section of ``cuda.toml``: the CUDA toolkit's headers, as frozen values.

Read by :func:`release.resources.cuda.parse` (kept apart to hold that module under its size): which pip
package installs each toolkit header (``[[headers.toolkit]]``, first match wins), the CUDA driver API's
headers (``driver``) and the system libraries CUDA's interop headers need (``[[headers.system]]``).
:func:`release.audit.cpp.cuda_headers.toolkit_package` and :func:`~release.audit.cpp.cuda_headers.lacking_system_headers`
ask them through :func:`release.resources.cuda.cuda`. Anything wrong is refused through the ``fail``
the caller passes (``cuda.py``'s ``_fail``: a :class:`~release.resources.cuda.ResourceError` naming the
key), so this module needs nothing of ``cuda.py``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

from packaging.utils import InvalidName, canonicalize_name

__all__ = ["CudaHeaderFacts", "SystemLibrary", "parse_headers"]

Fail = Callable[[str, str], Exception]  # (where, message) -> the error to raise

_SECTION_KEYS = {"toolkit", "driver", "system"}
_TOOLKIT_KEYS = {"package", "patterns"}
_SYSTEM_KEYS = {"pattern", "header", "title", "needed_by"}


@dataclass(frozen=True)
class SystemLibrary:
    """A system library CUDA's interop headers need (OpenGL for ``cudaGL.h``)."""

    pattern: str  # fnmatch pattern of an include of one of its headers ("GL/*")
    header: str  # the header that must be found for it to count as installed ("GL/gl.h")
    title: str  # in words: "OpenGL's headers (GL/gl.h; Debian: libgl-dev)"
    needed_by: tuple[str, ...]  # the CUDA headers that need it ("cudaGL.h", "cuda_gl_interop.h", ...)


@dataclass(frozen=True)
class CudaHeaderFacts:
    toolkit: tuple[tuple[str, tuple[str, ...]], ...]  # (package, patterns) in order: first match wins
    driver: frozenset[str]  # the CUDA driver API's headers (libcuda.so.1's functions)
    system: tuple[SystemLibrary, ...]


def parse_headers(raw: object, fail: Fail) -> CudaHeaderFacts:
    """``[headers]`` validated and frozen; ``fail(where, message)`` for anything wrong (by its key)."""
    if not isinstance(raw, dict):
        raise fail("headers", "no [headers] table (driver, [[headers.toolkit]], [[headers.system]])")
    unknown = set(raw) - _SECTION_KEYS
    if unknown:
        raise fail("headers", f"unknown keys {sorted(unknown)}; allowed: {sorted(_SECTION_KEYS)}")
    missing = sorted(_SECTION_KEYS - set(raw))
    if missing:
        raise fail(f"headers.{missing[0]}", "missing")
    toolkit = _toolkit(raw["toolkit"], fail)
    driver = _names(raw["driver"], "headers.driver", fail)
    for name in driver:
        if not any(fnmatch.fnmatchcase(name, p) for _, patterns in toolkit for p in patterns):
            raise fail(
                "headers.driver",
                f"{name!r} is not a toolkit header: no [[headers.toolkit]] pattern matches it",
            )
    return CudaHeaderFacts(toolkit, frozenset(driver), _system(raw["system"], fail))


def _entries(raw: object, where: str, keys: set[str], fail: Fail) -> list[dict[str, object]]:
    """A non-empty array of tables ``[[where]]``, each with exactly ``keys``."""
    if not isinstance(raw, list) or not raw:
        raise fail(where, f"must be a non-empty array of tables [[{where}]]")
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict):
            raise fail(f"{where}[{index}]", f"must be a table with {sorted(keys)}")
        if set(entry) - keys:
            raise fail(
                f"{where}[{index}]", f"unknown keys {sorted(set(entry) - keys)}; allowed: {sorted(keys)}"
            )
        missing = sorted(keys - set(entry))
        if missing:
            raise fail(f"{where}[{index}].{missing[0]}", "missing")
    return raw


def _toolkit(raw: object, fail: Fail) -> tuple[tuple[str, tuple[str, ...]], ...]:
    out: list[tuple[str, tuple[str, ...]]] = []
    seen: dict[str, str] = {}  # pattern -> where it was first given
    for index, entry in enumerate(_entries(raw, "headers.toolkit", _TOOLKIT_KEYS, fail)):
        where = f"headers.toolkit[{index}]"
        package = _package(entry["package"], f"{where}.package", fail)
        if any(package == p for p, _ in out):
            raise fail(f"{where}.package", f"{package!r} has an entry already: add its patterns there")
        patterns = _names(entry["patterns"], f"{where}.patterns", fail)
        for pattern in patterns:
            if pattern in seen:
                raise fail(f"{where}.patterns", f"{pattern!r} is given already in {seen[pattern]}")
            seen[pattern] = f"{where}.patterns"
        out.append((package, patterns))
    return tuple(out)


def _system(raw: object, fail: Fail) -> tuple[SystemLibrary, ...]:
    out: list[SystemLibrary] = []
    for index, entry in enumerate(_entries(raw, "headers.system", _SYSTEM_KEYS, fail)):
        where = f"headers.system[{index}]"
        pattern = _name(entry["pattern"], f"{where}.pattern", fail)
        header = _name(entry["header"], f"{where}.header", fail)
        if not fnmatch.fnmatchcase(header, pattern):
            raise fail(f"{where}.header", f"{header!r} does not match its pattern {pattern!r}")
        title = entry["title"]
        if not isinstance(title, str) or not title.strip():
            raise fail(f"{where}.title", f"must be a non-empty string, not {title!r}")
        needed_by = _names(entry["needed_by"], f"{where}.needed_by", fail)
        out.append(SystemLibrary(pattern, header, title, needed_by))
    return tuple(out)


def _package(value: object, where: str, fail: Fail) -> str:
    """A pip distribution's canonical name (``nvidia-cuda-runtime``), as ``canonicalize_name`` writes it."""
    if not isinstance(value, str):
        raise fail(where, f"must be a distribution name, not {value!r}")
    try:
        canonical = canonicalize_name(value, validate=True)
    except InvalidName:
        raise fail(where, f"{value!r} is not a valid distribution name (PEP 508)") from None
    if canonical != value:
        raise fail(where, f"{value!r}: write the canonical name {canonical!r}")
    return value


def _names(value: object, where: str, fail: Fail) -> tuple[str, ...]:
    """A non-empty list of distinct header names or patterns."""
    if not isinstance(value, list) or not value:
        raise fail(where, f"must be a non-empty list of header names or patterns, not {value!r}")
    names = tuple(_name(v, where, fail) for v in value)
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise fail(where, f"{twice} listed twice")
    return names


def _name(value: object, where: str, fail: Fail) -> str:
    """An include's target or a pattern of one: relative, no ``..``, no blanks (``crt/*``, ``cuda.h``)."""
    if not isinstance(value, str) or not value:
        raise fail(where, f"must be a non-empty string, not {value!r}")
    if value.startswith("/") or ".." in value.split("/") or any(c.isspace() or c == "\\" for c in value):
        raise fail(where, f"{value!r} is not an include's target like 'cuda.h' or 'crt/*'")
    return value
