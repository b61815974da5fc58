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

Headers including CUDA toolkit headers the wheel lacks (``cuda_runtime.h``) compile as a consumer's
would: with the CUDA headers of the wheel's CUDA major found here (``-isystem``, after the wheel's);
without them the check fails as unable to check, naming the header and how to make it available.

Every tool runs sandboxed (:func:`release.audit.limits.run_limited`: a clean environment,
no terminal, limits on CPU time, memory and file size, a wall-clock limit) and only its
messages about the wheel's own files reach a finding (nothing of the auditing machine's).
Headers that declare nothing leave nothing to check, and the finding says so. Linking
only: running the program is the smoke step's job. A wheel without an SDK passes with
a note.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import canonicalize_name

from release.audit import cpp_tools
from release.audit.cpp_tools import (
    COMPILE,
    LINK,
    PREPROCESS,
    CudaHeaders,
    Sdk,
    compile_consumer,
    declares_something,
    link_consumer,
    messages,
    outside_files,
    system_include_dirs,
)
from release.audit.limits import Ran, Sandbox, first_few
from release.audit.model import Contents, Expectation, Finding, Member, fail, ok
from release.audit.packages import declared_requirements
from release.audit.standalone import infer_train
from release.resources.cuda import cuda

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
HEADER_SUFFIXES = (".h", ".hpp", ".hh", ".hxx")  # top-level SDK headers
ET_DYN = 3
NO_SDK = "no C++ SDK in the wheel (P/include/*.h next to a shared library in P/lib): nothing to link"


def find_sdks(contents: Contents) -> list[Sdk]:
    out = []
    for include_dir, names in sdk_headers(contents.wheel.files).items():
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
            out.append(Sdk(include_dir, names, libs))
    return out


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


def _includes(text: bytes) -> list[tuple[bytes, str]]:
    """Every ``(quote, target)`` a header names in an include, ``__has_include`` or dependency pragma."""
    out = []
    for start, end in _hinted_lines(text):
        for m in _INCLUDE.finditer(text, start, end):
            quote, target = next((m[i], m[i + 1]) for i in (1, 3, 5) if m[i] is not None)
            out.append((quote, target.decode("utf-8", errors="replace").strip()))
    return out


def materialize(
    include_dir: str, headers: tuple[str, ...], files: Iterable[Member], out: Path
) -> dict[str, bytes]:
    """Write the SDK headers a program including the top-level ones can reach into ``out``.

    The include closure is followed through ``#include`` lines (a superset: both
    branches of every ``#if``); a computed ``#include MACRO`` makes it write the whole
    include directory. Returns what was written, by path relative to the include directory.
    """
    prefix = include_dir + "/" if include_dir else ""
    members = {m.name: m for m in files if m.kind == "file" and m.read and m.name.startswith(prefix)}

    def data(name: str) -> bytes:
        member = members[name]
        if member.data is not None:
            return member.data
        assert member.path is not None
        return member.path.read_bytes()

    todo = [prefix + h for h in headers]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name not in members:
            continue
        seen.add(name)
        text = data(name)
        if _computed(text):
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


def cuda_includes(files: Mapping[str, bytes]) -> tuple[str, ...]:
    """The CUDA toolkit headers (``cuda_runtime.h``) that ``files`` include and do not ship. Pure."""
    named = {(posixpath.dirname(h), t) for h, text in files.items() for _, t in _includes(text)}
    ours = files.keys()
    lacking = {
        t for d, t in named if not {posixpath.normpath(t), posixpath.normpath(posixpath.join(d, t))} & ours
    }
    return tuple(sorted(t for t in lacking if cpp_tools.toolkit_package(t) is not None))


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
    written: dict[str, bytes]
    escapes: list[tuple[str, str, str]]
    compiled: Ran | None = None
    sandbox: Sandbox = COMPILE
    functions: tuple[str, ...] = ()
    outside: tuple[str, ...] = ()
    cuda_wanted: tuple[str, ...] = ()  # CUDA toolkit headers the headers include and the wheel lacks
    cuda: tuple[CudaHeaders, ...] = ()  # the CUDA headers compiled with (-isystem, after the wheel's)

    def compile(self, cuda: tuple[CudaHeaders, ...]) -> None:
        """Steps 1-3 with ``cuda``'s folders after the SDK's headers."""
        dirs = tuple(d for h in cuda for d in h.dirs)
        ran, self.sandbox, functions, outside = compile_consumer(
            self.headers, self.scratch / "include", self.scratch, dirs
        )
        self.compiled, self.cuda, self.functions, self.outside = ran, cuda, tuple(functions), tuple(outside)

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


def sdk_headers(members: Iterable[Member]) -> dict[str, tuple[str, ...]]:
    """The top-level headers of each ``include`` directory among ``members``: ``find_sdks``'s first half."""
    headers: dict[str, list[str]] = {}
    for member in members:
        if member.kind != "file" or not member.read or not member.name.endswith(HEADER_SUFFIXES):
            continue
        directory, name = posixpath.split(member.name)
        if posixpath.basename(directory) == "include":
            headers.setdefault(directory, []).append(name)
    return {d: tuple(sorted(names)) for d, names in sorted(headers.items())}


def prepare(include_dir: str, headers: tuple[str, ...], members: Iterable[Member]) -> Prepared:
    """Write the reachable headers into a fresh scratch directory, refuse escaping includes, compile.
    ``members``: the wheel's members (those read under ``include_dir`` are the headers' world)."""
    scratch = Path(tempfile.mkdtemp(prefix="wheelwright-cpp-")).resolve()
    try:
        include = scratch / "include"
        include.mkdir()
        written = materialize(include_dir, headers, members, include)
        prepared = Prepared(include_dir, headers, scratch, written, escaping_includes(written))
        if not prepared.escapes:
            prepared.cuda_wanted = cuda_includes(written)
            search = cpp_tools.find_cuda_headers(cpp_tools.cuda_env()) if prepared.cuda_wanted else None
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
    with the CUDA headers of the wheel's CUDA major, :func:`_with_cuda`, where its headers need them)."""
    root, scratch, include = contents.wheel.root, prepared.scratch, prepared.scratch / "include"
    libs = ", ".join(lib.path for lib in sdk.libraries)
    headers = [posixpath.join(sdk.include_dir, h) for h in sdk.headers]
    shown = str(headers) if len(headers) <= 3 else f"the {len(headers)} headers of {sdk.include_dir}"
    details: dict[str, object] = {
        "include_dir": sdk.include_dir,
        "headers": _listed(headers),
        "headers_written": len(prepared.written),
        "libraries": [lib.path for lib in sdk.libraries],
    }
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
    cannot = _with_cuda(sdk, prepared, contents, expectation)
    compiled, sandbox, functions, outside = (
        prepared.compiled,
        prepared.sandbox,
        prepared.functions,
        prepared.outside,
    )
    assert compiled is not None  # prepare compiles whenever no include escapes
    details["functions"] = _listed(list(functions))
    used = f" with {' and '.join(h.describe() for h in prepared.cuda)}" if prepared.cuda else ""
    if prepared.cuda:
        details["cuda_headers"] = [dataclasses.asdict(h) for h in prepared.cuda]
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
    if not compiled.ok:
        return fail(
            CHECK,
            f"a C++ program including {shown} does not compile{used} ({compiled.why(sandbox)}):\n"
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
    linked = link_consumer(sdk, scratch)
    if not linked.ok:
        return fail(
            CHECK,
            f"a C++ program using {shown} compiles but does not link against {libs} ({linked.why(LINK)}):\n"
            f"{messages(linked.stderr, sdk, root, scratch)}",
            **details,
        )
    return ok(
        CHECK,
        f"a C++ program outside the wheel compiles against {sdk.include_dir} ({_names(sdk.headers)}){used} "
        f"and links {libs}, referencing {len(functions)} declared function{'s' if len(functions) != 1 else ''}",
        **details,
    )


def _is_toolkit(header: str, search: cpp_tools.CudaSearch) -> bool:
    return cpp_tools.toolkit_package(header) is not None or search.holding(header) is not None


def _with_cuda(
    sdk: Sdk, prepared: Prepared, contents: Contents, expectation: Expectation | None
) -> str | None:
    """Compile again with the CUDA headers of the wheel's CUDA major where the SDK's headers include CUDA
    toolkit headers it does not ship (and prepare() used others); why the check cannot do its job when
    such a header is still missing, else None."""
    missing = prepared.missing
    if prepared.outside or (not prepared.cuda_wanted and missing is None):
        return None  # files opened outside fail the check whatever the headers
    search = cpp_tools.find_cuda_headers(cpp_tools.cuda_env())
    if not prepared.cuda_wanted and not (missing is not None and _is_toolkit(missing[0], search)):
        return None  # a header neither the wheel's nor CUDA's: the SDK's own failure
    major, how = wheel_cuda_major(sdk, contents, expectation)
    chosen = search.select(major)
    if chosen != prepared.cuda:
        prepared.compile(chosen)
    missing = prepared.missing
    if missing is None or not _is_toolkit(missing[0], search):
        return None
    header, includer = missing
    includer = includer.replace(f"{prepared.scratch / 'include'}/", f"{sdk.include_dir}/")
    package = cpp_tools.toolkit_package(header, major) or "cuda-toolkit"
    declared = "declares" if package in _declared(contents) else "does not declare"
    cuda_major = "CUDA" if major is None else f"CUDA {major}"
    have = (
        " and ".join(h.describe() for h in chosen) + " lack it"
        if chosen
        else f"no {cuda_major} headers were found"
    )
    other = search.holding(header)
    elsewhere = f" ({other.describe()} has it, another CUDA release)" if other and other not in chosen else ""
    return (
        f"cannot check: {includer} includes {header}, a CUDA toolkit header (pip: {package}, which the wheel "
        f"{declared}) that the wheel does not ship, and {have}{elsewhere}; the wheel is {cuda_major} ({how}). "
        f"A consumer compiles with a {cuda_major} toolkit or the CUDA packages installed: make them available "
        f"(CUDA_HOME=<a {cuda_major} toolkit>, or its nvcc on PATH; or pip install --target DIR {package} and "
        f"{cpp_tools.SITE_VAR}=DIR). Looked at: {search.looked_at()}"
    )


def _declared(contents: Contents) -> set[str]:
    """The packages the wheel declares (``cuda-toolkit[cublas]`` names its extras' packages too)."""
    out: set[str] = set()
    for d in declared_requirements(contents.wheel.metadata)[0] if contents.wheel.metadata else []:
        out.add(canonicalize_name(d.requirement.name))
        out.update(p for e in d.requirement.extras for p in cuda().toolkit_extras.get(e, ()))
    return out


def wheel_cuda_major(sdk: Sdk, contents: Contents, expectation: Expectation | None) -> tuple[int | None, str]:
    """The CUDA major a consumer of the wheel builds with, and how it was told: the claim's CUDA release,
    else what the wheel says (:func:`release.audit.standalone.infer_train`), else its SDK's folder where
    CUDA packages of one major install (``nvidia/cu13``)."""
    if expectation is not None and expectation.train:
        return int(expectation.train.split(".")[0]), f"the claim's CUDA {expectation.train}"
    metadata = contents.wheel.metadata
    train, how = infer_train(contents, declared_requirements(metadata)[0] if metadata else [])
    if train:
        return int(train.split(".")[0]), how
    parent = posixpath.dirname(sdk.include_dir)
    ships = [s for lib in cuda().libraries for s in lib.shipping]
    majors = {s.cuda_major for s in ships if s.installs_to.startswith(parent + "/")}
    if len(majors) == 1 and parent:
        return majors.pop(), f"its SDK's folder {parent}/, where CUDA packages of that release install"
    return None, how


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
        early = (prepared or {}).get((sdk.include_dir, sdk.headers))
        if early is not None:
            out.append(finish(sdk, early, contents, expectation))
            continue
        here = prepare(sdk.include_dir, sdk.headers, contents.wheel.files)
        try:
            out.append(finish(sdk, here, contents, expectation))
        finally:
            here.cleanup()
    return out
