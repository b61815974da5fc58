"""The C++ consumer check's CUDA side: which headers are the CUDA toolkit's, where a consumer of the wheel
finds them on this machine, which CUDA release that consumer builds with, why the check cannot be done
when a CUDA header is still missing (:func:`with_cuda`), and which headers need a system library this
machine lacks (CUDA's VDPAU, OpenGL and EGL interop headers: :func:`lacking_system_headers`).

Split from :mod:`release.audit.cpp.tools` (the compiler's runs and output) and
:mod:`release.audit.cpp.consumer` (what to compile and what it means): :func:`toolkit_package` names the
pip package of a toolkit header; :func:`find_cuda_headers` finds the CUDA headers of installed packages
and toolkits (:class:`CudaSearch`, :class:`CudaHeaders`); :func:`wheel_cuda_major` tells the CUDA release
a consumer of the wheel builds with. Which headers are whose is data: release/resources/cuda.toml's
``[headers]``, read through :func:`release.resources.cuda.cuda`.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import posixpath
import re
import shlex
import shutil
import sysconfig
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from packaging.utils import canonicalize_name

from release.audit.checks.packages import declared_requirements
from release.audit.cpp.headers import includes
from release.audit.cpp.tools import Sdk
from release.audit.model import Contents, Expectation
from release.audit.standalone import infer_train
from release.core.machine import default_cache_dir
from release.core.nvcc import MANIFEST, read_manifest
from release.core.nvcc import dryrun as nvcc_dryrun
from release.core.sizes import KIB
from release.resources.cuda import cuda

__all__ = [
    "DRIVER_HEADERS",
    "SITE_VAR",
    "CudaHeaders",
    "CudaSearch",
    "cuda_env",
    "cuda_includes",
    "cuda_sites",
    "declared_packages",
    "find_cuda_headers",
    "lacking_system_headers",
    "pypi_manifests",
    "toolkit_package",
    "wheel_cuda_major",
    "with_cuda",
]

SITE_VAR = "WHEELWRIGHT_CUDA_SITE"  # folders laid out as site-packages, holding the wheel's CUDA packages
_ENV_KEYS = ("CUDA_HOME", "PATH", "HOME", "XDG_CACHE_HOME", "WHEELWRIGHT_CACHE", SITE_VAR)
_DRYRUN = re.compile(r"^#\$ (INCLUDES|SYSTEM_INCLUDES|_HERE_)=(.*)$", re.M)
# The CUDA driver API's headers (release/resources/cuda.toml's [headers] driver), for
# release.audit.cpp.consumer; read from the table at import.
DRIVER_HEADERS: frozenset[str] = cuda().driver_headers


@functools.cache
def _package_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((p, re.compile("|".join(map(fnmatch.translate, g)))) for p, g in cuda().toolkit_headers)


def toolkit_package(header: str, major: int | None = None) -> str | None:
    """The pip package that installs a CUDA toolkit header (``cuda_runtime.h``: ``nvidia-cuda-runtime``),
    under its name for CUDA ``major`` where wheelwright's CUDA table has one; None: not a toolkit header."""
    name = posixpath.normpath(header)
    package = next((p for p, pattern in _package_patterns() if pattern.match(name)), None)
    if package is None or major in (None, 13):
        return package
    for lib in cuda().libraries:
        thirteen, other = lib.shipped_for(13), lib.shipped_for(major)
        if thirteen is not None and other is not None and thirteen.package == package:
            return other.package
    return f"the CUDA {major} form of {package}"


@dataclass(frozen=True)
class CudaHeaders:
    """Header folders of one CUDA release that a consumer of the wheel compiles with, and where from."""

    dirs: tuple[str, ...]  # absolute, in the order nvcc searches them
    version: str  # "13.0", read from its headers; "13" for a package folder without the runtime's
    where: str  # the toolkit's home, or the package folder
    source: str  # "nvcc on PATH: /usr/local/bin/nvcc", "CUDA_HOME=...", ...

    @property
    def major(self) -> int:
        return int(self.version.split(".")[0])

    def describe(self) -> str:
        return f"the CUDA {self.version} headers of {self.where} ({self.source})"

    def holds(self, header: str) -> bool:
        return any((Path(d) / header).is_file() for d in self.dirs)


@dataclass(frozen=True)
class CudaSearch:
    """The CUDA headers found on this machine, installed packages' folders and toolkits, each in the
    order preferred; ``tried``: what was looked at and not used, in words."""

    packages: tuple[CudaHeaders, ...]
    toolkits: tuple[CudaHeaders, ...]
    tried: tuple[str, ...]

    def select(self, major: int | None) -> tuple[CudaHeaders, ...]:
        """For a wheel of CUDA ``major``: the installed packages' folders, then the first toolkit, of that
        major. ``None`` (the wheel's CUDA is not known): the major of the first toolkit found."""
        first = next(iter(self.toolkits + self.packages), None)
        major = major if major is not None or first is None else first.major
        toolkit = next((t for t in self.toolkits if t.major == major), None)
        return tuple(p for p in self.packages if p.major == major) + ((toolkit,) if toolkit else ())

    def holding(self, header: str) -> CudaHeaders | None:
        """The first headers found, of any CUDA major, that have ``header``."""
        return next((h for h in self.packages + self.toolkits if h.holds(header)), None)

    def looked_at(self) -> str:
        return "; ".join([*(f"found {h.describe()}" for h in self.packages + self.toolkits), *self.tried])


def cuda_env(environ: Mapping[str, str] | None = None) -> tuple[tuple[str, str], ...]:
    """The variables :func:`find_cuda_headers` reads, as its cache key."""
    env = os.environ if environ is None else environ
    return tuple((k, env[k]) for k in _ENV_KEYS if k in env)


@functools.cache
def find_cuda_headers(env: tuple[tuple[str, str], ...]) -> CudaSearch:
    """The CUDA headers a consumer of a wheel can have on this machine (once per process and ``env``).

    Installed packages: the include folder beside each CUDA package's ``installs_to`` (wheelwright's
    CUDA table: ``nvidia/cu13/include``, ``nvidia/cublas/include``) in each folder of
    ``WHEELWRIGHT_CUDA_SITE`` (``os.pathsep``-separated, as ``pip install --target`` fills one), else
    in this Python's site-packages. Toolkits: ``CUDA_HOME`` when set (then no other, as the build
    resolves it), else the ``nvcc`` on PATH, then the wheelwright cache's PyPI toolchains, newest
    first. A toolkit's folders are those its nvcc searches (``nvcc --dryrun``: include/ and
    include/cccl, through a wrapper script too); its version is its headers' ``CUDART_VERSION``."""
    values = dict(env)
    tried: list[str] = []
    packages = _package_headers(cuda_sites(values), tried)
    if values.get("CUDA_HOME"):
        home = values["CUDA_HOME"]
        toolkits = _toolkit(Path(home), f"CUDA_HOME={home}", values, tried)
        tried.append("CUDA_HOME is set, so no other toolkit was looked at")
        return CudaSearch(packages, toolkits, tuple(tried))
    nvcc = shutil.which("nvcc", path=values.get("PATH", ""))
    toolkits = _toolkit(None, f"nvcc on PATH: {nvcc}", values, tried, nvcc=nvcc) if nvcc else ()
    tried += [] if nvcc else ["no nvcc on PATH"]
    cache, pypi = default_cache_dir(values), list[CudaHeaders]()
    for manifest in pypi_manifests(values):
        found = (read_manifest(manifest.parent) or {}).get("cuda_home")
        if isinstance(found, str) and not found.startswith("/") and ".." not in found.split("/"):
            pypi += _toolkit(
                manifest.parent / found, "PyPI toolchain in the wheelwright cache", values, tried, ""
            )
    tried += [] if pypi else [f"no PyPI toolchain in the wheelwright cache {cache}"]
    pypi.sort(key=lambda t: tuple(int(p) for p in t.version.split(".")), reverse=True)
    return CudaSearch(packages, (*toolkits, *pypi), tuple(tried))


def cuda_sites(environ: Mapping[str, str]) -> list[str]:
    """The folders whose CUDA packages' headers a consumer has: ``WHEELWRIGHT_CUDA_SITE``'s, else this
    Python's site-packages."""
    sites = [s for s in environ.get(SITE_VAR, "").split(os.pathsep) if s]
    paths = sysconfig.get_paths()
    return sites or list(dict.fromkeys((paths["purelib"], paths["platlib"])))


def pypi_manifests(environ: Mapping[str, str]) -> list[Path]:
    """The manifests of the PyPI toolchains installed in the wheelwright cache."""
    return sorted(default_cache_dir(environ).glob(f"cuda-*/{MANIFEST}"))


def _package_headers(sites: Sequence[str], tried: list[str]) -> tuple[CudaHeaders, ...]:
    folders: dict[str, int] = {}
    for lib in cuda().libraries:
        for s in lib.shipping:
            folders.setdefault(posixpath.join(posixpath.dirname(s.installs_to), "include"), s.cuda_major)
    out = []
    for site in sites:
        for rel, major in sorted(folders.items()):
            d = Path(site) / rel
            if d.is_dir():
                dirs = (str(d), *((str(d / "cccl"),) if (d / "cccl").is_dir() else ()))
                source = f"CUDA {major} packages installed in {site}"
                out.append(CudaHeaders(dirs, _header_version(dirs) or str(major), str(d), source))
    tried += [] if out else [f"no CUDA package's headers installed in {os.pathsep.join(sites)}"]
    return tuple(out)


def _toolkit(
    home: Path | None, source: str, env: Mapping[str, str], tried: list[str], nvcc: str | None = None
) -> tuple[CudaHeaders, ...]:
    """The toolkit at ``home`` (or of ``nvcc``; ``""``: a PyPI toolchain's layout, nvcc not asked): none or one."""
    if nvcc is None and home is not None and os.access(home / "bin" / "nvcc", os.X_OK):
        nvcc = str(home / "bin" / "nvcc")
    dirs: list[str] = []
    if nvcc:
        dirs, here = _nvcc_include_dirs(nvcc, env)
        home = home or (Path(here).parent if here else None)
    if not dirs and home is not None:
        dirs = [str(d) for d in (home / "include", home / "include" / "cccl") if d.is_dir()]
    version, where = _header_version(dirs), str(home or nvcc)
    if version is None:
        tried.append(
            f"{source}: no CUDA headers at {where} (no cuda_runtime_api.h or cuda.h in its include/)"
        )
        return ()
    return (CudaHeaders(tuple(dirs), version, where, source),)


def _nvcc_include_dirs(nvcc: str, env: Mapping[str, str]) -> tuple[list[str], str | None]:
    """The folders nvcc puts on the include path (``-I``, ``-isystem``) and its real bin folder."""
    dirs: list[str] = []
    here = None
    for m in _DRYRUN.finditer(nvcc_dryrun(nvcc, env)):
        here = m[2].strip() if m[1] == "_HERE_" else here
        words = shlex.split(m[2]) if m[1] != "_HERE_" else []
        for i, word in enumerate(words):
            flag = next((f for f in ("-isystem", "-I") if word.startswith(f)), "")
            value = word[len(flag) :] or (words[i + 1] if i + 1 < len(words) else "")
            folder = os.path.normpath(value) if flag and value else ""
            if folder and Path(folder).is_dir() and folder not in dirs:
                dirs.append(folder)
    return dirs, here


def _header_version(dirs: Sequence[str]) -> str | None:
    """``13.0`` from the first ``cuda_runtime_api.h`` (``CUDART_VERSION 13000``) or ``cuda.h`` found."""
    for header, define in (("cuda_runtime_api.h", "CUDART_VERSION"), ("cuda.h", "CUDA_VERSION")):
        for path in (Path(d) / header for d in dirs):
            if path.is_file():
                with path.open("rb") as f:
                    text = f.read(256 * KIB).decode("utf-8", errors="replace")
                m = re.search(rf"^[ \t]*#[ \t]*define[ \t]+{define}[ \t]+(\d+)", text, re.M)
                if m is not None:
                    return f"{int(m[1]) // 1000}.{int(m[1]) % 1000 // 10}"
    return None


def cuda_includes(files: Mapping[str, bytes]) -> tuple[str, ...]:
    """The CUDA toolkit headers (``cuda_runtime.h``) that ``files`` include and do not ship. Pure."""
    named = {(posixpath.dirname(h), t) for h, text in files.items() for _, t in includes(text)}
    ours = files.keys()
    lacking = {
        t for d, t in named if not {posixpath.normpath(t), posixpath.normpath(posixpath.join(d, t))} & ours
    }
    return tuple(sorted(t for t in lacking if toolkit_package(t) is not None))


def declared_packages(contents: Contents) -> set[str]:
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


class Compiling(Protocol):
    """What :func:`with_cuda` needs of a prepared C++ consumer (:class:`release.audit.cpp.consumer.Prepared`)."""

    scratch: Path
    outside: tuple[str, ...]
    cuda_wanted: tuple[str, ...]
    cuda: tuple[CudaHeaders, ...]

    @property
    def missing(self) -> tuple[str, str] | None: ...

    def compile(self, cuda: tuple[CudaHeaders, ...]) -> None: ...


def _is_toolkit(header: str, search: CudaSearch) -> bool:
    return toolkit_package(header) is not None or search.holding(header) is not None


def with_cuda(
    sdk: Sdk, prepared: Compiling, contents: Contents, expectation: Expectation | None
) -> str | None:
    """Compile again with the CUDA headers of the wheel's CUDA major where the SDK's headers include CUDA
    toolkit headers it does not ship (and :func:`release.audit.cpp.consumer.prepare` used others); why the check cannot do its job when
    such a header is still missing, else None."""
    missing = prepared.missing
    if prepared.outside or (not prepared.cuda_wanted and missing is None):
        return None  # files opened outside fail the check whatever the headers
    search = find_cuda_headers(cuda_env())
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
    package = toolkit_package(header, major) or "cuda-toolkit"
    declared = "declares" if package in declared_packages(contents) else "does not declare"
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
        f"{SITE_VAR}=DIR). Looked at: {search.looked_at()}"
    )


def lacking_system_headers(
    files: Mapping[str, bytes], headers: Sequence[str], found: Callable[[str], bool]
) -> dict[str, str]:
    """The ``headers`` that need a system library (cuda.toml's ``[[headers.system]]``) whose header
    ``found`` does not find: they are one of its CUDA headers, or reach (through the SDK's own headers) an
    include of one or of a header of the library; each with what it needs, in words. Pure but for
    ``found``."""
    absent = [(s.pattern, s.title, s.needed_by) for s in cuda().system_libraries if not found(s.header)]
    needs: dict[str, str] = {}  # a file of the SDK: the library it needs, in words
    included_by: dict[str, set[str]] = {}
    for name, text in files.items():
        here = posixpath.dirname(name)
        for _, what, needing in absent:
            if posixpath.basename(name) in needing:
                needs.setdefault(name, what)
        for quote, target in includes(text):
            relative = [posixpath.normpath(posixpath.join(here, target))] if quote == b'"' else []
            ours = {*relative, posixpath.normpath(target)} & files.keys()
            for other in ours:
                included_by.setdefault(other, set()).add(name)
            for pattern, what, needing in absent if not ours else ():
                if fnmatch.fnmatch(target, pattern) or posixpath.basename(target) in needing:
                    needs.setdefault(name, what)
    out: dict[str, str] = {}
    for bad, why in sorted(needs.items()):
        todo, seen = [bad], {bad}
        while todo:
            name = todo.pop()
            if name in headers:
                out.setdefault(name, why)
            todo += [n for n in included_by.get(name, ()) if n not in seen]
            seen.update(included_by.get(name, ()))
    return out
