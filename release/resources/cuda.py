"""The reader of ``cuda.toml``: CUDA's libraries, headers, GPUs and runners as frozen values, read once.

``cuda()`` loads and validates the packaged file on first use (``functools.cache``);
``parse(text, source)`` does the same for any text, so a test can prove that a broken
table is refused. The helpers below (:func:`library`, :func:`is_cuda_library`, ...)
are the only way the rest of wheelwright asks "is this soname CUDA's, and whose?".
A broken table is wheelwright's own bug: :class:`ResourceError` (a
:class:`~release.core.errors.ToolError`, exit 3) names the file, the key and the fix.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib.resources
import itertools
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from release.core.errors import ToolError
from release.resources.cuda_gpus import Gpu, GpuKind, JetPack, gpu_entry
from release.resources.cuda_headers import SystemLibrary, parse_headers

__all__ = [
    "CudaFacts",
    "CudaLibrary",
    "CudaRelease",
    "Gpu",
    "GpuKind",
    "JetPack",
    "ResourceError",
    "Shipping",
    "SystemLibrary",
    "cuda",
    "is_cuda_library",
    "is_driver_library",
    "library",
    "parse",
    "repair_excludes",
    "runners",
    "stem",
]

Kind = Literal["driver", "runtime", "toolkit"]
KINDS: tuple[Kind, ...] = ("driver", "runtime", "toolkit")
SOURCE = "release/resources/cuda.toml"

_HASH_SUFFIX = re.compile(r"-[0-9a-f]{8}$")  # auditwheel repair's grafted copies: libcudart-1a2b3c4d.so.13
_MAJOR_KEY = re.compile(r"^cuda(\d{2})$")
_CC = re.compile(r"^(\d{1,2})\.(\d)$")
_VERSION = re.compile(r"^(\d{1,2})\.(\d{1,2})$")
_DRIVER = re.compile(r"^\d{3,4}(\.\d{1,3}){1,2}$")
_LIBRARY_KEYS = {"kind", "title", "family", "defines", "calls"}
_SHIPPING_KEYS = {"package", "installs_to", "soname"}


class ResourceError(ToolError):
    """wheelwright's own data file is malformed: a bug to report, not the user's input."""


@dataclass(frozen=True)
class Shipping:
    """How one CUDA major release ships a library on PyPI."""

    cuda_major: int
    package: str  # the pip distribution ("nvidia-cublas", "nvidia-cublas-cu12")
    installs_to: str  # site-packages-relative folder ("nvidia/cu13/lib")
    soname: str | None  # fnmatch pattern of the SONAME; None: versioned on its own (cuDNN, NCCL)

    def ships(self, soname: str) -> bool:
        """The soname, or a file of it (``libcudart.so.13.0.96``; a repair's ``libcudart-1a2b3c4d.so.13``)."""
        if self.soname is None:
            return False
        base, dot, rest = soname.rpartition("/")[2].partition(".so")
        plain = stem(base) + dot + rest
        return fnmatch.fnmatchcase(plain, self.soname) or fnmatch.fnmatchcase(plain, self.soname + ".*")


@dataclass(frozen=True)
class CudaLibrary:
    """One CUDA or driver library, by soname stem (``libcudart`` for ``libcudart.so.13``), or a family."""

    stem: str
    kind: Kind
    title: str  # "the CUDA runtime", "cuBLASLt"
    family: bool  # the stem is a prefix: it covers every library whose stem starts with it
    defines: tuple[str, ...]  # functions only this library defines: how a renamed copy is known
    shipping: tuple[Shipping, ...]  # by CUDA major, oldest first
    # functions only the library's own implementation imports, never a shim forwarding to it (ioctl)
    calls: tuple[str, ...] = ()

    @property
    def is_driver(self) -> bool:
        return self.kind == "driver"

    @property
    def repair_pattern(self) -> str:
        """The fnmatch pattern ``auditwheel repair --exclude`` takes for it."""
        return f"{self.stem}*.so*" if self.family else f"{self.stem}.so*"

    def shipped_for(self, cuda_major: int) -> Shipping | None:
        return next((s for s in self.shipping if s.cuda_major == cuda_major), None)

    def cuda_majors_of(self, soname: str) -> tuple[int, ...]:
        """The CUDA major releases whose packages ship exactly this soname (one soname may serve two)."""
        return tuple(s.cuda_major for s in self.shipping if s.ships(soname))

    def cuda_major_of(self, soname: str) -> int | None:
        """The one CUDA major release that ships this soname; None when none or several do."""
        majors = self.cuda_majors_of(soname)
        return majors[0] if len(majors) == 1 else None

    def describe(self, soname: str) -> str:
        """``the CUDA runtime of CUDA 12 (libcudart.so.12, from nvidia-cuda-runtime-cu12)``."""
        majors = self.cuda_majors_of(soname)
        if not majors:
            return f"{self.title} ({soname})"
        packages = " or ".join(s.package for s in self.shipping if s.cuda_major in majors)
        which = " or ".join(str(m) for m in majors)
        return f"{self.title} of CUDA {which} ({soname}, from {packages})"


Version = tuple[int, int]


@dataclass(frozen=True)
class CudaRelease:
    """One CUDA release: the PTX ISA its compiler writes, the oldest driver that runs it."""

    version: Version  # (13, 2)
    ptx_isa: Version  # (9, 2)
    driver: str | None  # "580.65.06"; None: not known to wheelwright

    @property
    def label(self) -> str:
        return f"{self.version[0]}.{self.version[1]}"

    def describe(self) -> str:
        """``CUDA 13.0 (driver >= 580.65.06)`` or ``CUDA 13.2 (driver branch not known here)``."""
        driver = f"driver >= {self.driver}" if self.driver else "driver branch not known here"
        return f"CUDA {self.label} ({driver})"


@dataclass(frozen=True)
class CudaFacts:
    libraries: tuple[CudaLibrary, ...]
    capabilities: tuple[tuple[int, int], ...]  # every compute capability that exists
    gpus: tuple[Gpu, ...]
    runners: Mapping[str, str]  # CPU architecture -> GitHub-hosted runner
    releases: tuple[CudaRelease, ...] = ()  # oldest first
    toolkit_extras: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # cuda-toolkit[extra]
    # [headers] (release/resources/cuda_headers.py): (package, header patterns) in order, first match wins
    toolkit_headers: tuple[tuple[str, tuple[str, ...]], ...] = ()
    driver_headers: frozenset[str] = frozenset()  # the CUDA driver API's headers (libcuda.so.1's functions)
    system_libraries: tuple[SystemLibrary, ...] = ()  # what CUDA's interop headers need (OpenGL, EGL, VDPAU)

    def release(self, version: Version) -> CudaRelease | None:
        return next((r for r in self.releases if r.version == version), None)

    def release_for_ptx_isa(self, isa: Version) -> CudaRelease | None:
        """The first release whose compiler writes PTX ISA ``isa`` (the oldest driver that can JIT it);
        None when the ISA is newer than every release in the table."""
        return next((r for r in self.releases if r.ptx_isa >= isa), None)

    def release_for_driver(self, driver: str) -> CudaRelease | None:
        """The newest release whose oldest driver is ``driver`` or older (``580.159.04`` -> 13.0)."""
        have = _driver_key(driver)
        fits = [r for r in self.releases if r.driver is not None and _driver_key(r.driver) <= have]
        return fits[-1] if fits else None

    def driver_named(self, text: str) -> CudaRelease:
        """``13.0`` (the CUDA version ``nvidia-smi`` prints) or ``580.159.04`` (a driver version)
        -> the CUDA release that driver runs; ValueError saying what is known (pure)."""
        text = text.strip()
        m = re.fullmatch(r"(\d{1,2})\.(\d{1,2})", text)
        if m is not None:
            found = self.release((int(m[1]), int(m[2])))
            if found is None:
                known = ", ".join(r.label for r in self.releases)
                raise ValueError(f"{text}: not a CUDA release wheelwright knows ({known})")
            return found
        if re.fullmatch(r"\d{3,4}(\.\d{1,3}){1,2}", text):
            found = self.release_for_driver(text)
            if found is None:
                oldest = next((r for r in self.releases if r.driver), None)
                raise ValueError(
                    f"{text}: older than every release wheelwright knows"
                    + (f" (the oldest: {oldest.describe()})" if oldest else "")
                )
            return found
        raise ValueError(
            f"{text!r}: write the CUDA version the driver supports ('13.0', as nvidia-smi prints it) "
            "or the driver version ('580.159.04')"
        )

    @property
    def cpus(self) -> tuple[str, ...]:
        """Every CPU the GPU table names, in table order."""
        return tuple(dict.fromkeys(c for g in self.gpus for c in g.cpus))

    def cpu_of_platform(self, tag: str | None) -> str | None:
        """The CPU of a row's platform or of a wheel's platform tag (a manylinux tag ends with it), by the
        CPUs the GPU table names; None when the tag names none of them (``any``) or is None."""
        if not tag:
            return None
        return next((c for c in self.cpus if tag == c or tag.endswith("_" + c)), None)

    def gpus_for(self, cpu: str | None, cuda_major: int | None = None) -> tuple[Gpu, ...]:
        """The GPUs a wheel for ``cpu`` of CUDA ``cuda_major`` can reach (:meth:`Gpu.serves`), in table
        order; every GPU when ``cpu`` is None."""
        return tuple(g for g in self.gpus if g.serves(cpu, cuda_major))

    def out_of_reach(self, cpu: str | None, cuda_major: int | None) -> tuple[tuple[Gpu, str], ...]:
        """The GPUs of ``cpu`` that a generic wheel of CUDA ``cuda_major`` cannot reach, each with why."""
        out = []
        for g in self.gpus:
            if (cpu is None or not g.cpus or cpu in g.cpus) and not g.serves(cpu, cuda_major):
                stacks = ", ".join(
                    f"JetPack {j.jetpack}: CUDA {j.cuda} ({j.stack.upper()})" for j in g.jetpack
                )
                out.append(
                    (
                        g,
                        f"no JetPack for it runs the generic {cpu} (SBSA) CUDA {cuda_major} stack ({stacks})",
                    )
                )
        return tuple(out)

    def gpu(self, major: int, minor: int) -> Gpu:
        """The first named GPU of that capability, else an unnamed discrete one."""
        named = next((g for g in self.gpus if (g.major, g.minor) == (major, minor)), None)
        return named or Gpu(f"compute capability {major}.{minor}", major, minor)

    def library(self, soname: str) -> CudaLibrary | None:
        """The library a soname or file name belongs to (exact stem first, then the longest family)."""
        s = stem(soname)
        exact = [lib for lib in self.libraries if not lib.family and lib.stem == s]
        if exact:
            return exact[0]
        families = [lib for lib in self.libraries if lib.family and s.startswith(lib.stem)]
        return max(families, key=lambda lib: len(lib.stem), default=None)


def _driver_key(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def stem(soname: str) -> str:
    """``libcudart.so.13`` -> ``libcudart``; a repair's grafted ``libcudart-1a2b3c4d.so.13`` too."""
    base = soname.rsplit("/", 1)[-1].split(".so", 1)[0]
    return _HASH_SUFFIX.sub("", base)


# --------------------------------------------------------------------------- loading


def _fail(where: str, message: str) -> ResourceError:
    return ResourceError(f"{SOURCE}: {where}: {message}; fix the table (a wheelwright bug, please report it)")


def _str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _fail(where, f"must be a non-empty string, not {value!r}")
    return value


def _capability(text: object, where: str) -> tuple[int, int]:
    m = _CC.match(_str(text, where))
    if m is None:
        raise _fail(where, f"{text!r} is not a compute capability like '9.0'")
    return int(m[1]), int(m[2])


def _shipping(stem_: str, major: int, raw: object, where: str) -> Shipping:
    if not isinstance(raw, dict):
        raise _fail(where, "must be a table { package, installs_to, soname }")
    unknown = set(raw) - _SHIPPING_KEYS
    if unknown:
        raise _fail(where, f"unknown keys {sorted(unknown)}; allowed: {sorted(_SHIPPING_KEYS)}")
    installs_to = _str(raw.get("installs_to"), f"{where}.installs_to")
    if installs_to.startswith("/") or ".." in installs_to.split("/"):
        raise _fail(f"{where}.installs_to", f"{installs_to!r} must be relative to site-packages")
    soname = raw.get("soname")
    if soname is not None and not _str(soname, f"{where}.soname").startswith(f"{stem_}.so"):
        raise _fail(f"{where}.soname", f"{soname!r} is not a soname of {stem_}")
    return Shipping(major, _str(raw.get("package"), f"{where}.package"), installs_to, soname)


def _library(stem_: str, raw: object) -> CudaLibrary:
    where = f"library.{stem_}"
    if not isinstance(raw, dict):
        raise _fail(where, "must be a table")
    if not stem_.startswith("lib"):
        raise _fail(where, "a library stem starts with 'lib'")
    shipping: list[Shipping] = []
    for key, value in raw.items():
        m = _MAJOR_KEY.match(key)
        if m is not None:
            shipping.append(_shipping(stem_, int(m[1]), value, f"{where}.{key}"))
        elif key not in _LIBRARY_KEYS:
            raise _fail(f"{where}.{key}", f"unknown key; allowed: {sorted(_LIBRARY_KEYS)} and cudaNN")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise _fail(f"{where}.kind", f"{kind!r} is not one of {list(KINDS)}")
    if kind == "driver" and shipping:
        raise _fail(where, "a driver library comes with the driver, never from a package")
    family = raw.get("family", False)
    defines = raw.get("defines", [])
    if not isinstance(family, bool):
        raise _fail(f"{where}.family", "must be true or false")
    if not isinstance(defines, list):
        raise _fail(f"{where}.defines", "must be a list of symbol names")
    calls = raw.get("calls", [])
    if not isinstance(calls, list):
        raise _fail(f"{where}.calls", "must be a list of symbol names")
    return CudaLibrary(
        stem_,
        cast(Kind, kind),
        _str(raw.get("title"), f"{where}.title"),
        family,
        tuple(_str(d, f"{where}.defines") for d in defines),
        tuple(sorted(shipping, key=lambda s: s.cuda_major)),
        tuple(_str(d, f"{where}.calls") for d in calls),
    )


def parse(text: str, source: str = SOURCE) -> CudaFacts:
    """Validate the table and freeze it. ResourceError naming the key for anything wrong."""
    try:
        raw: dict[str, Any] = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ResourceError(f"{source}: not valid TOML: {exc}") from None
    known = {"schema_version", "library", "gpu", "runners", "release", "toolkit_extras", "headers"}
    if set(raw) - known:
        raise _fail("top level", f"unknown keys {sorted(set(raw) - known)}")
    if raw.get("schema_version") != 1:
        raise _fail("schema_version", f"{raw.get('schema_version')!r} is not 1")
    table = raw.get("library")
    if not isinstance(table, dict) or not table:
        raise _fail("library", "no library table")
    libraries = tuple(_library(s, v) for s, v in table.items())
    for lib in libraries:
        shadow = [o.stem for o in libraries if o.family and o is not lib and lib.stem.startswith(o.stem)]
        if shadow and lib.family:
            raise _fail(f"library.{lib.stem}", f"a family inside the family {shadow[0]}")
    gpu = raw.get("gpu")
    if not isinstance(gpu, dict) or not {"capabilities", "named"} <= set(gpu) <= {
        "capabilities",
        "named",
        "since",
    }:
        raise _fail("gpu", "must be a table with capabilities, named and optionally since")
    capabilities = tuple(_capability(c, "gpu.capabilities") for c in gpu["capabilities"] or [])
    if not capabilities:
        raise _fail("gpu.capabilities", "no compute capability listed")
    gpus: list[Gpu] = []
    for index, entry in enumerate(gpu["named"] or []):
        where = f"gpu.named[{index}]"
        gpus.append(gpu_entry(entry, where, capabilities, gpu.get("since"), _fail))
    runners_ = raw.get("runners")
    if not isinstance(runners_, dict) or not runners_:
        raise _fail("runners", "must map CPU architectures to runner labels")
    releases = _releases(raw.get("release"))
    for gpu_ in gpus:
        if gpu_.since is not None and releases and gpu_.since < releases[0].version:
            raise _fail(f'gpu.since."{gpu_.major}.{gpu_.minor}"', "older than every [release]: leave it out")
    for cc in gpu.get("since") or {}:
        _capability(cc, "gpu.since")
    headers = parse_headers(raw.get("headers"), _fail)
    return CudaFacts(
        libraries,
        capabilities,
        tuple(gpus),
        {_str(k, "runners"): _str(v, f"runners.{k}") for k, v in runners_.items()},
        releases,
        _toolkit_extras(raw.get("toolkit_extras")),
        headers.toolkit,
        headers.driver,
        headers.system,
    )


def _version(text: object, where: str) -> Version:
    m = _VERSION.match(_str(text, where))
    if m is None:
        raise _fail(where, f"{text!r} is not a version like '13.0'")
    return int(m[1]), int(m[2])


def _releases(raw: object) -> tuple[CudaRelease, ...]:
    """``[release."X.Y"]`` tables, oldest first; PTX ISA versions never go down."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise _fail("release", 'must be tables [release."X.Y"]')
    out: list[CudaRelease] = []
    for key, value in raw.items():
        where = f'release."{key}"'
        version = _version(key, where)
        if not isinstance(value, dict) or not {"ptx_isa"} <= set(value) <= {"ptx_isa", "driver"}:
            raise _fail(where, "must be { ptx_isa } or { ptx_isa, driver }")
        driver = value.get("driver")
        if driver is not None and not _DRIVER.match(_str(driver, f"{where}.driver")):
            raise _fail(f"{where}.driver", f"{driver!r} is not a driver version like '580.65.06'")
        out.append(CudaRelease(version, _version(value["ptx_isa"], f"{where}.ptx_isa"), driver))
    out.sort(key=lambda r: r.version)
    for older, newer in itertools.pairwise(out):
        if newer.ptx_isa < older.ptx_isa:
            raise _fail(f'release."{newer.label}".ptx_isa', f"older than {older.label}'s")
        if older.driver and newer.driver and _driver_key(newer.driver) < _driver_key(older.driver):
            raise _fail(f'release."{newer.label}".driver', f"older than {older.label}'s")
    return tuple(out)


def _toolkit_extras(raw: object) -> Mapping[str, tuple[str, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _fail("toolkit_extras", "must map extras to lists of package names")
    out: dict[str, tuple[str, ...]] = {}
    for extra, packages in raw.items():
        if not isinstance(packages, list) or not packages:
            raise _fail(f"toolkit_extras.{extra}", "must be a non-empty list of package names")
        out[extra] = tuple(_str(p, f"toolkit_extras.{extra}") for p in packages)
    return out


@functools.cache
def cuda() -> CudaFacts:
    """The packaged table, read and validated once per process."""
    resource = importlib.resources.files("release.resources").joinpath("cuda.toml")
    try:
        text = resource.read_text(encoding="utf-8")
    except OSError as exc:
        raise ResourceError(
            f"{SOURCE}: cannot read wheelwright's CUDA table: {exc}; reinstall wheelwright"
        ) from None
    return parse(text)


# --------------------------------------------------------------------------- questions


def library(soname: str) -> CudaLibrary | None:
    """The CUDA or driver library a soname (or file name) names, else None."""
    return cuda().library(soname)


def is_cuda_library(soname: str) -> bool:
    """A library that comes from a CUDA package or the driver, never from the wheel's build."""
    return library(soname) is not None


def is_driver_library(soname: str) -> bool:
    lib = library(soname)
    return lib is not None and lib.is_driver


def repair_excludes() -> tuple[str, ...]:
    """``auditwheel repair --exclude`` patterns: every CUDA and driver library, in table order."""
    return tuple(lib.repair_pattern for lib in cuda().libraries)


def runners() -> Mapping[str, str]:
    """GitHub-hosted runner label per CPU architecture (``x86_64`` -> ``ubuntu-24.04``)."""
    return cuda().runners
