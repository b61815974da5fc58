"""The C++ consumer check's tools: gcc and g++ run sandboxed on an SDK's headers, and their output read.

Split from :mod:`release.audit.cpp.consumer` (which decides what to compile and what it means) and
:mod:`release.audit.cpp.headers` (the headers read from their text): the compiler's include directories,
the files its preprocessor opened, the functions C's parser lists (``gcc -x c -fsyntax-only -aux-info``),
the C++ pass (``g++ -fsyntax-only -H`` of a program that includes the headers and redeclares each of those
functions with C linkage) and its errors read back, and the compiler's messages cut to those about the
wheel's own files. The link: :mod:`release.audit.cpp.link`. The CUDA headers a consumer compiles with:
:mod:`release.audit.cpp.cuda_headers`.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.audit.model import Library
from release.core import proc
from release.core.sandbox import Ran, Sandbox, run_limited
from release.core.sizes import GIB, MIB

__all__ = [
    "LINK",
    "PREPROCESS",
    "QUIET",
    "SYNTAX",
    "Checks",
    "Compiled",
    "Listed",
    "Sdk",
    "check_errors",
    "compile_consumer",
    "declared_functions",
    "declares_something",
    "error_directives",
    "messages",
    "missing_header",
    "outside_files",
    "repeatable",
    "search_list",
    "system_include_dirs",
]

_AUX_LINE = re.compile(r"^/\* (?P<file>.+):(?P<line>\d+):(?P<flags>[A-Z]{2}) \*/ (?P<decl>.*)$")
_NAME = re.compile(r"([A-Za-z_]\w*) \(")
_C_KEYWORDS = frozenset(
    {"void", "int", "char", "long", "short", "float", "double", "unsigned", "signed", "const"}
)
# Diagnostics as plain lines: no source line quoted (it could be a file of the auditing machine).
QUIET = ["-fdiagnostics-plain-output", "-fno-diagnostics-show-caret", "-fdiagnostics-color=never"]
PREPROCESS = Sandbox(cpu_seconds=120, memory_bytes=2 * GIB, file_bytes=1 * GIB, output_chars=16 * MIB)
# The C++ pass: a compile's CPU and memory (it parses and checks all a compile did, less the code), the
# preprocessor's output and file bounds (its -H list is read back whole; it may keep the preprocessed program).
SYNTAX = Sandbox(cpu_seconds=300, memory_bytes=4 * GIB, file_bytes=1 * GIB, output_chars=16 * MIB)
LINK = Sandbox(cpu_seconds=300, memory_bytes=8 * GIB, file_bytes=1 * GIB)
MESSAGE_LINES = 12
AUX_BYTES = 64 * MIB  # the declarations gcc lists (system headers' included) read back


@dataclass(frozen=True)
class Sdk:
    include_dir: str  # wheel-relative, e.g. "tinyaxpy/include"
    headers: tuple[str, ...]  # file names directly in include_dir
    libraries: tuple[Library, ...]


@functools.cache
def system_include_dirs(compiler: str, language: str) -> tuple[str, ...]:
    """The compiler's own include directories (``-v``), in the sandbox's clean environment."""
    with tempfile.TemporaryDirectory(prefix="wheelwright-cpp-") as scratch:
        empty = Path(scratch) / f"empty.{'c' if language == 'c' else 'cpp'}"
        empty.write_text("", encoding="utf-8")
        ran = run_limited(
            [compiler, "-x", language, "-E", "-v", empty], cwd=Path(scratch), sandbox=PREPROCESS
        )
    return search_list(ran.stderr)


def search_list(stderr: str) -> tuple[str, ...]:
    """The ``#include <...>`` search list a compiler run with ``-v`` printed (its first: printed before it
    reads any source, so no header's text comes before it); () when there is none."""
    lines = stderr.splitlines()
    try:
        start = lines.index("#include <...> search starts here:") + 1
        end = lines.index("End of search list.", start)
    except ValueError:
        return ()
    return tuple(os.path.normpath(line.strip()) for line in lines[start:end])


_GUARDS = "Multiple include guards may be useful for:"
_MISSING = re.compile(r"^([^\n:]+):\d+:(?:\d+:)? fatal error: ([^\n:]+): No such file or directory$", re.M)


def missing_header(stderr: str) -> tuple[str, str] | None:
    """``(header, the file including it)`` of the compiler's first "No such file or directory"."""
    m = _MISSING.search(stderr)
    return (m[2].strip(), m[1].strip()) if m is not None else None


def outside_files(stderr: str, allowed: tuple[str, ...], cwd: Path) -> list[str]:
    """Files the preprocessor opened (its ``-H`` lines) that lie outside every ``allowed`` directory."""
    roots = {os.path.normpath(a) for a in allowed} | {os.path.realpath(a) for a in allowed}
    out = []
    for line in stderr.splitlines():
        m = re.match(r"^\.+ (.+)$", line)
        if m is None:
            continue
        path = os.path.join(cwd, m[1])
        candidates = (os.path.normpath(path), os.path.realpath(path))
        if not any(c.startswith(root + os.sep) for c in candidates for root in roots):
            out.append(m[1])
    return out


def repeatable(ran: Ran) -> dict[str, bool]:
    """``repeatable``: a failure the compiler or linker gave by its exit code, not a limit it hit (its own
    "out of memory", or a crash under the memory limit, is one), so the same inputs fail the same way
    (:mod:`release.audit.cpp.cache` keeps only those)."""
    limit = r"out of memory|memory exhausted|Cannot allocate memory|internal compiler error|signal terminated"
    hit = re.search(limit, ran.stderr) is not None
    return {"repeatable": True} if ran.returncode > 0 and not ran.timed_out and not hit else {}


def messages(text: str, sdk: Sdk, root: Path, scratch: Path, lines: int = MESSAGE_LINES) -> str:
    """The compiler's or linker's messages about the wheel's own files, with paths made wheel-relative;
    every other line (a system header, a file of the auditing machine) is counted, never shown."""
    include = str(scratch / "include") + "/"
    text = text.replace(include, f"{sdk.include_dir}/" if sdk.include_dir else "")
    text = text.replace(str(root) + "/", "").replace(str(scratch) + "/", "")
    own = (
        f"{sdk.include_dir}/",
        "consumer",  # the programs' sources and objects (consumer.cpp, consumer_2.o)
        "probe.c",
        *(lib.path for lib in sdk.libraries),
    )
    kept: list[str] = []
    dropped = 0
    listing = False  # in -H's closing list of files (before the compiler's messages when -save-temps)
    for raw in text.splitlines():
        line = re.sub(r"^\S*/(ld|collect2)(:|\.\S*:)", r"\1:", raw.strip())
        listing = line == _GUARDS or (listing and re.search(r":\d+[:,]|: ", line) is None)
        if not line or listing or re.match(r"^\.+ ", line):  # blank, -H's list or a -H line (a file opened)
            continue
        body = re.sub(r"^(In file included from|from|ld:|collect2:)\s*", "", line)
        located = re.match(r"^([^\s:]+):", body)
        if (located is not None and located[1].startswith(own)) or body.startswith("error: ld returned"):
            kept.append(line[:300])
        else:
            dropped += 1
    shown = kept[:lines]
    hidden = dropped + len(kept) - len(shown)
    if hidden:
        shown.append(
            f"({hidden} other line{'s' if hidden != 1 else ''} not shown: only messages about the wheel's own files are)"
        )
    return "\n".join(shown)


def declares_something(preprocessed: Path, include: Path) -> bool:
    """Whether the preprocessed program holds any line that comes from the SDK's own headers."""
    prefix = str(include) + "/"
    current = ""
    with preprocessed.open(encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r'^# \d+ "(.*)"', line)
            if m is not None:
                current = m[1]
            elif line.strip() and not line.startswith("#") and current.startswith(prefix):
                return True
    return False


@dataclass(frozen=True)
class Listed:
    """What C's parser listed: each function with its pointer type as C declares it (``int (*)(int *)``),
    the files outside that its preprocessor opened (then no function) and its last run."""

    functions: dict[str, str]
    outside: list[str]
    ran: Ran
    unread: tuple[str, ...] = ()  # top-level headers C's parser could not read (C++ only): not listed
    why: str = ""  # C's first error in them, without paths ("cusparseLt.h: expected ... before 'alignas'")


def declared_functions(
    headers: tuple[str, ...],
    include: Path,
    scratch: Path,
    cuda_dirs: tuple[str, ...] = (),
    skip: Collection[str] = (),
    gcc: str | None = None,
) -> Listed:
    """Functions declared (not defined) by the SDK's own headers that parse as C (those that do not, once
    told from C's errors, are left out), but those of the headers in ``skip`` (device headers, the CUDA
    driver's: by path relative to ``include``); and the files outside the SDK, ``cuda_dirs`` and the
    system headers that C's preprocessor opened (then none). ``gcc``: the C compiler of the wheel's
    architecture (:mod:`release.audit.cpp.target`; this machine's ``gcc`` by default)."""
    probe = scratch / "probe.c"
    aux = scratch / "declarations.txt"
    gcc = gcc or proc.which("gcc")
    # -v: the run prints its own search list (the system's include directories), so no probe runs for C.
    # -include stdalign.h: C11's alignas/alignof, which headers written for C++ use bare (cuSPARSELt's
    # handles: "alignas(16) uint8_t data[512]"), so their C functions are listed too.
    argv = [gcc, "-x", "c", "-fsyntax-only", "-v", "-H", *QUIET, f"-aux-info={aux}", f"-I{include}"]
    argv += ["-include", "stdalign.h"]
    every, unread, why = headers, [], ""
    for _ in range(2):  # once more without the headers that are not C (C++ only: included, not listed)
        probe.write_text("".join(f'#include "{h}"\n' for h in headers), encoding="utf-8")
        result = run_limited([*argv, *_isystem(cuda_dirs), probe], cwd=scratch, sandbox=PREPROCESS)
        allowed = (str(include), *cuda_dirs, *search_list(result.stderr))
        outside = outside_files(result.stderr, allowed, scratch)
        blamed = _blamed(result.stderr, headers, "probe.c", 1)
        not_c = {top for top, _, _ in blamed}
        if not outside and blamed and not why:
            why = f"{blamed[0][0]}: {blamed[0][2]}"[:200]
        unread += [h for h in headers if h in not_c]
        if outside or result.ok or not not_c or not_c >= set(headers):
            break
        headers = tuple(h for h in headers if h not in not_c)
    if outside or not result.ok or not aux.is_file():
        left = tuple(every) if not outside and not result.ok else ()
        return Listed({}, outside, result, left, why if left else "")
    names: dict[str, str] = {}
    prefix = str(include.resolve()) + "/"
    skipped = {prefix + s for s in skip}
    with aux.open("rb") as f:
        text = f.read(AUX_BYTES).decode("utf-8", errors="replace")
    for line in text.splitlines():
        m = _AUX_LINE.match(line)
        if m is None or m["flags"][1] != "C" or m["decl"].startswith("static"):
            continue
        file = str(Path(m["file"]).resolve())
        if not file.startswith(prefix) or file in skipped:
            continue
        found = [n for n in _NAME.findall(m["decl"]) if n not in _C_KEYWORDS]
        if found and found[0] not in names:
            head, _, params = m["decl"].removeprefix("extern ").partition(f"{found[0]} (")
            names[found[0]] = f"{head.strip()} (*)({params.rstrip().removesuffix(';')}"
    return Listed(names, [], result, tuple(dict.fromkeys(unread)), why if unread else "")


# Helpers of the C++ program for a name C++ overloads: ``wheelwright_c<T>::pick(&f, 0)`` is the overload of
# C type ``T`` (noexcept or not, as declared), ``wheelwright_fn<P>::type`` its function type, to redeclare.
_PICK = (
    "template <class T> struct wheelwright_c;\n"
    "template <class R, class... A> struct wheelwright_c<R (*)(A...)> {\n"
    "    typedef R f(A...); typedef R g(A...) noexcept; static g *pick(g *, int); static f *pick(f *, long);\n"
    "};\n"
    "template <class R, class... A> struct wheelwright_c<R (*)(A..., ...)> {\n"
    "    typedef R f(A..., ...); typedef R g(A..., ...) noexcept;\n"
    "    static g *pick(g *, int); static f *pick(f *, long);\n"
    "};\n"
    "template <class T> struct wheelwright_fn;\n"
    "template <class F> struct wheelwright_fn<F *> { typedef F type; };\n"
)
# ``wheelwright_plain<decltype(f)>::type``: f's function type built anew from its parts. g++ (12) keeps a
# declaration's default arguments in ``decltype(f)``, so ``extern "C" decltype(f) f;`` is refused as "default
# argument given for parameter 3" for every function declared with one (the CUDA runtime's
# cudaStreamWaitEvent(..., unsigned int flags = 0)); the type rebuilt from ``R(A...)`` carries none.
_PLAIN = (
    "template <class T> struct wheelwright_plain;\n"
    "template <class R, class... A> struct wheelwright_plain<R(A...)> { typedef R type(A...); };\n"
    "template <class R, class... A> struct wheelwright_plain<R(A...) noexcept> { typedef R type(A...) noexcept; };\n"
    "template <class R, class... A> struct wheelwright_plain<R(A..., ...)> { typedef R type(A..., ...); };\n"
    "template <class R, class... A> struct wheelwright_plain<R(A..., ...) noexcept> {\n"
    "    typedef R type(A..., ...) noexcept;\n"
    "};\n"
)


def _consumer_source(
    headers: tuple[str, ...], functions: Sequence[str], typed: Mapping[str, str] | None = None
) -> tuple[str, dict[int, str]]:
    """The C++ program and the line of each function's check. Line 1 a comment, line ``2 + i`` includes
    ``headers[i]`` (:func:`error_directives` reads them back); then one line per function, which
    redeclares it with C linkage as the headers declare it for C++: ``extern "C" decltype(f) f;``, its type
    rebuilt without default arguments (:data:`_PLAIN`) (g++: "not
    declared", or "conflicting declaration ... with 'C' linkage" where the headers gave it C++ linkage).
    ``typed``: names C++ overloads (decltype cannot name one of them), each with its C type ``T``: the overload
    of that type must exist (``static_cast``) and be the one with C linkage (redeclared through :data:`_PICK`)."""
    typed = typed or {}
    lines = [
        "// Written by wheelwright's audit: a C++ program outside the wheel that uses its SDK.",
        *(f"#include <{h}>" for h in headers),
        "",
        _PLAIN.rstrip("\n"),
        *([_PICK.rstrip("\n")] if typed else []),
    ]
    first = "\n".join(lines).count("\n") + 2  # the line after them
    for f in functions:
        t = typed.get(f)
        lines.append(
            f'extern "C" wheelwright_plain<decltype({f})>::type {f};'
            if t is None
            else f'static_assert(sizeof(static_cast<{t}>(&{f})) != 0, "{f}"); '
            f'extern "C" wheelwright_fn<decltype(wheelwright_c<{t}>::pick(&{f}, 0))>::type {f};'
        )
    return "\n".join(lines) + "\n", {first + i: f for i, f in enumerate(functions)}


def _isystem(dirs: tuple[str, ...]) -> list[str]:
    return [arg for d in dirs for arg in ("-isystem", d)]


@dataclass(frozen=True)
class Compiled:
    """The C++ pass over one program: its run (C's, where C's stopped the check) and limits, the functions
    C listed, the files opened outside (then nothing else of the run was read), the functions the headers
    declare for C++ with C++ linkage (each with where, as the compiler names it) and whether every error
    is one of the program's own checks (none in the headers)."""

    ran: Ran
    sandbox: Sandbox
    functions: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    cxx_linkage: tuple[tuple[str, str], ...] = ()
    checks_only: bool = False
    c_unread: tuple[str, ...] = ()  # headers C's parser could not read: their functions not listed
    c_why: str = ""  # C's first error in them


def compile_consumer(
    headers: tuple[str, ...],
    include: Path,
    scratch: Path,
    cuda_dirs: tuple[str, ...] = (),
    skip: Collection[str] = (),
    name: str = "consumer",
    overloaded: set[str] | None = None,
    compilers: tuple[str, str] | None = None,
) -> Compiled:
    """List the declared functions (C's parser, but those of ``skip``), then check ``name``.cpp: it includes
    ``headers`` and declares each function for C++ with C linkage (:func:`_consumer_source`), syntax only
    (``g++ -fsyntax-only -H``: every file opened must be the SDK's, ``cuda_dirs``' or the system's, read
    before anything else of its output). Names C++ overloads (``overloaded``: known so far, and updated
    with those the compiler names) through their C type: once more where it names new ones. With no function
    listed it keeps the preprocessed program (``name``.ii: whether the headers declare anything).
    ``cuda_dirs`` come after the SDK's own headers (``-isystem``). ``compilers``: ``(gcc, g++)`` of the
    wheel's architecture (:mod:`release.audit.cpp.target`; this machine's by default)."""
    overloaded = set() if overloaded is None else overloaded
    gcc, gxx = compilers if compilers is not None else (proc.which("gcc"), proc.which("g++"))
    listed = declared_functions(headers, include, scratch, cuda_dirs, skip, gcc)
    if listed.outside:
        return Compiled(listed.ran, PREPROCESS, outside=tuple(listed.outside))
    functions = listed.functions
    source = scratch / f"{name}.cpp"
    keep = [] if functions else ["-save-temps", "-dumpdir", f"{scratch}/"]
    argv = [gxx, "-std=c++17", *QUIET, "-fsyntax-only", "-H", *keep, f"-I{include}"]
    allowed = (str(include), *cuda_dirs, *system_include_dirs(gxx, "c++"))
    while True:
        typed = {f: functions[f] for f in functions if f in overloaded}
        text, lines = _consumer_source(headers, list(functions), typed)
        source.write_text(text, encoding="utf-8")
        ran = run_limited([*argv, *_isystem(cuda_dirs), source], cwd=scratch, sandbox=SYNTAX)
        outside = outside_files(ran.stderr, allowed, scratch)
        if len(ran.stderr) >= SYNTAX.output_chars:
            outside.append(f"(the list of files it opened ran past {SYNTAX.output_chars:,} characters)")
        if outside:
            return Compiled(ran, SYNTAX, outside=tuple(outside))
        checks = check_errors(ran.stderr, str(source), lines)
        found = {f for f, said in checks.errors.items() if any(_OVERLOADED in m for m in said)}
        new = found - overloaded  # overloaded in C++ (cuBLAS's cublasGemmEx): referenced by C type
        overloaded |= found  # learnt even where the headers' own errors fail the run (a next program's)
        if ran.ok or not new or not checks.only:
            break
    return Compiled(
        ran, SYNTAX, tuple(functions), (), checks.cxx_linkage, checks.only, listed.unread, listed.why
    )


_OVERLOADED = "cannot resolve address of overloaded function"  # g++ 12: "'decltype' cannot resolve ..."
_DIAGNOSTIC = re.compile(r"^(.+?):(\d+):(?:\d+:)? (fatal error|error|note): (.*)$")
_LINKAGE = re.compile(r"^conflicting declaration of '.*' with 'C' linkage$")
_CXX_NOTE = "previous declaration with 'C++' linkage"


@dataclass(frozen=True)
class Checks:
    """The errors of a C++ pass: those on each function's line, the functions declared with C++ linkage
    (with the compiler's note of where), and whether there are errors and all are on those lines."""

    errors: dict[str, list[str]]
    cxx_linkage: tuple[tuple[str, str], ...]
    only: bool


def check_errors(stderr: str, source: str, lines: Mapping[int, str]) -> Checks:
    """Read the C++ pass's errors (line ``n`` of ``source``, the program's path as the compiler was given it,
    checks function ``lines[n]``)."""
    errors: dict[str, list[str]] = {}
    linkage: dict[str, str] = {}
    awaiting: str | None = None  # the function whose "previous declaration with 'C++' linkage" comes next
    elsewhere = False
    for line in stderr.splitlines():
        m = _DIAGNOSTIC.match(line)
        if m is None:
            elsewhere |= re.search(r"(?:^|: )(?:fatal )?error: ", line) is not None
            continue
        file, number, kind, said = m[1], int(m[2]), m[3], m[4]
        function = lines.get(number) if os.path.normpath(file) == source else None
        if kind == "note":
            if awaiting is not None and said == _CXX_NOTE:
                linkage[awaiting], awaiting = f"{file}:{number}", None
            continue
        awaiting = None
        if function is None:
            elsewhere = True
            continue
        errors.setdefault(function, []).append(said)
        if _LINKAGE.match(said):
            linkage.setdefault(function, "")
            awaiting = function
    return Checks(errors, tuple(linkage.items()), bool(errors) and not elsewhere)


_CHAIN = re.compile(r"^(?:In file included from|\s+from) (.+?):(\d+)(?::\d+)?[:,]$")
_ERROR = re.compile(r"^(.+?):\d+:(?:\d+:)? (?:fatal )?error: (.*)$")


def _blamed(stderr: str, headers: Sequence[str], source: str, first: int) -> list[tuple[str, str, str]]:
    """``(top-level header, file, message)`` for each error the compiler reports: the header of
    ``headers`` whose inclusion it is in, read from the include chain (``source``'s line ``first + i``
    includes ``headers[i]``), and the file it is in, as the compiler names it."""
    out = []
    top = None
    for line in stderr.splitlines():
        chain = _CHAIN.match(line)
        if chain is not None:
            if Path(chain[1]).name == source and first <= int(chain[2]) < len(headers) + first:
                top = headers[int(chain[2]) - first]
            continue
        m = _ERROR.match(line)
        if m is not None and top is not None and Path(m[1]).name != source:
            out.append((top, m[1], m[2].strip()))
    return out


def error_directives(
    stderr: str, headers: tuple[str, ...], include: Path, name: str = "consumer"
) -> list[tuple[str, str, str]]:
    """``(top-level header, file, message)`` for each ``#error`` the compiler of program ``name`` reports:
    the header of ``headers`` whose inclusion it fired in, the file it is in (relative to ``include``
    when the SDK's, else as the compiler names it) and its text."""
    prefix = str(include) + "/"
    return [
        (top, file.removeprefix(prefix), message.removeprefix("#error").strip()[:200])
        for top, file, message in _blamed(stderr, headers, f"{name}.cpp", 2)
        if message.startswith("#error")
    ]
