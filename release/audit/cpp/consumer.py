"""Check ``cpp_consumer``: a C++ program outside the wheel can use the SDK the wheel ships.

An SDK is a directory ``P/include`` with headers directly in it (``*.h``, ``*.hpp``,
``*.hh``, ``*.hxx``) next to ``P/lib`` (or ``P/lib64``) holding at least one shared
library, as tinyaxpy ships ``tinyaxpy/include/tinyaxpy.h`` and
``tinyaxpy/lib/libtinyaxpy_kernels.so``. For each SDK, in a scratch directory outside
the extracted wheel:

0. the headers are read: the top-level ones and every header of the wheel they reach
   through ``#include`` lines (kept in memory by the extraction pass, so a big SDK such as
   torch's 9,500 headers costs only the files a program can see); the top-level headers a
   host C++ program does not include are set aside, named in the finding
   (:mod:`release.audit.cpp.headers`): CUDA device headers, written for nvcc (cuRAND's
   ``curand_kernel.h``: their functions need not link either), internal headers (their own
   ``#warning``/``#error`` says so), and headers needing a system library's headers this
   machine lacks (VDPAU's, for CUDA's interop headers); the rest, the host headers, and what
   they reach are written there. All of them left out: nothing to check;
1. the headers are a wheel's, so hostile: an ``#include`` of an absolute path or one
   climbing out of the SDK with ``..`` is refused before anything runs; then each compiler run
   on them lists every file it opens (``-H``) and any file outside the SDK's headers, the CUDA
   headers and the compiler's own include directories (``-v``: printed by the C pass itself, and
   by one probe per process for C++) stops the check, with none of the compiler's output shown
   (read before anything else of it);
2. ``gcc -x c -fsyntax-only -aux-info`` lists the functions the headers declare (those that
   parse as C: a header C's errors blame is left out of the list, once; its functions are
   included but not enumerated), but the CUDA driver API's (``cuda.h``: libcuda.so.1's,
   installed with the driver, in no wheel);
3. a generated ``consumer.cpp`` includes every host header and redeclares every listed function
   with C linkage (``extern "C" decltype(f) f;``; where C++ overloads the name, the overload of
   its C type must exist and be the one redeclared), and ``g++ -std=c++17 -fsyntax-only -H``
   checks it with ``-I P/include``, generating no code: each function must be declared for
   C++, with C linkage. A header declaring one with C++ linkage (no ``extern "C"``) makes a C++
   program reference a mangled symbol, not the C one the library exports: the finding says so
   and how to fix it. An ``#error`` in the program (headers that exclude each other, as cuBLAS's
   ``cublas.h`` and ``cublas_v2.h``): the headers it fired in or through go to a second program,
   the rest are checked again without them; both must pass (three C++ passes at most, and
   once more for a program naming new C++ overloads);
4. a generated ``consumer.c`` declares each function by its name alone (no header), takes
   its address and is compiled and linked by one ``gcc`` run against the libraries of
   ``P/lib``: the symbols a C++ program using the headers references, since step 3 showed
   each has C linkage (``--allow-shlib-undefined``: the libraries' own dependencies, such as
   the CUDA runtime, are the loader check's business, not this one's). Headers that compile for
   C++ but declare no C function (NVSHMEM's: C++ only) leave nothing to link: nothing to check,
   and the finding says so.

Headers including CUDA toolkit headers the wheel lacks (``cuda_runtime.h``) compile as a consumer's
would: with the CUDA headers of the wheel's CUDA major found here (``-isystem``, after the wheel's);
without them the check fails as unable to check, naming the header and how to make it available.

Every tool runs sandboxed (:func:`release.core.sandbox.run_limited`: a clean environment,
no terminal, limits on CPU time, memory and file size, a wall-clock limit) and only its
messages about the wheel's own files reach a finding (nothing of the auditing machine's).
Headers that declare nothing (no line of the preprocessed program, kept by step 3 where no
function was listed, comes from them) leave nothing to check, and the finding says so. Linking
only: running the program is the smoke step's job. A wheel without an SDK passes with
a note.
"""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from release.audit.cpp import cuda_headers as cpp_cuda
from release.audit.cpp import target as cpp_target
from release.audit.cpp import tools as cpp_tools
from release.audit.cpp.cuda_headers import CudaHeaders, cuda_includes
from release.audit.cpp.headers import (
    closure,
    device_headers,
    escaping_includes,
    internal_headers,
    materialize,
    reachable,
)
from release.audit.cpp.link import link_consumer, linkage_sentence
from release.audit.cpp.sdk import lib_dirs, sdk_headers
from release.audit.cpp.target import Toolchain
from release.audit.cpp.tools import (
    LINK,
    PREPROCESS,
    SYNTAX,
    Sdk,
    compile_consumer,
    declares_something,
    messages,
    outside_files,
    repeatable,
    system_include_dirs,
)
from release.audit.model import Check, Contents, Expectation, Finding, Member, fail, ok
from release.audit.reading.limits import first_few
from release.core import proc
from release.core.sandbox import Ran, Sandbox

__all__ = [
    "PREPROCESS",
    "Prepared",
    "Sdk",
    "check",
    "declares_something",
    "escaping_includes",
    "find_sdks",
    "finish",
    "materialize",
    "messages",
    "outside_files",
    "prepare",
    "sdk_headers",
    "system_include_dirs",
]

CHECK = "cpp_consumer"
ET_DYN = 3
NO_SDK = "no C++ SDK in the wheel (P/include/*.h next to a shared library in P/lib): nothing to link"


def find_sdks(contents: Contents) -> list[Sdk]:
    out = []
    for include_dir, names in sdk_headers(contents.wheel.files).items():
        siblings = lib_dirs(include_dir)
        libs = tuple(
            lib
            for lib in contents.libraries
            if lib.elf is not None
            and lib.elf.elf_type == ET_DYN
            and lib.is_shared_library
            and posixpath.dirname(lib.path) in siblings
        )
        if libs:
            out.append(Sdk(include_dir, names, libs))
    return out


def _names(names: tuple[str, ...], limit: int = 10) -> str:
    more = len(names) - limit
    return ", ".join(names[:limit]) + (f" and {more} more" if more > 0 else "")


def _listed(names: list[str], limit: int = 50) -> dict[str, object]:
    """A list for a finding's details: the first ``limit`` and how many in all (records stay small)."""
    return {"count": len(names), "first": names[:limit]}


@dataclass
class Prepared:
    """Steps 0-3 for one include directory: they need only its headers, so they can run while the
    libraries are still being unpacked (:mod:`release.audit.run`). ``scratch`` is removed by
    :meth:`cleanup`; the link (step 4) and the finding come from :func:`finish`."""

    include_dir: str
    headers: tuple[str, ...]
    scratch: Path
    escapes: list[tuple[str, str, str]]
    written: dict[str, bytes] = field(default_factory=dict)  # what the program can reach, in scratch
    device: dict[str, str] = field(default_factory=dict)  # device headers: the qualifier each uses
    internal: dict[str, str] = field(default_factory=dict)  # internal headers: what they say of it
    lacking: dict[str, str] = field(default_factory=dict)  # headers needing a system header not here
    device_files: tuple[str, ...] = ()  # every device header written: its functions need not link
    driver_files: tuple[str, ...] = ()  # the CUDA driver API's headers written: theirs are libcuda's
    apart: tuple[str, ...] = ()  # headers that cannot be included with the others: a second program
    apart_why: str = ""  # the #error that said so
    overloaded: set[str] = field(default_factory=set)  # functions C++ overloads: referenced by C type
    programs: tuple[str, ...] = ()  # the programs compiled, to link: consumer (, consumer_2)
    last: tuple[str, ...] = ()  # the headers of the last program compiled
    compiled: Ran | None = None
    sandbox: Sandbox = SYNTAX
    functions: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    cxx_linkage: tuple[tuple[str, str], ...] = ()  # functions the headers give C++ linkage, and where
    checks_only: bool = False  # every error of the last program is one of its checks, none the headers'
    c_unread: tuple[str, ...] = ()  # headers C's parser could not read (their functions not listed)
    c_why: str = ""  # C's first error in them
    cuda_wanted: tuple[str, ...] = ()  # CUDA toolkit headers the headers include and the wheel lacks
    cuda: tuple[CudaHeaders, ...] = ()  # the CUDA headers compiled with (-isystem, after the wheel's)
    toolchain: Toolchain = field(default_factory=cpp_target.native)  # builds for the wheel's architecture

    @property
    def host(self) -> tuple[str, ...]:
        """The headers for a host C++ program: neither device nor internal headers."""
        return tuple(h for h in self.headers if h not in self.device and h not in self.internal)

    def compile(self, cuda: tuple[CudaHeaders, ...]) -> None:
        """Steps 1-3 with ``cuda``'s folders after the SDK's headers, for the host headers this machine
        can compile. An ``#error`` in the program (two headers that exclude each other, as cuBLAS's
        cublas.h and cublas_v2.h): once more without the headers it fired in or through, and those
        on their own in a second program; both must pass, and link (three C++ passes at most, but
        once more for a program naming new C++ overloads)."""
        dirs = tuple(d for h in cuda for d in h.dirs)
        self.cuda, self.apart, self.apart_why, self.programs = cuda, (), "", ()
        self.compiled, self.functions, self.outside, self.cxx_linkage = None, (), (), ()
        self.lacking = cpp_cuda.lacking_system_headers(
            self.written, self.host, functools.partial(_found, dirs=dirs, gxx=self.toolchain.gxx)
        )
        headers = tuple(h for h in self.host if h not in self.lacking)
        if headers:
            self._program(headers, dirs, "consumer")
        ran = self.compiled
        if ran is None or ran.ok or self.outside or self.missing is not None:
            return
        errors = cpp_tools.error_directives(ran.stderr, headers, self.scratch / "include")
        fired = {file for _, file, _ in errors if file in self.written}
        apart = tuple(
            h
            for h in headers
            if h in {top for top, _, _ in errors}
            or fired & closure([h], self.written.keys(), self.written.__getitem__)
        )
        if not apart or len(apart) == len(headers):
            return
        self.apart, self.apart_why = apart, errors[0][2]
        self._program(tuple(h for h in headers if h not in apart), dirs, "consumer")
        if self.compiled is not None and self.compiled.ok:
            first = self.functions
            self._program(apart, dirs, "consumer_2")
            self.functions = first + tuple(f for f in self.functions if f not in first)

    def _program(self, headers: tuple[str, ...], dirs: tuple[str, ...], name: str) -> None:
        include = self.scratch / "include"
        done = compile_consumer(
            headers,
            include,
            self.scratch,
            dirs,
            (*self.device_files, *self.driver_files),
            name,
            self.overloaded,
            (self.toolchain.gcc, self.toolchain.gxx),
        )
        self.compiled, self.sandbox, self.functions, self.outside = (
            done.ran,
            done.sandbox,
            done.functions,
            done.outside,
        )
        self.cxx_linkage, self.checks_only, self.last = done.cxx_linkage, done.checks_only, headers
        self.c_unread, self.c_why = done.c_unread, done.c_why
        self.programs = (*(p for p in self.programs if p != name), name)

    @property
    def missing(self) -> tuple[str, str] | None:
        """``(header, includer)`` when the compile stopped at a header it could not find."""
        ran = self.compiled
        return cpp_tools.missing_header(ran.stderr) if ran is not None and not ran.ok else None

    @property
    def key(self) -> tuple[str, tuple[str, ...]]:
        return (self.include_dir, self.headers)

    def cleanup(self) -> None:
        shutil.rmtree(self.scratch, ignore_errors=True)


def _found(target: str, dirs: tuple[str, ...], gxx: str | None = None) -> bool:
    """Whether ``target`` is in the compiler's own include directories or ``dirs``."""
    where = (*system_include_dirs(gxx or proc.which("g++"), "c++"), *dirs)
    return any((Path(d) / target).is_file() for d in where)


def prepare(
    include_dir: str, headers: tuple[str, ...], members: Iterable[Member], toolchain: Toolchain | None = None
) -> Prepared:
    """Read the reachable headers, refuse escaping includes, set aside the headers a host program leaves
    out (:mod:`release.audit.cpp.headers`), write the rest into a fresh scratch directory, compile.
    ``members``: the wheel's members (those read under ``include_dir`` are the headers' world);
    ``toolchain``: the compilers of the wheel's architecture (:func:`release.audit.cpp.target.toolchain`;
    None: this machine's)."""
    toolchain = toolchain or cpp_target.native()
    scratch = Path(tempfile.mkdtemp(prefix="wheelwright-cpp-")).resolve()
    try:
        include = scratch / "include"
        include.mkdir()
        every = reachable(include_dir, headers, members)
        prepared = Prepared(include_dir, headers, scratch, escaping_includes(every), toolchain=toolchain)
        if not prepared.escapes:
            device = device_headers(every, tuple(every))
            prepared.device = {h: device[h] for h in headers if h in device}
            prepared.internal = internal_headers(every, [h for h in headers if h not in device])
            prepared.written = materialize(prepared.host, every, include)
            prepared.device_files = tuple(f for f in prepared.written if f in device)
            drivers = cpp_cuda.DRIVER_HEADERS
            prepared.driver_files = tuple(f for f in prepared.written if posixpath.basename(f) in drivers)
            prepared.cuda_wanted = cuda_includes(prepared.written)
            search = cpp_cuda.find_cuda_headers(cpp_cuda.cuda_env()) if prepared.cuda_wanted else None
            # the wheel's CUDA major is told later: finish() compiles again when it is another one
            prepared.compile(search.select(None) if search is not None else ())
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return prepared


def finish(
    sdk: Sdk, prepared: Prepared, contents: Contents, expectation: Expectation | None = None
) -> Finding:
    """Step 4 and the finding, from what :func:`prepare` found for ``sdk``'s headers (compiled again
    with the CUDA headers of the wheel's CUDA major, :func:`release.audit.cpp.cuda_headers.with_cuda`, where its
    headers need them)."""
    root, scratch, include = contents.wheel.root, prepared.scratch, prepared.scratch / "include"
    libs = ", ".join(lib.path for lib in sdk.libraries)
    headers = [posixpath.join(sdk.include_dir, h) for h in sdk.headers]
    details: dict[str, object] = {
        "include_dir": sdk.include_dir,
        "headers": _listed(headers),
        "headers_written": len(prepared.written),
        "libraries": [lib.path for lib in sdk.libraries],
    }
    details["toolchain"] = prepared.toolchain.to_json()
    via = f" ({prepared.toolchain.describe()})" if prepared.toolchain.cross else ""
    escapes = prepared.escapes
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
    cannot = cpp_cuda.with_cuda(sdk, prepared, contents, expectation) if prepared.host else None
    compiled, sandbox, functions, outside = (
        prepared.compiled,
        prepared.sandbox,
        prepared.functions,
        prepared.outside,
    )
    left, extra = _left_out(prepared)
    details.update(extra, functions=_listed(list(functions)))
    used = f" with {' and '.join(h.describe() for h in prepared.cuda)}" if prepared.cuda else ""
    if prepared.cuda:
        details["cuda_headers"] = [dataclasses.asdict(h) for h in prepared.cuda]
    if compiled is None:
        return ok(
            CHECK,
            f"nothing to check: no header of {sdk.include_dir} is for a host C++ program here, so it has "
            f"nothing of {libs} to use{left}",
            nothing_to_check=True,
            **details,
        )
    if outside:
        return fail(
            CHECK,
            f"the headers of {sdk.include_dir} make the compiler open {len(outside)} file(s) outside the wheel's "
            "headers, the CUDA headers and the system's (a computed or hidden #include): not compiled further, "
            "and none of the compiler's output is shown",
            **details,
        )
    if cannot is not None:
        return fail(CHECK, cannot, cannot_check=True, **details)
    last = [posixpath.join(sdk.include_dir, h) for h in prepared.last]
    shown = str(last) if len(last) <= 3 else f"the {len(last)} headers of {sdk.include_dir}"
    if (
        not compiled.ok and prepared.cxx_linkage and prepared.checks_only
    ):  # no error in the headers themselves
        sentence = linkage_sentence(sdk, prepared.cxx_linkage, include, shown, libs)
        return fail(
            CHECK,
            f"{sentence}{left}:\n{messages(compiled.stderr, sdk, root, scratch)}",
            cxx_linkage=_listed([f for f, _ in prepared.cxx_linkage]),
            **repeatable(compiled),
            **details,
        )
    if not compiled.ok:
        alone = prepared.programs[-1] != "consumer"  # the headers set apart, compiled on their own
        program = (
            f"a second C++ program, including {shown} apart from the others (an #error fired in the first),"
            if alone
            else f"a C++ program including {shown}"
        )
        return fail(
            CHECK,
            f"{program} does not compile{used}{via} ({compiled.why(sandbox)}){left}:\n"
            f"{messages(compiled.stderr, sdk, root, scratch)}",
            **repeatable(compiled),
            **details,
        )
    compiled_headers = tuple(h for h in prepared.host if h not in prepared.lacking)
    kept = [scratch / f"{p}.ii" for p in prepared.programs]  # kept where no function was listed
    if not functions and not any(not ii.is_file() or declares_something(ii, include) for ii in kept):
        return ok(
            CHECK,
            f"nothing to check: {shown} declare nothing (no line of the preprocessed program comes from "
            f"them), so a C++ program has nothing of {libs} to use{left}",
            nothing_to_check=True,
            **details,
        )
    if not functions:
        return ok(
            CHECK,
            f"nothing to check: {shown} compile for C++{used} but declare no C function to link (C's "
            f"parser lists none of theirs), so a program has no function of {libs} to reference{left}",
            nothing_to_check=True,
            **details,
        )
    linked = link_consumer(sdk, scratch, functions, prepared.toolchain.gcc)
    every = [posixpath.join(sdk.include_dir, h) for h in compiled_headers]
    shown = str(every) if len(every) <= 3 else f"the {len(every)} headers of {sdk.include_dir}"
    if not linked.ok:
        return fail(
            CHECK,
            f"a C++ program using {shown} compiles{via} but does not link against {libs} ({linked.why(LINK)}){left}:\n"
            f"{messages(linked.stderr, sdk, root, scratch)}",
            **repeatable(linked),
            **details,
        )
    return ok(
        CHECK,
        f"a C++ program outside the wheel compiles against {sdk.include_dir} ({_names(compiled_headers)}){used} "
        f"and links {libs}, referencing {len(functions)} declared function{'s' if len(functions) != 1 else ''}"
        f"{via}{left}",
        **details,
    )


def _left_out(prepared: Prepared) -> tuple[str, dict[str, object]]:
    """What the program left out or compiled apart, in words (``; ...`` after a finding's first sentence)
    and for its details."""
    words: list[str] = []
    details: dict[str, object] = {}
    device, internal = tuple(sorted(prepared.device)), tuple(sorted(prepared.internal))
    if device:
        s = "s" if len(device) != 1 else ""
        words.append(f"{len(device)} device header{s}, for nvcc, left to a CUDA consumer: {_names(device)}")
    if prepared.c_unread:  # C++ only, or C cannot parse them: compiled for C++, their functions unlisted
        words.append(f"C's parser could not read {_names(prepared.c_unread)}, so no function of theirs is linked "
                     f"({prepared.c_why})")  # fmt: skip
        details["c_unread"] = {"headers": list(prepared.c_unread), "error": prepared.c_why}
    if internal:
        s = "s" if len(internal) != 1 else ""
        words.append(
            f"{len(internal)} internal header{s}, left out as their own #warning or #error asks: {_names(internal)}"
        )
    if prepared.driver_files:
        names = tuple(sorted(prepared.driver_files))
        words.append(
            f"the functions of {_names(names)} not linked: the CUDA driver's (libcuda.so.1, in no wheel)"
        )
        details["driver_headers"] = list(names)
    for why in sorted(set(prepared.lacking.values())):
        names = tuple(sorted(h for h, w in prepared.lacking.items() if w == why))
        words.append(f"not compiled here, for want of {why}: {_names(names)}")
    for key, found in (
        ("device", prepared.device),
        ("internal", prepared.internal),
        ("lacking", prepared.lacking),
    ):
        if found:
            details[f"{key}_headers"] = {"count": len(found), "first": dict(sorted(found.items())[:50])}
    if prepared.apart:
        second = (
            "compiled in a second program" if "consumer_2" in prepared.programs else "set apart, not compiled"
        )
        words.append(
            f"{_names(prepared.apart)} {second}: they cannot be included with the others ({prepared.apart_why})"
        )
        details["apart"] = {"headers": list(prepared.apart), "error": prepared.apart_why}
    return "".join(f"; {w}" for w in words), details


def check(
    contents: Contents,
    expectation: Expectation,
    prepared: Mapping[tuple[str, tuple[str, ...]], Prepared] | None = None,
) -> list[Finding]:
    """``prepared``: steps 0-3 already run, by (include directory, headers); used where an SDK's
    headers are the same, prepared here otherwise. The caller removes what it passed in."""
    sdks = find_sdks(contents)
    if not sdks:
        return [ok(CHECK, NO_SDK)]
    out = []
    for sdk in sdks:
        target, foreign = cpp_target.for_sdk(CHECK, sdk, contents.wheel.platform_tags)
        if foreign is not None:  # told from the ELF headers: no tool of any architecture needed
            out.append(foreign)
            continue
        chain = cpp_target.toolchain(target)  # ToolError (exit 3): none for the wheel's architecture here
        early = (prepared or {}).get((sdk.include_dir, sdk.headers))
        if early is not None and early.toolchain == chain:
            out.append(finish(sdk, early, contents, expectation))
            continue
        here = prepare(sdk.include_dir, sdk.headers, contents.wheel.files, chain)
        try:
            out.append(finish(sdk, here, contents, expectation))
        finally:
            here.cleanup()
    return out


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "C++ consumer", check, needs_claim=False)
