"""Check ``cpp_consumer``: a C++ program outside the wheel can use the SDK the wheel ships.

An SDK is a directory ``P/include`` with headers directly in it (``*.h``, ``*.hpp``,
``*.hh``, ``*.hxx``) next to ``P/lib`` (or ``P/lib64``) holding at least one shared
library, as tinyaxpy ships ``tinyaxpy/include/tinyaxpy.h`` and
``tinyaxpy/lib/libtinyaxpy_kernels.so``. For each SDK, in a scratch directory outside
the extracted wheel:

0. the headers are written there: the top-level ones and every header of the wheel
   they reach through ``#include`` lines (kept in memory by the extraction pass, so
   a big SDK such as torch's 9,500 headers costs only the files a program can see);
1. ``gcc -x c -fsyntax-only -aux-info`` lists the functions the headers declare
   (when they parse as C; C++-only headers are included but not enumerated);
2. a generated ``consumer.cpp`` includes every header and takes the address of every
   declared function, so each must be declared callable from C++ and be exported;
3. ``g++ -std=c++17`` compiles it with ``-I P/include`` and links it against the
   libraries of ``P/lib`` (``--allow-shlib-undefined``: their own dependencies, such as
   the CUDA runtime, are the loader check's business, not this one's).

Linking only: running the program is the smoke step's job (it needs the packages
installed). A wheel without an SDK passes with a note.
"""

from __future__ import annotations

import posixpath
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

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
_TIMEOUT = 300.0


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


_INCLUDE = re.compile(rb'^[ \t]*#[ \t]*(?:include|include_next|import)[ \t]*([<"])([^>"\n]+)[>"]', re.M)
_COMPUTED = re.compile(rb"^[ \t]*#[ \t]*include[ \t]+[A-Za-z_]", re.M)


def materialize(sdk: Sdk, contents: Contents, out: Path) -> int:
    """Write the SDK headers a program including the top-level ones can reach into ``out``.

    The include closure is followed through ``#include`` lines (a superset: both
    branches of every ``#if``); a computed ``#include MACRO`` makes it write the whole
    include directory. Returns the number of files written.
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
        for quote, inc in _INCLUDE.findall(text):
            rel = inc.decode("utf-8", errors="replace").strip()
            candidates = ([posixpath.normpath(posixpath.join(here, rel))] if quote == b'"' else []) + [
                posixpath.normpath(prefix + rel)
            ]
            todo += [c for c in candidates if c in members and c not in seen]
    for name in seen:
        if name not in members:
            continue
        target = out / name[len(prefix) :]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data(name))
    return len(seen)


def declared_functions(sdk: Sdk, include: Path, scratch: Path) -> list[str]:
    """Functions declared (not defined) by the SDK's own headers, when they parse as C."""
    probe = scratch / "probe.c"
    probe.write_text("".join(f'#include "{h}"\n' for h in sdk.headers), encoding="utf-8")
    aux = scratch / "declarations.txt"
    result = proc.run(
        ["gcc", "-x", "c", "-fsyntax-only", f"-aux-info={aux}", f"-I{include}", probe],
        cwd=scratch,
        check=False,
        timeout=_TIMEOUT,
    )
    if result.returncode != 0 or not aux.is_file():
        return []
    names: list[str] = []
    prefix = str(include.resolve()) + "/"
    for line in aux.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _AUX_LINE.match(line)
        if m is None or m["flags"][1] != "C" or m["decl"].startswith("static"):
            continue
        if not str(Path(m["file"]).resolve()).startswith(prefix):
            continue
        found = [n for n in _NAME.findall(m["decl"]) if n not in _C_KEYWORDS]
        if found and found[0] not in names:
            names.append(found[0])
    return names


def _tidy(text: str, sdk: Sdk, root: Path, scratch: Path, lines: int = 12) -> str:
    include = str(scratch / "include") + "/"
    text = text.replace(include, f"{sdk.include_dir}/" if sdk.include_dir else "")
    text = text.replace(str(root) + "/", "").replace(str(scratch) + "/", "")
    kept = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(kept[:lines])


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


def _compile(source: Path, include: Path, scratch: Path) -> proc.Result:
    return proc.run(
        ["g++", "-std=c++17", "-c", source, f"-I{include}", "-o", scratch / "consumer.o"],
        cwd=scratch,
        check=False,
        timeout=_TIMEOUT,
    )


def check_sdk(sdk: Sdk, contents: Contents, scratch: Path) -> Finding:
    root = contents.wheel.root
    include = scratch / "include"
    include.mkdir()
    written = materialize(sdk, contents, include)
    libs = ", ".join(lib.path for lib in sdk.libraries)
    headers = [posixpath.join(sdk.include_dir, h) for h in sdk.headers]
    shown = str(headers) if len(headers) <= 3 else f"the {len(headers)} headers of {sdk.include_dir}"
    details = {
        "include_dir": sdk.include_dir,
        "headers": headers,
        "headers_written": written,
        "libraries": [lib.path for lib in sdk.libraries],
    }
    source = scratch / "consumer.cpp"
    # First the headers alone: a header that does not compile needs no further look.
    source.write_text(_consumer_source(sdk, []), encoding="utf-8")
    compiled = _compile(source, include, scratch)
    functions: list[str] = []
    if compiled.returncode == 0:
        functions = declared_functions(sdk, include, scratch)
        if functions:
            source.write_text(_consumer_source(sdk, functions), encoding="utf-8")
            compiled = _compile(source, include, scratch)
    if compiled.returncode != 0:
        return fail(
            CHECK,
            f"a C++ program including {shown} does not compile:\n{_tidy(compiled.stderr, sdk, root, scratch)}",
            functions=functions,
            **details,
        )
    lib_dirs = sorted({str(lib.file.parent) for lib in sdk.libraries})
    link_args: list[str] = []
    for d in lib_dirs:
        link_args += [f"-L{d}", f"-Wl,-rpath-link,{d}"]
    link_args += [f"-l:{lib.file.name}" for lib in sdk.libraries]
    linked = proc.run(
        [
            "g++",
            scratch / "consumer.o",
            "-o",
            scratch / "consumer",
            "-Wl,--no-as-needed",
            *link_args,
            "-Wl,--allow-shlib-undefined",
        ],
        cwd=scratch,
        check=False,
        timeout=_TIMEOUT,
    )
    if linked.returncode != 0:
        return fail(
            CHECK,
            f"a C++ program using {shown} compiles but does not link against {libs}:\n"
            f"{_tidy(linked.stderr, sdk, root, scratch)}",
            functions=functions,
            **details,
        )
    return ok(
        CHECK,
        f"a C++ program outside the wheel compiles against {sdk.include_dir} ({', '.join(sdk.headers)}) and links "
        f"{libs}, referencing {len(functions)} declared function{'s' if len(functions) != 1 else ''}",
        functions=functions,
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
