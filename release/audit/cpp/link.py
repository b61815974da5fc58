"""The C++ consumer check's link: a C program naming each function the headers declare, linked against the
SDK's libraries, and the C names those export.

Split from :mod:`release.audit.cpp.tools` (the compiler's runs on the headers). The C++ pass has shown that
every function is declared for C++ with C linkage, so a C++ program references each by its C name: a C
program that declares each by that name, includes no header and takes the addresses, compiled and linked
in one ``gcc`` run, references the very same symbols at a fraction of a C++ compile's cost.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path

from release.audit.cpp.tools import LINK, QUIET, Sdk
from release.audit.reading.limits import first_few
from release.binary.elf_core import ElfError
from release.binary.elf_symbols import lookup
from release.core import proc
from release.core.sandbox import Ran, run_limited

__all__ = ["c_program", "exported", "link_consumer", "linkage_sentence"]

ARRAY = "wheelwright_refs"


def c_program(functions: Iterable[str]) -> str:
    """``consumer.c``: each function declared by name alone (``void f(void);``: its C symbol, whatever its
    type), its address in a volatile array, and ``main``."""
    names = [f for f in dict.fromkeys(functions) if f not in ("main", ARRAY)]
    return (
        "/* Written by wheelwright's audit: the C symbols a C++ program using the SDK references. */\n"
        + "".join(f"void {f}(void);\n" for f in names)
        + f"\nvoid (*const volatile {ARRAY}[])(void) = {{\n"
        + "".join(f"    {f},\n" for f in names)
        + "    0,\n};\n\n"
        + f"int main(void) {{ return {ARRAY}[0] != 0; }}\n"
    )


def link_consumer(sdk: Sdk, scratch: Path, functions: Sequence[str], gcc: str | None = None) -> Ran:
    """Compile :func:`c_program` and link it against ``sdk``'s libraries in one run, as a C++ program's
    object would link (``--allow-shlib-undefined``: their own dependencies are the loader check's). The
    object is ``consumer.o`` (``-save-temps=obj``), so the linker's messages name the program. ``gcc``:
    the C compiler of the wheel's architecture (:mod:`release.audit.cpp.target`; this machine's ``gcc``
    by default), whose linker finds the libraries' own dependencies only among its architecture's."""
    source = scratch / "consumer.c"
    source.write_text(c_program(functions), encoding="utf-8")
    link_args: list[str] = []
    for d in sorted({str(lib.file.parent) for lib in sdk.libraries}):
        link_args += [f"-L{d}", f"-Wl,-rpath-link,{d}"]
    link_args += [f"-l:{lib.file.name}" for lib in sdk.libraries]
    return run_limited(
        [
            gcc or proc.which("gcc"),
            *QUIET,
            "-w",
            "-fno-builtin",
            "-save-temps=obj",
            source,
            "-o",
            scratch / "consumer",
            "-Wl,--no-as-needed",
            *link_args,
            "-Wl,--allow-shlib-undefined",
        ],
        cwd=scratch,
        sandbox=LINK,
    )


def exported(sdk: Sdk, names: Iterable[str]) -> set[str]:
    """Which of ``names`` a library of ``sdk`` defines as a dynamic symbol (its own hash table: a few reads
    per name); a library that cannot be read counts as exporting none."""
    wanted = set(names)
    found: set[str] = set()
    for lib in sdk.libraries:
        try:
            symbols = lookup(os.fspath(lib.file), wanted - found)
        except (ElfError, OSError):
            continue
        found |= {name for name, symbol in symbols.items() if symbol.defined}
    return found


def linkage_sentence(sdk: Sdk, found: Sequence[tuple[str, str]], include: Path, shown: str, libs: str) -> str:
    """The finding's first sentence for the functions the headers declare with C++ linkage (no extern "C"):
    ``found``, each with where the compiler saw that declaration (in ``include``: named by wheel path)."""
    names = [f for f, _ in found]
    first, where = found[0]
    file, _, line = where.rpartition(":")
    inside = posixpath.normpath(file).removeprefix(f"{include}/")
    declared = (
        f"{sdk.include_dir}/{inside}:{line}"
        if inside != posixpath.normpath(file) and ".." not in inside
        else "a header it includes"
    )
    one = len(sdk.libraries) == 1
    theirs = (
        f"the C symbol {first} that {libs} export{'s' if one else ''}"
        if exported(sdk, [first])
        else f"the C symbol {first} (which {libs} do{'es' if one else ''} not export either)"
    )
    more = f" ({len(names)} functions so: {first_few(names)})" if len(names) > 1 else ""
    return (
        f"a C++ program including {shown} cannot link {first}: {declared} declares it with C++ linkage (no "
        f'extern "C"), so the program references a mangled C++ symbol, not {theirs}{more}. Fix: declare '
        'the header\'s C functions inside extern "C" { ... }, between #ifdef __cplusplus guards'
    )
