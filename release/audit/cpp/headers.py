"""The C++ consumer check's reading of an SDK's headers, from their text, before anything runs
(:mod:`release.audit.cpp.consumer` steps 0 and 1): the headers a program can reach through their
includes (:func:`reachable`, :func:`materialize`), the includes that escape the SDK
(:func:`escaping_includes`), and which top-level headers the consumer program leaves out, each named
in the finding:

- device headers: CUDA code written for nvcc (cuRAND's ``curand_kernel.h``), read from the CUDA
  qualifiers they use (:func:`device_headers`); a host C++ program cannot use them;
- internal headers: their own ``#warning`` or ``#error`` says they are internal or not to be included
  directly (the CUDA runtime's ``math_functions.h``, ``cuda_fp16.hpp``; :func:`internal_headers`);
- headers that need a system library's headers this machine lacks (VDPAU, OpenGL, EGL: what CUDA's
  interop headers include; :func:`release.audit.cpp.cuda_headers.lacking_system_headers`): not checkable here.

"As a host compiler reads it": comments dropped, and the branches it surely skips (``#if 0``, or those
needing nvcc's ``__CUDACC__``/``__CUDA_ARCH__``) left out, so a header that hides its device code from
host compilers (``cooperative_groups.h``) is a host header. Pure functions over the headers' bytes, but
:func:`reachable` (reads the wheel's members) and :func:`materialize` (writes the program's headers).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.audit.model import Member

__all__ = [
    "closure",
    "device_headers",
    "escaping_includes",
    "includes",
    "internal_headers",
    "materialize",
    "reachable",
]

_INCLUDE = re.compile(
    rb'^[ \t]*#[ \t]*(?:include|include_next|import)[ \t]*([<"])([^>"\n]+)[>"]'
    rb'|__has_include(?:_next)?[ \t]*\([ \t]*([<"])([^>"\n]+)[>"]'
    rb'|^[ \t]*#[ \t]*pragma[ \t]+GCC[ \t]+dependency[ \t]+(["<])([^>"\n]+)[>"]',
    re.M,
)
_COMPUTED = re.compile(rb"^[ \t]*#[ \t]*include[ \t]+[A-Za-z_]", re.M)


_HINTS = (b"include", b"import", b"dependency")  # every form of _INCLUDE names one on its line


def _hinted_lines(text: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of each line naming a hint word, in order: ``bytes.find`` per word (memchr
    speed, GB/s) where one regex alternation tested every byte (torch's and cuRAND's big headers)."""
    starts: set[int] = set()
    for word in _HINTS:
        at = text.find(word)
        while at != -1:
            start = text.rfind(b"\n", 0, at) + 1
            end = text.find(b"\n", at)
            starts.add(start)
            if end == -1:
                break
            at = text.find(word, end + 1)
    out = []
    for start in sorted(starts):
        end = text.find(b"\n", start)
        out.append((start, len(text) if end == -1 else end))
    return out


def _computed(text: bytes) -> bool:
    """Whether a line is a computed ``#include MACRO`` (``_COMPUTED``), tried only on lines naming
    ``include``: the regex over a whole header tested every line start (cuRAND: 11 ms to 1 ms)."""
    at = text.find(b"include")
    while at != -1:
        if _COMPUTED.match(text, text.rfind(b"\n", 0, at) + 1):
            return True
        end = text.find(b"\n", at)
        if end == -1:
            return False
        at = text.find(b"include", end + 1)
    return False


def includes(text: bytes) -> list[tuple[bytes, str]]:
    """Every ``(quote, target)`` a header names in an include, ``__has_include`` or dependency pragma."""
    out = []
    for start, end in _hinted_lines(text):
        for m in _INCLUDE.finditer(text, start, end):
            quote, target = next((m[i], m[i + 1]) for i in (1, 3, 5) if m[i] is not None)
            out.append((quote, target.decode("utf-8", errors="replace").strip()))
    return out


def reachable(include_dir: str, headers: Sequence[str], files: Iterable[Member]) -> dict[str, bytes]:
    """The SDK headers a program including ``headers`` (top-level, in ``include_dir``) can reach, by path
    relative to the include directory, read from ``files`` (the wheel's members).

    The include closure is followed through ``#include`` lines (a superset: both
    branches of every ``#if``); a computed ``#include MACRO`` reaches the whole include directory.
    """
    prefix = include_dir + "/" if include_dir else ""
    members = {
        m.name[len(prefix) :]: m for m in files if m.kind == "file" and m.read and m.name.startswith(prefix)
    }
    read: dict[str, bytes] = {}

    def data(name: str) -> bytes:
        if name not in read:
            member = members[name]
            if member.data is not None:
                read[name] = member.data
            else:
                assert member.path is not None  # a member read and not kept in memory is on disk
                read[name] = member.path.read_bytes()
        return read[name]

    return {name: data(name) for name in sorted(closure(headers, members.keys(), data))}


def materialize(headers: Sequence[str], every: Mapping[str, bytes], out: Path) -> dict[str, bytes]:
    """Write the headers of ``every`` (:func:`reachable`'s) that a program including ``headers`` can
    reach into ``out``; returns them."""
    written = {name: every[name] for name in sorted(closure(headers, every.keys(), every.__getitem__))}
    for name, text in written.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(text)
    return written


def closure(headers: Sequence[str], names: Collection[str], data: Callable[[str], bytes]) -> set[str]:
    """The names among ``names`` that ``headers`` reach through their includes (``data``: a name's text)."""
    todo = list(headers)
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in names:
            continue
        seen.add(name)
        text = data(name)
        if _computed(text):
            return set(names)
        here = posixpath.dirname(name)
        for quote, rel in includes(text):
            candidates = ([posixpath.normpath(posixpath.join(here, rel))] if quote == b'"' else []) + [
                posixpath.normpath(rel)
            ]
            todo += [c for c in candidates if c in names and c not in seen]
    return seen


def escaping_includes(files: Mapping[str, bytes]) -> list[tuple[str, str, str]]:
    """``(header, target, why)`` for each include that may reach outside the SDK's headers and the
    system's: an absolute path, or ``..`` that does not land on a header of the SDK. Pure."""
    out = []
    for header, text in sorted(files.items()):
        here = posixpath.dirname(header)
        for quote, target in includes(text):
            if target.startswith("/"):
                out.append((header, target, "an absolute path"))
                continue
            if ".." not in target.split("/"):
                continue
            if quote == b'"' and posixpath.normpath(posixpath.join(here, target)) in files:
                continue  # relative to the including header, onto a header of the SDK
            if posixpath.normpath(target).split("/")[0] == "..":
                out.append((header, target, "a path climbing out of the include directories with '..'"))
    return out


# CUDA execution-space and memory-space qualifiers. A header is a device header when the text a host
# compiler reads uses one only device code can: __global__, __shared__, __constant__, __managed__, or
# __device__ without __host__ in the same declaration (a __host__ __device__ function is host code too:
# cuda_runtime.h's occupancy helpers, cuComplex.h, dim3's constructors).
_DEVICE_ONLY = frozenset({b"__global__", b"__shared__", b"__constant__", b"__managed__"})
_QUALIFIERS = _DEVICE_ONLY | {b"__device__", b"__host__"}
_NVCC = frozenset({b"__CUDACC__", b"__CUDA_ARCH__", b"__CUDACC_RTC__", b"__NVCC__", b"_NVHPC_CUDA"})
_STRIP = re.compile(  # comments (unrolled: linear; one left open runs to the end), then literals
    rb'/\*[^*]*\*+(?:[^/*][^*]*\*+)*/|/\*.*|//[^\n]*|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S
)
_MESSAGE = re.compile(
    rb"#[ \t]*(?:warning|error)\b([^\n]*)"
)  # a #warning's or #error's text: "#" first, fast
# Bounds on what a hostile header can make the reading cost (each errs toward compiling more, never less):
# macro names standing for a qualifier, rounds of reading the files that name them, the depth of a macro's
# expansion, the uses of qualifiers examined in a header, and the bytes either side of one.
MAX_MACROS, MAX_ROUNDS, MAX_DEPTH, MAX_USES, WINDOW = 2000, 8, 64, 2000, 512
_DIRECTIVE = re.compile(rb"^[ \t]*#[ \t]*(\w+)[ \t]*(.*)$", re.M)
_DEFINE = re.compile(rb"^(\w+)(?:\([^)]*\))?(.*)$", re.S)
_IDENT = re.compile(rb"[A-Za-z_]\w*")
_COND = re.compile(rb"defined|[A-Za-z_]\w*|\d\w*|&&|\|\||[=!<>]=|[()!<>]|\S")
_STOP_BEFORE = b";{}"  # a declaration starts after one of these ...
_STOP_AFTER = re.compile(rb"[;{}(=]")  # ... and its specifiers end at one of these


@dataclass(frozen=True)
class _Host:
    """A header as a host compiler reads it: code outside the branches it surely skips (``#if 0``, or
    ``__CUDACC__``/``__CUDA_ARCH__`` required), comments and literals blanked; its ``#define``s and the
    texts of its ``#warning`` and ``#error`` directives there."""

    code: bytes
    defines: tuple[tuple[bytes, frozenset[bytes]], ...]  # (name, identifiers of the body)
    messages: tuple[bytes, ...]


def _condition(expr: bytes) -> bool | None:
    """An ``#if`` expression as a host compiler sees it: nvcc's macros are undefined, others unknown."""
    tokens = _COND.findall(expr)
    pos = 0

    def peek() -> bytes:
        return tokens[pos] if pos < len(tokens) else b""

    def take() -> bytes:
        nonlocal pos
        pos += 1
        return tokens[pos - 1] if pos <= len(tokens) else b""

    def atom() -> bool | int | None:
        tok = take()
        if tok == b"!":
            value = atom()
            return None if value is None else not value
        if tok == b"(":
            value = either()
            return value if take() == b")" else None
        if tok == b"defined":
            name = take()
            if name == b"(":
                name, _ = take(), take()
            return False if name in _NVCC else None
        if tok[:1].isdigit():
            digits = tok.rstrip(b"uUlL")
            return int(digits, 0) if digits.isdigit() or digits.lower().startswith(b"0x") else None
        return 0 if tok in _NVCC else None

    def compare() -> bool | int | None:
        left = atom()
        while peek() in (b"==", b"!=", b">=", b"<=", b">", b"<"):
            op, right = take(), atom()
            if left is None or right is None:
                left = None
                continue
            a, b = int(left), int(right)
            left = {b"==": a == b, b"!=": a != b, b">=": a >= b, b"<=": a <= b, b">": a > b, b"<": a < b}[op]
        return left

    def both() -> bool | None:
        values = [compare()]
        while peek() == b"&&":
            take()
            values.append(compare())
        if any(v is not None and not v for v in values):
            return False
        return True if all(v is not None for v in values) else None

    def either() -> bool | None:
        values = [both()]
        while peek() == b"||":
            take()
            values.append(both())
        if any(values):
            return True
        return False if all(v is not None for v in values) else None

    try:
        value = either()
    except (ValueError, KeyError, RecursionError):
        return None
    return value if pos == len(tokens) else None


def _blank(m: re.Match[bytes]) -> bytes:
    """A comment as one space (its line breaks kept); a literal as ``""``, but on a directive's line."""
    if m[0][:1] == b"/":
        return b" " + b"\n" * m[0].count(b"\n")
    line = m.string[m.string.rfind(b"\n", 0, m.start()) + 1 : m.start()]
    return m[0] if line.lstrip().startswith(b"#") else b'""'


def _host_view(text: bytes) -> _Host:
    text = _STRIP.sub(_blank, text.replace(b"\\\n", b""))
    code: list[bytes] = []
    defines: list[tuple[bytes, frozenset[bytes]]] = []
    messages: list[bytes] = []
    stack: list[list[bool]] = []  # per #if group: [this branch skipped, an earlier branch surely taken]
    at = 0
    for m in _DIRECTIVE.finditer(text):
        skipped = any(frame[0] for frame in stack)
        if not skipped:
            code.append(text[at : m.start()])
        at = m.end()
        word, rest = m[1], m[2]
        if word in (b"if", b"ifdef", b"ifndef"):
            name = rest.split()[0] if rest.split() else b""
            value = _condition(rest) if word == b"if" else (False if name in _NVCC else None)
            value = (None if value is None else not value) if word == b"ifndef" else value
            stack.append([value is False, value is True])
        elif word == b"elif" and stack:
            value = _condition(rest)
            stack[-1] = [stack[-1][1] or value is False, stack[-1][1] or value is True]
        elif word == b"else" and stack:
            stack[-1] = [stack[-1][1], True]
        elif word == b"endif" and stack:
            stack.pop()
        elif word == b"define" and not skipped and (d := _DEFINE.match(rest)) is not None:
            defines.append((d[1], frozenset(_IDENT.findall(d[2]))))
        elif word in (b"warning", b"error") and not skipped:
            messages.append(rest.strip())
    if not any(frame[0] for frame in stack):
        code.append(text[at:])
    return _Host(b"\n".join(code), tuple(defines), tuple(messages))


def device_headers(files: Mapping[str, bytes], headers: Sequence[str]) -> dict[str, str]:
    """The ``headers`` (top-level, among ``files``: an SDK's reachable headers by relative path) that are
    CUDA device headers, each with the qualifier that makes it one (``__device__``, or ``QUALIFIERS (a
    macro for __device__)``). Macros come from every file naming a qualifier or such a macro, read as a
    host compiler would. Pure."""
    views: dict[str, _Host] = {}
    bodies: dict[bytes, list[frozenset[bytes]]] = {}
    users: dict[bytes, set[bytes]] = {}  # an identifier: the macros whose bodies name it
    names, new = set(_QUALIFIERS), set(_QUALIFIERS)
    idents: dict[str, set[bytes]] = {}  # a file's identifiers, once many names are looked for
    for _ in range(MAX_ROUNDS):  # read the files naming a qualifier, or a macro found so far to stand for one
        for f, text in files.items():
            if f in views:
                continue
            if len(new) > 16 and f not in idents:
                idents[f] = set(_IDENT.findall(text))
            if (new & idents[f]) if f in idents else any(n in text for n in new):
                views[f] = _host_view(text)
                for name, body in views[f].defines:
                    bodies.setdefault(name, []).append(body)
                    for ident in body:
                        users.setdefault(ident, set()).add(name)
        todo, new = list(names), set()
        while todo and len(names) < MAX_MACROS:
            for user in users.get(todo.pop(), ()):
                if user not in names:
                    names.add(user)
                    new.add(user)
                    todo.append(user)
        if not new:
            break
    kinds: dict[bytes, frozenset[bytes]] = {}
    device = [n for n in names if _expand(n, bodies, kinds) & (_DEVICE_ONLY | {b"__device__"})]
    pattern = re.compile(rb"\b(?:" + b"|".join(map(re.escape, sorted(device))) + rb")\b")
    out = {}
    for header in headers:
        if header in views and pattern.search(files[header]) is not None:
            use = _device_use(views[header].code, pattern, bodies, kinds)
            if use is not None:
                out[header] = use
    return out


def _expand(
    name: bytes,
    bodies: Mapping[bytes, list[frozenset[bytes]]],
    kinds: dict[bytes, frozenset[bytes]],
    depth: int = 0,
) -> frozenset[bytes]:
    """The qualifiers ``name`` stands for: itself, or what every definition of the macro holds."""
    if name in _QUALIFIERS:
        return frozenset({name})
    if name not in kinds:
        kinds[name] = frozenset()  # a macro defined through itself stands for nothing more
        if depth >= MAX_DEPTH:
            return kinds.pop(name)
        each = [
            frozenset().union(*(_expand(i, bodies, kinds, depth + 1) for i in b))
            for b in bodies.get(name, [])
        ]
        kinds[name] = frozenset.intersection(*each) if each else frozenset()
    return kinds[name]


def _device_use(
    code: bytes,
    pattern: re.Pattern[bytes],
    bodies: Mapping[bytes, list[frozenset[bytes]]],
    kinds: dict[bytes, frozenset[bytes]],
) -> str | None:
    """The first qualifier (or macro for one) in ``code`` that only device code can use, in words."""
    for m, _ in zip(pattern.finditer(code), range(MAX_USES), strict=False):
        found = _expand(m[0], bodies, kinds) & (_DEVICE_ONLY | {b"__device__"})
        if not found & _DEVICE_ONLY:  # __device__: host code too when __host__ is in the same declaration
            start = max(code.rfind(bytes([c]), max(0, m.start() - WINDOW), m.start()) for c in _STOP_BEFORE)
            start = start + 1 if start >= 0 else max(0, m.start() - WINDOW)
            stop = _STOP_AFTER.search(code, m.end(), m.end() + WINDOW)
            window = code[start : stop.start() if stop is not None else m.end() + WINDOW]
            if any(b"__host__" in _expand(i, bodies, kinds) for i in _IDENT.findall(window)):
                continue
        what = "/".join(sorted(k.decode() for k in found))
        return m[0].decode() if m[0] in _QUALIFIERS else f"{m[0].decode()} (a macro for {what})"
    return None


def internal_headers(files: Mapping[str, bytes], headers: Sequence[str]) -> dict[str, str]:
    """The ``headers`` whose own ``#warning`` or ``#error``, where a host compiler reads it, says the header
    is internal or not to be included directly; each with that message. Pure."""
    out = {}
    for header in headers:
        text = files.get(header, b"")
        if not any(_says_internal(m[1]) for m in _MESSAGE.finditer(text)):
            continue
        said = next((m for m in _host_view(text).messages if _says_internal(m)), None)
        if said is not None:
            out[header] = said.decode("utf-8", errors="replace")[:200]
    return out


def _says_internal(message: bytes) -> bool:
    """Whether a #warning's or #error's text says its header is internal or not to be included directly."""
    text = message[:512].lower()
    at = text.find(b"internal")
    return (at >= 0 and b"header" in text[at:]) or b"directly" in text
