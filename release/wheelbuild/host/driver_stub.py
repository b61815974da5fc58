"""A link stub of the CUDA driver (``libcuda.so``, soname ``libcuda.so.1``) for a CUDA home that has none.

A full CUDA toolkit carries ``lib64/stubs/libcuda.so``: FindCUDAToolkit's ``CUDA::cuda_driver`` is
that file, and ``-lcuda`` links against it. The PyPI wheels a cross CUDA_HOME is made from carry no
stub, so a project written as CMake teaches the driver API
(``target_link_libraries(... CUDA::cuda_driver)``) stopped at configure, "links to target
CUDA::cuda_driver but the target was not found", for every aarch64 row.

The stub is made here the way NVIDIA's is shaped: a shared library whose soname is ``libcuda.so.1``,
exporting, each with an empty body, every function the toolkit's own driver API headers declare
(release/resources/cuda.toml ``[headers] driver``), compiled by the row's C compiler (the cross
compiler for another CPU):

- ``cuda.h`` as the preprocessor leaves it (the header maps ``cuCtxCreate`` to ``cuCtxCreate_v4``
  and so on), in its three API forms: the default, per-thread default stream (``_ptds``/``_ptsz``,
  what ``nvcc --default-stream per-thread`` code calls) and the legacy names
  (``__CUDA_API_VERSION_INTERNAL``, which old code may still link);
- the interop and profiler headers (``cudaGL.h``, ``cudaEGL.h``, ``cudaVDPAU.h``, ``cudaProfiler.h``)
  read as text, the names they declare and the names their defines map them to: they
  include OpenGL, EGL and VDPAU headers this machine may not have, so they are not preprocessed.

Held to Debian's CUDA 12.4 stub (633 functions) with 12.4's headers, it exports 623 of them; the 10
others are the debugger's 8 internal ``cudbg*`` entry points, which no header declares, and two
per-thread forms of OpenGL calls a macro makes. The stub
serves the linker only: the wheel names ``libcuda.so.1`` in NEEDED, which the audit holds to the
driver the system installs (release/audit/checks/loader.py), and nothing of the stub is packed.

Where it goes: a cross CUDA_HOME, which wheelwright makes, carries it where a toolkit keeps it
(``targets/<arch>-linux/lib/stubs``, :mod:`release.wheelbuild.host.cross`); a native host build whose
toolkit has none (the pinned PyPI toolchain, a minimal toolkit, which wheelwright does not change)
gets it on ``LIBRARY_PATH`` and ``CMAKE_LIBRARY_PATH`` (:func:`native_driver_stub`). The host backend
asks for one or the other by the row's route.

:func:`driver_functions`, :func:`header_functions` and :func:`stub_source` are pure;
:func:`ensure_driver_stub` compiles once into the cache.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from pathlib import Path

from release.core import proc
from release.core.errors import ToolError
from release.core.locks import install_once
from release.resources.cpus import host_arch
from release.resources.cuda import cuda

STUB_NAME = "libcuda.so"
SONAME = "libcuda.so.1"
LAYOUT = 1  # what a stub folder holds; a new layout makes new folders
COMPILE_TIMEOUT_S = 120.0
# A driver API declaration after the preprocessor: ``extern CUresult cuInit(unsigned int Flags);``
# (``CUDAAPI`` is empty on Linux). Function pointer typedefs (``CUresult (*PFN_...)``) do not match.
_DECLARATION = re.compile(r"\bCUresult\s+(?:CUDAAPI\s+)?(cu[A-Za-z0-9_]+)\s*\(")
# what a header's ``#define cuGLCtxCreate cuGLCtxCreate_v2`` maps a declared name to
_RENAME = re.compile(r"^\s*#\s*define\s+(cu[A-Za-z0-9_]+)\s+(cu[A-Za-z0-9_]+)\s*$", re.MULTILINE)
# cuda.h's API forms: the default, per-thread default stream, the legacy (unversioned) names
API_FORMS: tuple[tuple[str, ...], ...] = (
    (),
    ("-DCUDA_API_PER_THREAD_DEFAULT_STREAM",),
    ("-D__CUDA_API_VERSION_INTERNAL",),
)
# cuda.h declares well over 400 functions; fewer means the header was not the driver API's
MIN_FUNCTIONS = 100
MAX_HEADER_BYTES = 16 * 1024 * 1024  # cuda.h is about 1 MB; a header past this is not read


def driver_functions(preprocessed: str) -> tuple[str, ...]:
    """The driver API's exported function names in ``cuda.h`` as the preprocessor left it, sorted."""
    return tuple(sorted(set(_DECLARATION.findall(preprocessed))))


def header_functions(text: str) -> tuple[str, ...]:
    """The functions a driver header declares, read as text: each declared name and, for each
    ``#define`` of a ``cu`` name to another, the name it maps to, sorted."""
    declared = set(_DECLARATION.findall(text))
    renamed = {new for old, new in _RENAME.findall(text) if old in declared or new.startswith(f"{old}_")}
    return tuple(sorted(declared | renamed))


def stub_source(names: tuple[str, ...]) -> str:
    """C source of a stub that exports ``names``: link-time symbols only, never called."""
    body = "".join(f"void {name}(void) {{}}\n" for name in names)
    return f"/* wheelwright: a link stub of the CUDA driver ({SONAME}); never loaded */\n{body}"


def ensure_driver_stub(include: Path, cc: Path, arch: str, cache_dir: Path) -> Path:
    """The folder holding ``libcuda.so`` (soname ``libcuda.so.1``) for the driver headers under
    ``include``, compiled by ``cc`` for ``arch``; made once per headers, compiler and CPU."""
    header = include / "cuda.h"
    if not header.is_file():
        raise ToolError(f"no cuda.h under {include}: the CUDA driver's link stub is made from it")
    others = [
        include / name for name in sorted(cuda().driver_headers - {"cuda.h"}) if (include / name).is_file()
    ]
    for path in (header, *others):
        if (size := path.stat().st_size) > MAX_HEADER_BYTES:
            raise ToolError(
                f"{path} is {size} bytes: not a CUDA driver header (at most {MAX_HEADER_BYTES} read)"
            )
    digest = hashlib.sha256(f"{LAYOUT}\0{arch}\0{cc}\0".encode())
    for path in (header, *others):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    final = cache_dir / "cuda-driver-stub" / arch / digest.hexdigest()[:16]

    def fill(tmp: Path) -> None:
        found: set[str] = set()
        for form in API_FORMS:
            pre = proc.run(
                [cc, "-E", "-P", "-x", "c", *form, f"-I{include}", header],
                timeout=COMPILE_TIMEOUT_S,
                step=f"preprocessing {header}",
            ).stdout
            found.update(driver_functions(pre))
        if len(found) < MIN_FUNCTIONS:
            raise ToolError(
                f"{header} declares {len(found)} driver functions after the preprocessor (expected hundreds): "
                "it is not the CUDA driver API's header"
            )
        for path in others:
            found.update(header_functions(path.read_text(encoding="utf-8", errors="replace")))
        names = tuple(sorted(found))
        source = tmp / "cuda_stub.c"
        source.write_text(stub_source(names), encoding="utf-8")
        proc.run(
            [cc, "-shared", "-fPIC", f"-Wl,-soname,{SONAME}", "-o", tmp / STUB_NAME, source],
            timeout=COMPILE_TIMEOUT_S,
            step=f"compiling the CUDA driver's link stub for {arch}",
        )
        source.unlink()
        (tmp / "functions.txt").write_text("\n".join(names) + "\n", encoding="utf-8")

    install_once(
        final,
        ready=lambda f: (f / STUB_NAME).is_file() and (f / "functions.txt").is_file(),
        fill=fill,
        holder=f"the {arch} CUDA driver link stub",
    )
    return final


def has_driver_stub(cuda_home: Path) -> bool:
    """Whether a toolkit carries the driver's link stub where FindCUDAToolkit looks for it."""
    folders = [cuda_home / "lib64", cuda_home / "lib", *sorted(cuda_home.glob("targets/*/lib"))]
    return any((f / "stubs" / STUB_NAME).exists() or (f / STUB_NAME).exists() for f in folders)


def native_driver_stub(cuda_home: Path, cache_dir: Path, env: Mapping[str, str]) -> Path | None:
    """The stub folder a native host build puts on its search paths: None where the toolkit at
    ``cuda_home`` has its own stub, or where no ``cuda.h`` or C compiler is here to make one (then
    ``CUDA::cuda_driver`` is not found, as without wheelwright)."""
    if has_driver_stub(cuda_home):
        return None
    includes = [cuda_home / "include", *sorted(cuda_home.glob("targets/*/include"))]
    include = next((i for i in includes if (i / "cuda.h").is_file()), None)
    try:
        cc = Path(proc.which("gcc", path=env.get("PATH")))
    except ToolError:
        return None
    return None if include is None else ensure_driver_stub(include, cc, host_arch(), cache_dir)
