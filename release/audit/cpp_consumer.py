"""Check ``cpp_consumer``: a C++ program outside the wheel can use the SDK the wheel ships.

An SDK is a directory ``P/include`` with headers directly in it (``*.h``, ``*.hpp``,
``*.hh``, ``*.hxx``) next to ``P/lib`` (or ``P/lib64``) holding at least one shared
library, as tinyaxpy ships ``tinyaxpy/include/tinyaxpy.h`` and
``tinyaxpy/lib/libtinyaxpy_kernels.so``. For each SDK, in a scratch directory outside
the extracted wheel:

0. the headers are written there: the top-level ones and every header of the wheel
   they reach through ``#include`` lines (kept in memory by the extraction pass, so
   a big SDK such as torch's 9,500 headers costs only the files a program can see);
1. the headers are a wheel's, so hostile: an ``#include`` of an absolute path or one
   climbing out of the SDK with ``..`` is refused before anything runs; then the
   preprocessor lists every file it opens (``-H``) and any file outside the SDK's
   headers and the compiler's own include directories stops the check, with none of
   the compiler's output shown;
2. ``gcc -x c -fsyntax-only -aux-info`` lists the functions the headers declare
   (when they parse as C; C++-only headers are included but not enumerated);
3. a generated ``consumer.cpp`` includes every header and takes the address of every
   declared function, so each must be declared callable from C++ and be exported;
4. ``g++ -std=c++17`` compiles it with ``-I P/include`` and links it against the
   libraries of ``P/lib`` (``--allow-shlib-undefined``: their own dependencies, such as
   the CUDA runtime, are the loader check's business, not this one's).

Every tool runs sandboxed (:func:`release.audit.limits.run_limited`: a clean environment,
no terminal, limits on CPU time, memory and file size, a wall-clock limit) and only its
messages about the wheel's own files reach a finding (nothing of the auditing machine's).
Headers that declare nothing leave nothing to check, and the finding says so. Linking
only: running the program is the smoke step's job. A wheel without an SDK passes with
a note.
"""

from __future__ import annotations

import functools
import os
import posixpath
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from release.audit.limits import GIB, MIB, Ran, Sandbox, first_few, run_limited
from release.audit.model import Contents, Expectation, Finding, Library, fail, ok
from release.core import proc

CHECK = "cpp_consumer"
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx")  # top-level SDK headers
ET_DYN = 3
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


def find_sdks(contents: Contents) -> list[Sdk]:
    headers: dict[str, list[str]] = {}
    for member in contents.wheel.files:
        if not member.read or not member.name.endswith(HEADER_SUFFIXES):
            continue
        directory, name = posixpath.split(member.name)
        if posixpath.basename(directory) == "include":
            headers.setdefault(directory, []).append(name)
    out = []
    for include_dir, names in sorted(headers.items()):
        parent = posixpath.dirname(include_dir)
        lib_dirs = {posixpath.join(parent, "lib"), posixpath.join(parent, "lib64")}
        libs = tuple(
            lib
            for lib in contents.libraries
            if lib.elf is not None
            and lib.elf.elf_type == ET_DYN
            and lib.is_shared_library
            and posixpath.dirname(lib.path) in lib_dirs
        )
        if libs:
            out.append(Sdk(include_dir, tuple(sorted(names)), libs))
    return out


_INCLUDE = re.compile(
    rb'^[ \t]*#[ \t]*(?:include|include_next|import)[ \t]*([<"])([^>"\n]+)[>"]'
    rb'|__has_include(?:_next)?[ \t]*\([ \t]*([<"])([^>"\n]+)[>"]'
    rb'|^[ \t]*#[ \t]*pragma[ \t]+GCC[ \t]+dependency[ \t]+(["<])([^>"\n]+)[>"]',
    re.M,
)
_COMPUTED = re.compile(rb"^[ \t]*#[ \t]*include[ \t]+[A-Za-z_]", re.M)


_HINT = re.compile(
    rb"include|import|dependency"
)  # a literal scan, far faster than _INCLUDE over a whole header


def _includes(text: bytes) -> list[tuple[bytes, str]]:
    """Every ``(quote, target)`` a header names in an include, ``__has_include`` or dependency pragma."""
    out = []
    at = 0
    while (hint := _HINT.search(text, at)) is not None:
        start = text.rfind(b"\n", 0, hint.start()) + 1
        end = text.find(b"\n", hint.end())
        end = len(text) if end == -1 else end
        at = end + 1
        for m in _INCLUDE.finditer(text, start, end):
            quote, target = next((m[i], m[i + 1]) for i in (1, 3, 5) if m[i] is not None)
            out.append((quote, target.decode("utf-8", errors="replace").strip()))
    return out


def materialize(sdk: Sdk, contents: Contents, out: Path) -> dict[str, bytes]:
    """Write the SDK headers a program including the top-level ones can reach into ``out``.

    The include closure is followed through ``#include`` lines (a superset: both
    branches of every ``#if``); a computed ``#include MACRO`` makes it write the whole
    include directory. Returns what was written, by path relative to the include directory.
    """
    prefix = sdk.include_dir + "/" if sdk.include_dir else ""
    members = {m.name: m for m in contents.wheel.files if m.read and m.name.startswith(prefix)}

    def data(name: str) -> bytes:
        member = members[name]
        if member.data is not None:
            return member.data
        assert member.path is not None
        return member.path.read_bytes()

    todo = [prefix + h for h in sdk.headers]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in members:
            continue
        seen.add(name)
        text = data(name)
        if _COMPUTED.search(text):
            seen |= set(members)
            break
        here = posixpath.dirname(name)
        for quote, rel in _includes(text):
            candidates = ([posixpath.normpath(posixpath.join(here, rel))] if quote == b'"' else []) + [
                posixpath.normpath(prefix + rel)
            ]
            todo += [c for c in candidates if c in members and c not in seen]
    written: dict[str, bytes] = {}
    for name in sorted(seen & set(members)):
        target = out / name[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        written[name[len(prefix) :]] = data(name)
        target.write_bytes(written[name[len(prefix) :]])
    return written


def escaping_includes(files: Mapping[str, bytes]) -> list[tuple[str, str, str]]:
    """``(header, target, why)`` for each include that may reach outside the SDK's headers and the
    system's: an absolute path, or ``..`` that does not land on a header of the SDK. Pure."""
    out = []
    for header, text in sorted(files.items()):
        here = posixpath.dirname(header)
        for quote, target in _includes(text):
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
        "consumer.cpp",
        "consumer.o",
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


def declared_functions(sdk: Sdk, include: Path, scratch: Path) -> tuple[list[str], list[str]]:
    """Functions declared (not defined) by the SDK's own headers, when they parse as C; and the files
    outside the SDK and the system headers that C's preprocessor opened (then no names are taken)."""
    probe = scratch / "probe.c"
    probe.write_text("".join(f'#include "{h}"\n' for h in sdk.headers), encoding="utf-8")
    aux = scratch / "declarations.txt"
    gcc = proc.which("gcc")
    result = run_limited(
        [gcc, "-x", "c", "-fsyntax-only", "-H", *_QUIET, f"-aux-info={aux}", f"-I{include}", probe],
        cwd=scratch,
        sandbox=PREPROCESS,
    )
    outside = outside_files(result.stderr, (str(include), *system_include_dirs(gcc, "c")), scratch)
    if outside or not result.ok or not aux.is_file():
        return [], outside
    names: list[str] = []
    prefix = str(include.resolve()) + "/"
    with aux.open("rb") as f:
        text = f.read(AUX_BYTES).decode("utf-8", errors="replace")
    for line in text.splitlines():
        m = _AUX_LINE.match(line)
        if m is None or m["flags"][1] != "C" or m["decl"].startswith("static"):
            continue
        if not str(Path(m["file"]).resolve()).startswith(prefix):
            continue
        found = [n for n in _NAME.findall(m["decl"]) if n not in _C_KEYWORDS]
        if found and found[0] not in names:
            names.append(found[0])
    return names, []


def _consumer_source(sdk: Sdk, functions: list[str]) -> str:
    refs = "".join(f"    reinterpret_cast<unsigned long long>(&{name}),\n" for name in functions)
    return (
        "// Written by wheelwright's audit: a C++ program outside the wheel that uses its SDK.\n"
        + "".join(f"#include <{h}>\n" for h in sdk.headers)
        + "\nvolatile unsigned long long wheelwright_refs[] = {\n"
        + refs
        + "    0ULL,\n};\n\n"
        + "int main() { return wheelwright_refs[0] == 1ULL ? 1 : 0; }\n"
    )


def _gxx(*args: str | Path, include: Path, scratch: Path, sandbox: Sandbox = COMPILE) -> Ran:
    return run_limited(
        [proc.which("g++"), "-std=c++17", *_QUIET, *args, f"-I{include}"], cwd=scratch, sandbox=sandbox
    )


def _compile(sdk: Sdk, include: Path, scratch: Path) -> tuple[Ran, Sandbox, list[str], list[str]]:
    """Preprocess alone first (every file opened must be the SDK's or the system's), then compile,
    list the declared functions, and compile again referencing them. Returns the last run, its
    limits, the functions and the files opened outside (then nothing further ran)."""
    source = scratch / "consumer.cpp"
    source.write_text(_consumer_source(sdk, []), encoding="utf-8")
    pre = _gxx(
        "-E",
        "-H",
        source,
        "-o",
        scratch / "consumer.ii",
        include=include,
        scratch=scratch,
        sandbox=PREPROCESS,
    )
    outside = outside_files(
        pre.stderr, (str(include), *system_include_dirs(proc.which("g++"), "c++")), scratch
    )
    if len(pre.stderr) >= PREPROCESS.output_chars:
        outside.append(f"(the list of files it opened ran past {PREPROCESS.output_chars:,} characters)")
    if outside or not pre.ok:
        return pre, PREPROCESS, [], outside
    compiled = _gxx("-c", source, "-o", scratch / "consumer.o", include=include, scratch=scratch)
    if not compiled.ok:
        return compiled, COMPILE, [], []
    functions, outside = declared_functions(sdk, include, scratch)
    if functions:
        source.write_text(_consumer_source(sdk, functions), encoding="utf-8")
        compiled = _gxx("-c", source, "-o", scratch / "consumer.o", include=include, scratch=scratch)
    return compiled, COMPILE, functions, outside


def _link(sdk: Sdk, scratch: Path) -> Ran:
    link_args: list[str] = []
    for d in sorted({str(lib.file.parent) for lib in sdk.libraries}):
        link_args += [f"-L{d}", f"-Wl,-rpath-link,{d}"]
    link_args += [f"-l:{lib.file.name}" for lib in sdk.libraries]
    return run_limited(
        [
            proc.which("g++"),
            scratch / "consumer.o",
            "-o",
            scratch / "consumer",
            "-Wl,--no-as-needed",
            *link_args,
            "-Wl,--allow-shlib-undefined",
        ],
        cwd=scratch,
        sandbox=LINK,
    )


def _names(names: tuple[str, ...], limit: int = 10) -> str:
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def _listed(names: list[str], limit: int = 50) -> dict[str, object]:
    """A list for a finding's details: the first ``limit`` and how many in all (records stay small)."""
    return {"count": len(names), "first": names[:limit]}


def check_sdk(sdk: Sdk, contents: Contents, scratch: Path) -> Finding:
    root = contents.wheel.root
    include = scratch / "include"
    include.mkdir()
    written = materialize(sdk, contents, include)
    libs = ", ".join(lib.path for lib in sdk.libraries)
    headers = [posixpath.join(sdk.include_dir, h) for h in sdk.headers]
    shown = str(headers) if len(headers) <= 3 else f"the {len(headers)} headers of {sdk.include_dir}"
    details: dict[str, object] = {
        "include_dir": sdk.include_dir,
        "headers": _listed(headers),
        "headers_written": len(written),
        "libraries": [lib.path for lib in sdk.libraries],
    }
    escapes = escaping_includes(written)
    if escapes:
        header, target, why = escapes[0]
        more = (
            f" ({len(escapes)} such includes: {first_few([t for _, t, _ in escapes])})"
            if len(escapes) > 1
            else ""
        )
        return fail(
            CHECK,
            f"{sdk.include_dir}/{header} includes {target!r}, {why}: a header of the wheel may include only "
            f"the wheel's own headers and the system's; not compiled{more}",
            **details,
        )
    compiled, sandbox, functions, outside = _compile(sdk, include, scratch)
    details["functions"] = _listed(functions)
    if outside:
        return fail(
            CHECK,
            f"the headers of {sdk.include_dir} make the compiler open {len(outside)} file(s) outside the wheel's "
            "headers and the system's (a computed or hidden #include): not compiled further, and none of the "
            "compiler's output is shown",
            **details,
        )
    if not compiled.ok:
        return fail(
            CHECK,
            f"a C++ program including {shown} does not compile ({compiled.why(sandbox)}):\n"
            f"{messages(compiled.stderr, sdk, root, scratch)}",
            **details,
        )
    if not functions and not declares_something(scratch / "consumer.ii", include):
        return ok(
            CHECK,
            f"nothing to check: {shown} declare nothing (no line of the preprocessed program comes from "
            f"them), so a C++ program has nothing of {libs} to use",
            nothing_to_check=True,
            **details,
        )
    linked = _link(sdk, scratch)
    if not linked.ok:
        return fail(
            CHECK,
            f"a C++ program using {shown} compiles but does not link against {libs} ({linked.why(LINK)}):\n"
            f"{messages(linked.stderr, sdk, root, scratch)}",
            **details,
        )
    return ok(
        CHECK,
        f"a C++ program outside the wheel compiles against {sdk.include_dir} ({_names(sdk.headers)}) "
        f"and links {libs}, referencing {len(functions)} declared function{'s' if len(functions) != 1 else ''}",
        **details,
    )


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    sdks = find_sdks(contents)
    if not sdks:
        return [
            ok(
                CHECK,
                "no C++ SDK in the wheel (P/include/*.h next to a shared library in P/lib): nothing to link",
            )
        ]
    out = []
    for sdk in sdks:
        with tempfile.TemporaryDirectory(prefix="wheelwright-cpp-") as scratch:
            out.append(check_sdk(sdk, contents, Path(scratch).resolve()))
    return out
