"""The C++ consumer check's tools: gcc and g++ run sandboxed on an SDK's headers, and their output read.

Split from :mod:`release.audit.cpp_consumer` (which decides what to compile and what it means):
the compiler's include directories, the files its preprocessor opened, the functions C's parser
lists, the consumer program's source, the compile and link commands, and the compiler's
messages cut to those about the wheel's own files.
"""

from __future__ import annotations

import functools
import os
import re
import tempfile
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
    "link_consumer",
    "messages",
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


def declared_functions(headers: tuple[str, ...], include: Path, scratch: Path) -> tuple[list[str], list[str]]:
    """Functions declared (not defined) by the SDK's own headers, when they parse as C; and the files
    outside the SDK and the system headers that C's preprocessor opened (then no names are taken)."""
    probe = scratch / "probe.c"
    probe.write_text("".join(f'#include "{h}"\n' for h in headers), encoding="utf-8")
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


def _consumer_source(headers: tuple[str, ...], functions: list[str]) -> str:
    refs = "".join(f"    reinterpret_cast<unsigned long long>(&{name}),\n" for name in functions)
    return (
        "// Written by wheelwright's audit: a C++ program outside the wheel that uses its SDK.\n"
        + "".join(f"#include <{h}>\n" for h in headers)
        + "\nvolatile unsigned long long wheelwright_refs[] = {\n"
        + refs
        + "    0ULL,\n};\n\n"
        + "int main() { return wheelwright_refs[0] == 1ULL ? 1 : 0; }\n"
    )


def _gxx(*args: str | Path, include: Path, scratch: Path, sandbox: Sandbox = COMPILE) -> Ran:
    return run_limited(
        [proc.which("g++"), "-std=c++17", *_QUIET, *args, f"-I{include}"], cwd=scratch, sandbox=sandbox
    )


def compile_consumer(
    headers: tuple[str, ...], include: Path, scratch: Path
) -> tuple[Ran, Sandbox, list[str], list[str]]:
    """Preprocess alone first (every file opened must be the SDK's or the system's), then compile,
    list the declared functions, and compile again referencing them. Returns the last run, its
    limits, the functions and the files opened outside (then nothing further ran)."""
    source = scratch / "consumer.cpp"
    source.write_text(_consumer_source(headers, []), encoding="utf-8")
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
    functions, outside = declared_functions(headers, include, scratch)
    if functions:
        source.write_text(_consumer_source(headers, functions), encoding="utf-8")
        compiled = _gxx("-c", source, "-o", scratch / "consumer.o", include=include, scratch=scratch)
    return compiled, COMPILE, functions, outside


def link_consumer(sdk: Sdk, scratch: Path) -> Ran:
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
