"""The C++ consumer check's tools: gcc and g++ run sandboxed on an SDK's headers, and their output read.

Split from :mod:`release.audit.cpp_consumer` (which decides what to compile and what it means):
the compiler's include directories, the CUDA headers a consumer of the wheel compiles with
(:func:`find_cuda_headers`), the files its preprocessor opened, the functions C's parser lists,
the consumer program's source, the compile and link commands, and the compiler's messages cut
to those about the wheel's own files.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import os
import posixpath
import re
import shlex
import shutil
import sysconfig
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.audit.limits import GIB, KIB, MIB, Ran, Sandbox, run_limited
from release.audit.model import Library
from release.core import proc
from release.core.errors import StepFailed, ToolError
from release.core.machine import default_cache_dir
from release.resources.cuda import cuda

__all__ = [
    "COMPILE",
    "LINK",
    "PREPROCESS",
    "SITE_VAR",
    "TOOLKIT_HEADERS",
    "CudaHeaders",
    "CudaSearch",
    "Sdk",
    "compile_consumer",
    "cuda_env",
    "declared_functions",
    "declares_something",
    "find_cuda_headers",
    "link_consumer",
    "messages",
    "missing_header",
    "outside_files",
    "system_include_dirs",
    "toolkit_package",
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


SITE_VAR = "WHEELWRIGHT_CUDA_SITE"  # folders laid out as site-packages, holding the wheel's CUDA packages
_ENV_KEYS = ("CUDA_HOME", "PATH", "HOME", "XDG_CACHE_HOME", "WHEELWRIGHT_CACHE", SITE_VAR)
_TOOLCHAIN_MANIFEST = "wheelwright-toolchain.json"  # a PyPI toolchain's (release.build.toolchain.MANIFEST)
_DRYRUN = re.compile(r"^#\$ (INCLUDES|SYSTEM_INCLUDES|_HERE_)=(.*)$", re.M)
_MISSING = re.compile(r"^([^\n:]+):\d+:(?:\d+:)? fatal error: ([^\n:]+): No such file or directory$", re.M)
# The CUDA toolkit's headers, by the pip package that installs each for CUDA 13: fnmatch patterns of an
# include's target, first match wins. Derived from real headers: the include/ members of NVIDIA's CUDA 13
# wheels (nvidia-cuda-runtime 13.0.96; -crt, -nvcc, -nvrtc, nvidia-nvvm 13.0.88; -cccl, -cupti,
# -profiler-api, -cuxxfilt, nvidia-nvtx 13.0.85; nvidia-cublas 13.1.1.3, -cufft 12.0.0.61, -curand
# 10.4.0.35, -cusolver 12.0.4.66, -cusparse 12.6.3.3, -cufile 1.15.1.6, -nvjitlink 13.4.92) and Debian's
# CUDA 12.4 toolkit (npp, nvJPEG, nvFatbin, nvPTXCompiler, nvToolsExt). Tests hold every top-level name
# of each toolkit found on the machine to it.
TOOLKIT_HEADERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("nvidia-cuda-crt", ("crt/*",)),
    ("nvidia-cuda-cccl", ("cccl/*", "cub/*", "thrust/*", "cuda/*", "nv/*")),
    ("nvidia-cuda-cupti", ("cupti*.h", "generated_*_meta.h", "nvperf_*.h", "cuda_stdint.h", "Openacc/*", "Openmp/*")),
    ("nvidia-cuda-profiler-api", ("cuda_profiler_api.h", "cudaProfiler.h")),
    ("nvidia-cuda-cuxxfilt", ("nv_decode.h",)),
    ("nvidia-cuda-nvcc", ("fatbinary_section.h", "nvPTXCompiler.h")),
    ("nvidia-nvvm", ("nvvm.h",)),
    ("nvidia-nvtx", ("nvtx3/*", "nvToolsExt*.h")),
    ("nvidia-cuda-nvrtc", ("nvrtc.h",)),
    ("nvidia-nvjitlink", ("nvJitLink.h",)),
    ("nvidia-nvfatbin", ("nvFatbin.h",)),
    ("nvidia-cublas", ("cublas*.h", "nvblas.h")),
    ("nvidia-cufft", ("cufft*.h", "cudalibxt.h")),
    ("nvidia-curand", ("curand*.h",)),
    ("nvidia-cusolver", ("cusolver*.h",)),
    ("nvidia-cusparse", ("cusparse.h", "cusparse_v2.h")),
    ("nvidia-npp", ("npp*.h",)),
    ("nvidia-nvjpeg", ("nvjpeg.h",)),
    ("nvidia-cufile", ("cufile.h",)),
    ("nvidia-cuda-runtime", ("builtin_types.h", "channel_descriptor.h", "common_functions.h", "cooperative_groups*",
        "cuComplex.h", "cuda*.h", "cuda*.hpp", "cudart_platform.h", "device_*.h*", "driver_*.h", "host_*.h",
        "library_types.h", "math_*.h", "mma.h", "nvfunctional", "sm_[0-9]*.h*", "surface_*.h", "texture_*.h",
        "vector_*.h*", "cuda-gdb/*")),
)  # fmt: skip


@functools.cache
def _package_patterns() -> tuple[tuple[str, re.Pattern[str]], ...]:
    return tuple((p, re.compile("|".join(map(fnmatch.translate, g)))) for p, g in TOOLKIT_HEADERS)


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


def missing_header(stderr: str) -> tuple[str, str] | None:
    """``(header, the file including it)`` of the compiler's first "No such file or directory"."""
    m = _MISSING.search(stderr)
    return (m[2].strip(), m[1].strip()) if m is not None else None


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
    sites = [s for s in values.get(SITE_VAR, "").split(os.pathsep) if s]
    paths = sysconfig.get_paths()
    packages = _package_headers(sites or list(dict.fromkeys((paths["purelib"], paths["platlib"]))), tried)
    if values.get("CUDA_HOME"):
        home = values["CUDA_HOME"]
        toolkits = _toolkit(Path(home), f"CUDA_HOME={home}", values, tried)
        tried.append("CUDA_HOME is set, so no other toolkit was looked at")
        return CudaSearch(packages, toolkits, tuple(tried))
    nvcc = shutil.which("nvcc", path=values.get("PATH", ""))
    toolkits = _toolkit(None, f"nvcc on PATH: {nvcc}", values, tried, nvcc=nvcc) if nvcc else ()
    tried += [] if nvcc else ["no nvcc on PATH"]
    cache, pypi = default_cache_dir(values), list[CudaHeaders]()
    for manifest in sorted(cache.glob(f"cuda-*/{_TOOLCHAIN_MANIFEST}")):
        try:
            home = json.loads(manifest.read_text(encoding="utf-8"))["cuda_home"]
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if isinstance(home, str) and not home.startswith("/") and ".." not in home.split("/"):
            pypi += _toolkit(
                manifest.parent / home, "PyPI toolchain in the wheelwright cache", values, tried, ""
            )
    tried += [] if pypi else [f"no PyPI toolchain in the wheelwright cache {cache}"]
    pypi.sort(key=lambda t: tuple(int(p) for p in t.version.split(".")), reverse=True)
    return CudaSearch(packages, (*toolkits, *pypi), tuple(tried))


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
    with tempfile.TemporaryDirectory(prefix="wheelwright-nvcc-") as tmp:
        (Path(tmp) / "probe.cu").write_text("", encoding="utf-8")
        try:
            argv = [nvcc, "--dryrun", "-E", "-x", "cu", "probe.cu"]
            ran = proc.run(argv, env=env, cwd=tmp, check=False, timeout=60)
        except (ToolError, StepFailed):
            return [], None
    dirs: list[str] = []
    here = None
    for m in _DRYRUN.finditer(ran.stdout + ran.stderr):
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


def declared_functions(
    headers: tuple[str, ...], include: Path, scratch: Path, cuda_dirs: tuple[str, ...] = ()
) -> tuple[list[str], list[str]]:
    """Functions declared (not defined) by the SDK's own headers, when they parse as C; and the files
    outside the SDK, ``cuda_dirs`` and the system headers that C's preprocessor opened (then no names)."""
    probe = scratch / "probe.c"
    probe.write_text("".join(f'#include "{h}"\n' for h in headers), encoding="utf-8")
    aux = scratch / "declarations.txt"
    gcc = proc.which("gcc")
    argv = [gcc, "-x", "c", "-fsyntax-only", "-H", *_QUIET, f"-aux-info={aux}", f"-I{include}"]
    result = run_limited([*argv, *_isystem(cuda_dirs), probe], cwd=scratch, sandbox=PREPROCESS)
    allowed = (str(include), *cuda_dirs, *system_include_dirs(gcc, "c"))
    outside = outside_files(result.stderr, allowed, scratch)
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


def _isystem(dirs: tuple[str, ...]) -> list[str]:
    return [arg for d in dirs for arg in ("-isystem", d)]


def _gxx(
    *args: str | Path,
    include: Path,
    scratch: Path,
    sandbox: Sandbox = COMPILE,
    cuda_dirs: tuple[str, ...] = (),
) -> Ran:
    argv = [proc.which("g++"), "-std=c++17", *_QUIET, *args, f"-I{include}", *_isystem(cuda_dirs)]
    return run_limited(argv, cwd=scratch, sandbox=sandbox)


def compile_consumer(
    headers: tuple[str, ...], include: Path, scratch: Path, cuda_dirs: tuple[str, ...] = ()
) -> tuple[Ran, Sandbox, list[str], list[str]]:
    """Preprocess alone first (every file opened must be the SDK's, ``cuda_dirs``' or the system's), then
    compile, list the declared functions, and compile again referencing them. ``cuda_dirs`` come after
    the SDK's own headers (``-isystem``). Returns the last run, its limits, the functions and the files
    opened outside (then nothing further ran)."""
    source = scratch / "consumer.cpp"
    source.write_text(_consumer_source(headers, []), encoding="utf-8")
    gxx = functools.partial(_gxx, include=include, scratch=scratch, cuda_dirs=cuda_dirs)
    pre = gxx("-E", "-H", source, "-o", scratch / "consumer.ii", sandbox=PREPROCESS)
    allowed = (str(include), *cuda_dirs, *system_include_dirs(proc.which("g++"), "c++"))
    outside = outside_files(pre.stderr, allowed, scratch)
    if len(pre.stderr) >= PREPROCESS.output_chars:
        outside.append(f"(the list of files it opened ran past {PREPROCESS.output_chars:,} characters)")
    if outside or not pre.ok:
        return pre, PREPROCESS, [], outside
    compiled = gxx("-c", source, "-o", scratch / "consumer.o")
    if not compiled.ok:
        return compiled, COMPILE, [], []
    functions, outside = declared_functions(headers, include, scratch, cuda_dirs)
    if functions:
        source.write_text(_consumer_source(headers, functions), encoding="utf-8")
        compiled = gxx("-c", source, "-o", scratch / "consumer.o")
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
