"""The C++ consumer check's passes (release.audit.cpp.tools / cpp_link): one C++ pass, syntax only, that
includes the headers and redeclares every function C lists with C linkage; a C program naming them,
linked against the SDK's libraries. Each on generated SDK wheels built by gcc/g++ (fxsdk/include/*.h next
to fxsdk/lib/libfx.so), through the audit's own entry point: a header without extern "C", C++
overloads, an unexported function, headers that declare only C++ or nothing, the #error second program,
files opened outside, and the compiler runs one check costs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.elf import sdk_finding

from release.audit.cpp import link as cpp_link
from release.audit.cpp import tools as cpp_tools
from release.audit.model import Finding
from release.core import proc
from release.core import sandbox as limits
from release.core.sandbox import Ran, Sandbox

C_API = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'
LIB = "int fx_version(void) { return 1; }\nint fx_a(int x) { return x; }\n"


def _check(tmp_path: Path, headers: dict[str, str], lib: str = LIB, *, cxx: bool = False) -> Finding:
    """The cpp_consumer finding for a wheel shipping ``headers`` in fxsdk/include and ``lib`` built into
    fxsdk/lib/libfx.so (by g++ when ``cxx``: its functions exported by their mangled names)."""
    return sdk_finding(tmp_path, headers, lib, cxx=cxx)


# A header that forgot extern "C": C sees int fx_a(int), C++ a function of C++ linkage.
NO_EXTERN_C = "#pragma once\nint fx_version(void);\nint fx_a(int x);\n"


def test_a_header_without_extern_c_fails_saying_so(tmp_path: Path) -> None:
    """Must fail: a C++ program including fx.h references _Z4fx_ai, which the C library does not export."""
    finding = _check(tmp_path, {"fx.h": NO_EXTERN_C})
    message = finding.message
    assert not finding.ok, message
    assert message.startswith(
        "a C++ program including ['fxsdk/include/fx.h'] cannot link fx_version: fxsdk/include/fx.h:2 declares "
        'it with C++ linkage (no extern "C"), so the program references a mangled C++ symbol, not the C '
        "symbol fx_version that fxsdk/lib/libfx.so exports (2 functions so: 'fx_version', 'fx_a'). Fix: "
        'declare the header\'s C functions inside extern "C" { ... }, between #ifdef __cplusplus guards:\n'
    ), message
    assert "fxsdk/include/fx.h:3:5: note: previous declaration with 'C++' linkage" in message
    assert "does not link" not in message and "does not compile" not in message
    assert finding.details["cxx_linkage"] == {"count": 2, "first": ["fx_version", "fx_a"]}
    assert finding.details["repeatable"] is True  # by the compiler's exit code: the cache may keep it


def test_the_same_header_with_extern_c_passes(tmp_path: Path) -> None:
    """Must pass: the fix the failure names."""
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);\nint fx_a(int x);"})
    assert finding.ok, finding.message
    assert "referencing 2 declared functions" in finding.message and "cxx_linkage" not in finding.details
    assert "repeatable" not in finding.details


def test_cxx_linkage_fails_even_where_the_library_exports_the_mangled_name(tmp_path: Path) -> None:
    """Must fail: a C++ library (g++ built it: _Z4fx_ai) behind a header C parses too; a C program including
    it references fx_a, which the library does not export, and the finding says so."""
    lib = "int fx_version() { return 1; }\nint fx_a(int x) { return x; }\n"
    finding = _check(tmp_path, {"fx.h": NO_EXTERN_C}, lib, cxx=True)
    assert not finding.ok
    assert (
        "not the C symbol fx_version (which fxsdk/lib/libfx.so does not export either) (2 functions so"
        in finding.message
    ), finding.message


# cuBLAS's cublasGemmEx: an extern "C" function with a C++ overload (a static inline) beside it.
OVERLOAD = "#ifdef __cplusplus\nstatic inline int fx_a(double x) { return fx_a((int)x); }\n#endif\n"


@pytest.mark.parametrize("noexcept", ["", " noexcept"])
def test_an_overloaded_name_whose_c_overload_has_c_linkage_passes(tmp_path: Path, noexcept: str) -> None:
    """Must pass: the overload of C type int (*)(int) exists and has C linkage (declared noexcept for C++ or
    not: the redeclaration takes the header's own)."""
    spec = f"#ifdef __cplusplus\n#define FX_NOEXCEPT{noexcept}\n#else\n#define FX_NOEXCEPT\n#endif\n"
    header = spec + C_API % "int fx_version(void);\nint fx_a(int x) FX_NOEXCEPT;" + OVERLOAD
    finding = _check(tmp_path, {"fx.h": header})
    assert finding.ok, finding.message
    assert "referencing 2 declared functions" in finding.message


def test_an_overloaded_name_whose_c_overload_has_cxx_linkage_fails(tmp_path: Path) -> None:
    """Must fail: int fx_a(int) is declared for C++ outside extern "C", beside its C++ overload."""
    header = C_API % "int fx_version(void);" + "int fx_a(int x);\n" + OVERLOAD
    finding = _check(tmp_path, {"fx.h": header})
    assert not finding.ok
    assert finding.message.startswith(
        "a C++ program including ['fxsdk/include/fx.h'] cannot link fx_a: fxsdk/include/fx.h:9 declares it "
        'with C++ linkage (no extern "C")'
    ), finding.message


def test_an_overloaded_name_without_its_c_overload_fails(tmp_path: Path) -> None:
    """Must fail: C declares int fx_a(int); C++ sees only fx_a(double) and fx_a(float), so a C++ program
    cannot reference the C function at all."""
    header = (
        "#pragma once\n#ifdef __cplusplus\nint fx_a(double x);\nint fx_a(float x);\n#else\nint fx_a(int x);\n"
        "#endif\n" + C_API % "int fx_version(void);"
    )
    finding = _check(tmp_path, {"fx.h": header})
    assert not finding.ok
    assert finding.message.startswith("a C++ program including ['fxsdk/include/fx.h'] does not compile")
    assert "invalid 'static_cast' from type '<unresolved overloaded function type>'" in finding.message


def test_a_function_only_c_sees_fails(tmp_path: Path) -> None:
    """Must fail: fx_a is declared for C only (#ifndef __cplusplus)."""
    header = C_API % "int fx_version(void);" + "#ifndef __cplusplus\nint fx_a(int x);\n#endif\n"
    finding = _check(tmp_path, {"fx.h": header})
    assert not finding.ok and "does not compile" in finding.message
    assert "error: 'fx_a' was not declared in this scope" in finding.message


def test_an_unexported_function_fails_at_the_link(tmp_path: Path) -> None:
    """Must fail: fx_missing has C linkage and compiles, and libfx.so does not export it: the linker's line,
    naming the program's object."""
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);\nint fx_missing(void);"})
    assert not finding.ok
    assert finding.message.startswith(
        "a C++ program using ['fxsdk/include/fx.h'] compiles but does not link against fxsdk/lib/libfx.so "
        "(exit code 1):\n"
    ), finding.message
    assert "ld: consumer.o:(.data.rel+0x8): undefined reference to `fx_missing'" in finding.message
    assert finding.details["repeatable"] is True


CXX_ONLY = "#pragma once\nnamespace fx { inline int twice(int x) { return 2 * x; } }\n"


def test_headers_declaring_only_cxx_leave_nothing_to_check(tmp_path: Path) -> None:
    """NVSHMEM's case: the headers compile for C++ and declare no C function: nothing to link, and the
    finding says so (it said "referencing 0 declared functions" before)."""
    finding = _check(tmp_path, {"fx.hpp": CXX_ONLY})
    assert finding.ok and finding.details["nothing_to_check"] is True
    assert finding.message == (
        "nothing to check: ['fxsdk/include/fx.hpp'] compile for C++ but declare no C function to link (C's "
        "parser lists none of theirs), so a program has no function of fxsdk/lib/libfx.so to reference; C's "
        "parser could not read fx.hpp, so no function of theirs is linked (fx.hpp: unknown type name 'namespace')"
    )


def test_headers_declaring_nothing_say_so(tmp_path: Path) -> None:
    finding = _check(tmp_path, {"fx.h": "#pragma once\n#define FX_VERSION 1\n"})
    assert finding.ok and finding.details["nothing_to_check"] is True
    assert "nothing to check: ['fxsdk/include/fx.h'] declare nothing" in finding.message


def test_cxx_only_headers_that_do_not_compile_still_fail(tmp_path: Path) -> None:
    """Must fail: no C function, but the C++ pass still compiles the headers, and shows why (after -H's
    list of headers without include guards, which comes first where it keeps the preprocessed program)."""
    finding = _check(tmp_path, {"fx.hpp": "namespace fx { fx_t broken; }\n"})
    assert not finding.ok and "does not compile" in finding.message
    assert "'fx_t' does not name a type" in finding.message
    assert finding.details["repeatable"] is True


def test_a_limit_hit_is_not_repeatable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Must fail, and not as repeatable (the cache keeps no such finding): the C++ pass runs out of memory
    (cc1plus says so, exit code 1) under a 100 MiB limit."""
    small = Sandbox(cpu_seconds=300, memory_bytes=100 << 20, output_chars=16 << 20)
    monkeypatch.setattr(cpp_tools, "SYNTAX", small)
    header = "#pragma once\n#include <regex>\n#include <map>\n#include <string>\nnamespace fx { int twice(int); }\n"
    finding = _check(tmp_path, {"fx.hpp": header})
    assert not finding.ok and "does not compile" in finding.message, finding.message
    assert "repeatable" not in finding.details


def _exclusive(name: str, other: str, declares: str, plain: str = "") -> str:
    """A header that cannot be included with ``other`` (cuBLAS's cublas.h and cublas_v2.h); ``plain``:
    declarations outside its extern "C" block."""
    guard = name.upper().replace(".", "_")
    return (
        f"#ifndef {guard}\n#define {guard}\n#ifdef {other.upper().replace('.', '_')}\n"
        f'#error "It is an error to include both {name} and {other}"\n#endif\n'
        + C_API % declares
        + plain
        + "#endif\n"
    )


@pytest.mark.parametrize("linkage", ["C", "C++"])
def test_the_second_program_is_checked_too(tmp_path: Path, linkage: str) -> None:
    """fx_b.h cannot be included with fx_a.h: it is checked in a second program; its function has C linkage
    (must pass: both programs' functions link) or not (must fail, saying so of the second program)."""
    b = (
        _exclusive("fx_b.h", "fx_a.h", "int fx_version(void);\nint fx_b(void);")
        if linkage == "C"
        else _exclusive("fx_b.h", "fx_a.h", "int fx_version(void);", "int fx_b(void);\n")
    )
    headers = {"fx_a.h": _exclusive("fx_a.h", "fx_b.h", "int fx_a(int x);"), "fx_b.h": b}
    finding = _check(tmp_path, headers, LIB + "int fx_b(void) { return 3; }\n")
    assert finding.ok is (linkage == "C"), finding.message
    assert finding.details["apart"] == {
        "headers": ["fx_b.h"],
        "error": '"It is an error to include both fx_b.h and fx_a.h"',
    }
    if linkage == "C":
        assert "referencing 3 declared functions" in finding.message
    else:
        assert finding.message.startswith(
            "a C++ program including ['fxsdk/include/fx_b.h'] cannot link fx_b: fxsdk/include/fx_b.h:14 "
            'declares it with C++ linkage (no extern "C")'
        ), finding.message
        assert (
            "fx_b.h compiled in a second program: they cannot be included with the others" in finding.message
        )


@pytest.mark.parametrize("where", ["C and C++", "C++ only"])
def test_a_file_opened_outside_stops_the_check(tmp_path: Path, where: str) -> None:
    """Must fail, showing nothing of the compiler: a computed #include of a file of the auditing machine,
    seen by the C pass, or only by the C++ pass (behind #ifdef __cplusplus: C never opens it)."""
    secret = tmp_path / "secret.h"
    secret.write_text("wheelwright_SECRET_TOKEN here;\n", encoding="utf-8")
    computed = f'#define FX_WHERE "{secret}"\n#include FX_WHERE\n'
    if where == "C++ only":
        computed = f"#ifdef __cplusplus\n{computed}#endif\n"
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);", "fx_more.h": computed})
    assert not finding.ok
    assert finding.message.startswith(
        "the headers of fxsdk/include make the compiler open 1 file(s) outside the wheel's headers"
    ), finding.message
    assert "SECRET" not in finding.message and str(tmp_path) not in finding.message
    assert "repeatable" not in finding.details  # not a compiler's exit code: the check stopped it


def test_a_header_of_the_sdk_opens_nothing_outside(tmp_path: Path) -> None:
    """Must pass: the same SDK without the computed include."""
    finding = _check(tmp_path, {"fx.h": C_API % "int fx_version(void);", "fx_more.h": "#pragma once\n"})
    assert finding.ok, finding.message


def _runs(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record the argv of every sandboxed tool run (the real runs, unchanged)."""
    seen: list[list[str]] = []
    real = limits.run_limited

    def recording(argv: Sequence[Any], *, cwd: Path, sandbox: Sandbox) -> Ran:
        seen.append([str(a) for a in argv])
        return real(argv, cwd=cwd, sandbox=sandbox)

    monkeypatch.setattr(cpp_tools, "run_limited", recording)
    monkeypatch.setattr(cpp_link, "run_limited", recording)
    return seen


@pytest.mark.parametrize(
    ("headers", "passes"),
    [
        ({"fx.h": C_API % "int fx_version(void);\nint fx_a(int x);"}, ["C", "C++", "link"]),
        ({"fx.hpp": CXX_ONLY}, ["C", "C++ and .ii"]),
        ({"fx.h": C_API % "int fx_a(int x);" + OVERLOAD}, ["C", "C++", "C++", "link"]),
    ],
)
def test_the_compiler_runs_of_one_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, headers: dict[str, str], passes: list[str]
) -> None:
    """One C pass, one C++ pass (syntax only: no -E, no -c; it keeps the preprocessed program only where no
    function was listed; once more where it names C++ overloads), one gcc run to link: no more."""
    cpp_tools.system_include_dirs(proc.which("g++"), "c++")  # the probe, once per process
    seen = _runs(monkeypatch)
    finding = _check(tmp_path, headers)
    assert finding.ok, finding.message

    def kind(argv: list[str]) -> str:
        if "-aux-info" in " ".join(argv):
            return "C"
        if argv[-1].endswith("consumer.cpp"):
            assert "-fsyntax-only" in argv and "-E" not in argv and "-c" not in argv, argv
            return "C++ and .ii" if "-save-temps" in argv else "C++"
        if any(a.endswith("consumer.c") for a in argv):
            return "link"
        return " ".join(argv)

    assert [kind(a) for a in seen] == passes


# cuSPARSELt's way: a C API whose header uses C11's alignas without <stdalign.h> (C++ has it as a keyword).
ALIGNAS = "typedef struct { alignas(16) unsigned char data[64]; } fx_handle_t;\nint fx_version(void);\nint fx_a(int x);"


@pytest.mark.parametrize("extra", ["", "int fx_gone(void);"])
def test_a_c_api_using_bare_alignas_is_listed_and_linked(tmp_path: Path, extra: str) -> None:
    """C's parser reads it with <stdalign.h> pre-included, so its functions are linked: one it declares
    and the library lacks fails (before, C could not read it, nothing was listed and it passed unseen)."""
    finding = _check(tmp_path, {"fx.h": C_API % (ALIGNAS + "\n" + extra)})
    assert "c_unread" not in finding.details
    if extra:
        assert not finding.ok and "undefined reference to `fx_gone'" in finding.message, finding.message
    else:
        assert finding.ok and "referencing 2 declared functions" in finding.message, finding.message


def test_headers_c_cannot_read_are_named_with_cs_first_error(tmp_path: Path) -> None:
    """A C++-only header beside a C one: compiled for C++, its functions not listed, and the finding says
    so (which header, C's first error, no path of the auditing machine)."""
    cpp_only = (
        "#pragma once\ntemplate <class T> struct fx_box { T value; };\nint fx_cpp_only(fx_box<int> b);\n"
    )
    finding = _check(
        tmp_path, {"fx.h": C_API % "int fx_version(void);\nint fx_a(int x);", "fx_box.h": cpp_only}
    )
    assert finding.ok, finding.message
    assert (
        "C's parser could not read fx_box.h, so no function of theirs is linked (fx_box.h: "
        in finding.message
    )
    assert finding.details["c_unread"]["headers"] == ["fx_box.h"]
    assert str(tmp_path) not in finding.message and "/tmp/" not in finding.message
    (tmp_path / "alone").mkdir()
    alone = _check(tmp_path / "alone", {"fx_box.h": cpp_only})
    assert alone.ok and alone.details.get("nothing_to_check") is True
    assert "C's parser could not read fx_box.h" in alone.message
