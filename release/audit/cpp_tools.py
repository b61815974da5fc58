"""The C++ consumer check's tools: gcc and g++ run sandboxed on an SDK's headers, and their output read.

Split from :mod:`release.audit.cpp_consumer` (which decides what to compile and what it means) and
:mod:`release.audit.cpp_headers` (the headers read from their text): the compiler's include directories, the files its preprocessor opened, the functions C's parser lists,
the consumer program's source, the compile and link commands, and the compiler's messages cut
to those about the wheel's own files. The CUDA headers a consumer compiles with: :mod:`release.audit.cpp_cuda`.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.audit.limits import GIB, MIB, Ran, Sandbox, run_limited
from release.audit.model import Library
from release.core import proc

__all__ = [
    "COMPILE",
    "LINK",
    "PREPROCESS",
    "Sdk",
    "compile_consumer",
    "declared_functions",
    "declares_something",
    "error_directives",
    "link_consumer",
    "messages",
    "missing_header",
    "outside_files",
    "system_include_dirs",
]

_AUX_LINE = re.compile(r"^/\* (?P<file>.+):(?P<line>\d+):(?P<flags>[A-Z]{2}) \*/ (?P<decl>.*)$")
_NAME = re.compile(r"([A-Za-z_]\w*) \(")
_C_KEYWORDS = frozenset(
    {"void", "int", "char", "long", "short", "float", "double", "unsigned", "signed", "const"}
)
# Diagnostics as plain lines: no source line quoted (it could be a file of the auditing machine).
_QUIET = ["-fdiagnostics-plain-output", "-fno-diagnostics-show-caret", "-fdiagnostics-color=never"]
PREPROCESS = Sandbox(cpu_seconds=120, memory_bytes=2 * GIB, file_bytes=1 * GIB, output_chars=16 * MIB)
COMPILE = Sandbox(cpu_seconds=300, memory_bytes=4 * GIB, file_bytes=256 * MIB)
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
    lines = ran.stderr.splitlines()
    try:
        start = lines.index("#include <...> search starts here:") + 1
        end = lines.index("End of search list.")
    except ValueError:
        return ()
    return tuple(os.path.normpath(line.strip()) for line in lines[start:end])


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


def messages(text: str, sdk: Sdk, root: Path, scratch: Path, lines: int = MESSAGE_LINES) -> str:
    """The compiler's or linker's messages about the wheel's own files, with paths made wheel-relative;
    every other line (a system header, a file of the auditing machine) is counted, never shown."""
    include = str(scratch / "include") + "/"
    text = text.replace(include, f"{sdk.include_dir}/" if sdk.include_dir else "")
    text = text.replace(str(root) + "/", "").replace(str(scratch) + "/", "")
    text = text.split("\nMultiple include guards may be useful for:", 1)[0]  # -H's closing list
    own = (
        f"{sdk.include_dir}/",
        "consumer",  # the programs' sources and objects (consumer.cpp, consumer_2.o)
        "probe.c",
        *(lib.path for lib in sdk.libraries),
    )
    kept: list[str] = []
    dropped = 0
    for raw in text.splitlines():
        line = re.sub(r"^\S*/(ld|collect2)(:|\.\S*:)", r"\1:", raw.strip())
        if not line or re.match(r"^\.+ ", line):  # blank, or a -H line (a file opened)
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


def declared_functions(
    headers: tuple[str, ...],
    include: Path,
    scratch: Path,
    cuda_dirs: tuple[str, ...] = (),
    skip: Collection[str] = (),
) -> tuple[dict[str, str], list[str]]:
    """Functions declared (not defined) by the SDK's own headers that parse as C (those that do not, once
    told from C's errors, are left out), but those of the headers in ``skip`` (device headers, the CUDA
    driver's: by path relative to ``include``), each with its pointer type as
    C declares it (``int (*)(int *)``); and the files outside the SDK, ``cuda_dirs`` and the system
    headers that C's preprocessor opened (then none)."""
    probe = scratch / "probe.c"
    aux = scratch / "declarations.txt"
    gcc = proc.which("gcc")
    argv = [gcc, "-x", "c", "-fsyntax-only", "-H", *_QUIET, f"-aux-info={aux}", f"-I{include}"]
    allowed = (str(include), *cuda_dirs, *system_include_dirs(gcc, "c"))
    for _ in range(2):  # once more without the headers that are not C (C++ only: included, not listed)
        probe.write_text("".join(f'#include "{h}"\n' for h in headers), encoding="utf-8")
        result = run_limited([*argv, *_isystem(cuda_dirs), probe], cwd=scratch, sandbox=PREPROCESS)
        outside = outside_files(result.stderr, allowed, scratch)
        not_c = {top for top, _, _ in _blamed(result.stderr, headers, "probe.c", 1)}
        if outside or result.ok or not not_c or not_c >= set(headers):
            break
        headers = tuple(h for h in headers if h not in not_c)
    if outside or not result.ok or not aux.is_file():
        return {}, outside
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
    return names, []


def _consumer_source(
    headers: tuple[str, ...],
    functions: Sequence[str],
    name: str = "consumer",
    typed: Mapping[str, str] | None = None,
) -> str:
    """The program: line 1 a comment, line ``2 + i`` includes ``headers[i]`` (:func:`error_directives` reads
    them back). A second program (``name`` other than ``consumer``) has its own array and no ``main``.
    ``typed``: functions overloaded in C++, referenced through their C type (``static_cast``)."""
    typed = typed or {}
    refs = "".join(
        f"    reinterpret_cast<unsigned long long>({f'static_cast<{typed[f]}>(&{f})' if f in typed else f'&{f}'}),\n"
        for f in functions
    )
    array = "wheelwright_refs" if name == "consumer" else f"wheelwright_refs_{name}"
    main = f"int main() {{ return {array}[0] == 1ULL ? 1 : 0; }}\n" if name == "consumer" else ""
    return (
        "// Written by wheelwright's audit: a C++ program outside the wheel that uses its SDK.\n"
        + "".join(f"#include <{h}>\n" for h in headers)
        + f"\nvolatile unsigned long long {array}[] = {{\n"
        + refs
        + "    0ULL,\n};\n\n"
        + main
    )


def _isystem(dirs: tuple[str, ...]) -> list[str]:
    return [arg for d in dirs for arg in ("-isystem", d)]


def _gxx(
    *args: str | Path,
    include: Path,
    scratch: Path,
    sandbox: Sandbox = COMPILE,
    cuda_dirs: tuple[str, ...] = (),
) -> Ran:
    argv = [proc.which("g++"), "-std=c++17", *_QUIET, *args, f"-I{include}", *_isystem(cuda_dirs)]
    return run_limited(argv, cwd=scratch, sandbox=sandbox)


def compile_consumer(
    headers: tuple[str, ...],
    include: Path,
    scratch: Path,
    cuda_dirs: tuple[str, ...] = (),
    skip: Collection[str] = (),
    name: str = "consumer",
    overloaded: set[str] | None = None,
) -> tuple[Ran, Sandbox, list[str], list[str]]:
    """Preprocess alone first (every file opened must be the SDK's, ``cuda_dirs``' or the system's), list
    the declared functions (but those of ``skip``) and compile a program referencing them into
    ``name``.o; those C++ overloads (``overloaded``: known so far, and updated with those the compiler
    names) through their C type; where that fails, compile it without them, to tell the headers' errors
    from the references'. ``cuda_dirs`` come after the SDK's own headers (``-isystem``). Returns the last
    run, its limits, the functions and the files opened outside (then nothing further ran)."""
    overloaded = set() if overloaded is None else overloaded
    source = scratch / f"{name}.cpp"
    source.write_text(_consumer_source(headers, [], name), encoding="utf-8")
    gxx = functools.partial(_gxx, include=include, scratch=scratch, cuda_dirs=cuda_dirs)
    pre = gxx("-E", "-H", source, "-o", scratch / f"{name}.ii", sandbox=PREPROCESS)
    allowed = (str(include), *cuda_dirs, *system_include_dirs(proc.which("g++"), "c++"))
    outside = outside_files(pre.stderr, allowed, scratch)
    if len(pre.stderr) >= PREPROCESS.output_chars:
        outside.append(f"(the list of files it opened ran past {PREPROCESS.output_chars:,} characters)")
    if outside or not pre.ok:
        return pre, PREPROCESS, [], outside
    functions, outside = declared_functions(headers, include, scratch, cuda_dirs, skip)
    if outside:
        return pre, PREPROCESS, [], outside
    typed = {f: functions[f] for f in functions if f in overloaded}
    source.write_text(_consumer_source(headers, list(functions), name, typed), encoding="utf-8")
    compiled = gxx("-c", source, "-o", scratch / f"{name}.o")
    lines = {int(n) for n in _OVERLOADED.findall(compiled.stderr)}
    found = {f for i, f in enumerate(functions) if i + len(headers) + 4 in lines}
    if not compiled.ok and found - overloaded:  # overloaded in C++ (cuBLAS's cublasGemmEx): take the C one
        overloaded |= found
        typed = {f: functions[f] for f in functions if f in overloaded}
        source.write_text(_consumer_source(headers, list(functions), name, typed), encoding="utf-8")
        compiled = gxx("-c", source, "-o", scratch / f"{name}.o")
    if not compiled.ok and functions:  # the headers alone, or the references?
        source.write_text(_consumer_source(headers, [], name), encoding="utf-8")
        bare = gxx("-c", source, "-o", scratch / f"{name}.o")
        if not bare.ok:
            return bare, COMPILE, [], []
    return compiled, COMPILE, list(functions), []


_OVERLOADED = re.compile(r"^[^\n:]*\.cpp:(\d+):\d+: error: address of overloaded function", re.M)
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


def link_consumer(sdk: Sdk, scratch: Path, objects: Sequence[str] = ("consumer.o",)) -> Ran:
    link_args: list[str] = []
    for d in sorted({str(lib.file.parent) for lib in sdk.libraries}):
        link_args += [f"-L{d}", f"-Wl,-rpath-link,{d}"]
    link_args += [f"-l:{lib.file.name}" for lib in sdk.libraries]
    return run_limited(
        [
            proc.which("g++"),
            *(scratch / o for o in objects),
            "-o",
            scratch / "consumer",
            "-Wl,--no-as-needed",
            *link_args,
            "-Wl,--allow-shlib-undefined",
        ],
        cwd=scratch,
        sandbox=LINK,
    )
