"""A row's build environment and cibuildwheel options. Pure: no os.environ, no files, no processes.

The same row gives the same variables on the host and in a container; only the
toolkit's location differs (the resolved toolchain on the host, ``/usr/local/cuda``
in the row's builder image). The repair step is one argv with cibuildwheel's
``{dest_dir}``/``{wheel}`` placeholders, used by both backends.

Variables a build gets (``<P>`` is the project name upper-cased, ``tinyaxpy`` ->
``TINYAXPY``). The arch list reaches every mainstream build system (:func:`arch_routes`):

============================ ============================================================
``WHEELWRIGHT_VARIANT``      ``cpu`` or ``cu130``: from the row, never from the machine
``<P>_VARIANT``              the same, under the project's own prefix
``WHEELWRIGHT_ROW``          the row id, for logs
``TORCH_CUDA_ARCH_LIST``     CUDA rows: ``7.5;8.0;...;12.0+PTX`` (PyTorch's cpp_extension)
``CUDAARCHS``                CUDA rows: ``75-real;...;120-real;120-virtual`` (CMake reads it)
``CMAKE_ARGS``               CUDA rows: ``-DCMAKE_CUDA_ARCHITECTURES=<that list>
                             -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared`` (scikit-build-core and
                             conda-style builds pass it to CMake); CPU rows: CMake's
                             find_package(CUDAToolkit) and find_package(CUDA) disabled
``CUFLAGS``                  CUDA rows: the ``-gencode`` flags (meson's CUDA compile args)
``CMAKE_CUDA_ARCHITECTURES`` CUDA rows: the CMake list, for projects that read it themselves
                             (CMake itself ignores an environment variable of that name)
``NVCC_APPEND_FLAGS``        CUDA rows: ``-objtemp`` (nvcc names its intermediate files after
                             the object, not its pid: reproducible objects)
``CUDA_HOME``, ``CUDACXX``   CUDA rows: the toolkit and its nvcc
``PATH``                     CUDA rows: the toolkit's ``bin`` first
``CPATH``                    CUDA rows, host builds: the inherited entries, then the include
                             folders of the CUDA pip packages the build environment holds
                             (torch's cuBLAS, cuSPARSE... headers; :func:`pip_cuda_headers`)
``CPATH``, ``LIBRARY_PATH``, ``CMAKE_LIBRARY_PATH``, ``CMAKE_INCLUDE_PATH``: CUDA rows whose
                             train declares CUDA math libraries (``nvidia-cublas``): their folder
                             for the row's CPU first (release/wheelbuild/host/math_libs.py)
``WHEELWRIGHT_KERNEL_CACHE`` / ``<P>_KERNEL_CACHE``: where compiled kernels are reused
============================ ============================================================

Removed from the inherited environment for every row: every CUDA location variable,
every arch, nvcc-flag or CMake-argument variable (a CPU row on a machine with nvcc still
builds a CPU wheel; a shell's ``NVCC_APPEND_FLAGS`` or ``CMAKE_ARGS`` cannot add
architectures), and every ``WHEELWRIGHT_*`` / ``<P>_*`` variable (only the row sets those).
A CPU row's host build also loses every ``PATH`` folder that holds nvcc and every include
or library path into a CUDA toolkit (:func:`hide_cuda`, decided from facts the caller reads).
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from release.policy.archs import nvcc_gencode_flags
from release.policy.matrix import CPU_IMAGE, Row
from release.resources.cuda import cuda
from release.wheelbuild.host.math_libs import search_paths
from release.wheelbuild.repair.auditwheel import repair_argv
from release.wheelbuild.toolchain import Toolchain

# Where the builder images keep their toolkit, and where kernels are reused inside
# one container (one cibuildwheel run keeps its container across identifiers).
CONTAINER_CUDA_HOME = PurePosixPath("/usr/local/cuda")
CONTAINER_KERNEL_CACHE = PurePosixPath("/tmp/wheelwright-kernels")  # noqa: S108 (in the container)

# Variables that point a build at a CUDA toolkit or choose what it compiles for.
CUDA_ENV_VARS: tuple[str, ...] = (
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDA_TOOLKIT_ROOT_DIR",
    "CUDAToolkit_ROOT",
    "CUDACXX",
    "CUDAHOSTCXX",
    "TORCH_CUDA_ARCH_LIST",
    "CMAKE_CUDA_ARCHITECTURES",
    "CUDAARCHS",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "CUDAFLAGS",
    "CUFLAGS",
    "CMAKE_ARGS",
    "SKBUILD_CMAKE_ARGS",
    "SKBUILD_CMAKE_DEFINE",
)
# CMake defines every CUDA row passes (CMAKE_ARGS): the row's arch list, and the shared CUDA
# runtime the row's contract wants (CMake links nvcc-compiled targets with the static one
# unless told).
CUDA_CMAKE_RUNTIME = "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared"
# A CPU row's CMake finds no CUDA toolkit, even one at a fixed path like /usr/local/cuda.
CPU_CMAKE_ARGS = "-DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DCMAKE_DISABLE_FIND_PACKAGE_CUDA=ON"
# nvcc names intermediate files after the object instead of tmpxft_<pid>_...: the name lands
# in the object's symbol table, so without this two builds of one source differ.
NVCC_REPRODUCIBLE = "-objtemp"
# Programs of a CUDA toolkit: a PATH folder holding one is hidden from a CPU row's build.
CUDA_TOOLS: tuple[str, ...] = (
    "nvcc",
    "ptxas",
    "nvlink",
    "fatbinary",
    "cudafe++",
    "cuobjdump",
    "nvdisasm",
    "nvprune",
    "cu++filt",
    "bin2c",
)
# Search paths whose entries into a CUDA toolkit a CPU row's build loses.
CUDA_SEARCH_PATHS: tuple[str, ...] = (
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "LD_LIBRARY_PATH",
)


def env_prefix(project_name: str) -> str:
    """``tinyaxpy`` -> ``TINYAXPY``; ``my-pkg`` -> ``MY_PKG``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", project_name).strip("_").upper()


# --------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class BuildEnv:
    """Changes to an inherited environment: what is set, removed and put first on PATH."""

    set: Mapping[str, str]
    unset: tuple[str, ...]
    unset_prefixes: tuple[str, ...]
    path_prepend: tuple[str, ...] = ()
    # (name, entry): a search path entry put first on what the build inherits (the math libraries)
    search_prepend: tuple[tuple[str, str], ...] = ()

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in self.unset and not k.startswith(self.unset_prefixes)}
        env.update(self.set)
        for name, entry in self.search_prepend:
            rest = [p for p in env.get(name, "").split(":") if p and p != entry]
            env[name] = ":".join([entry, *rest])
        if self.path_prepend:
            rest = [p for p in env.get("PATH", "").split(":") if p and p not in self.path_prepend]
            env["PATH"] = ":".join([*self.path_prepend, *rest])
        return env

    def lines(self) -> list[str]:
        """What is dropped from the inherited environment, then ``KEY=value`` lines, sorted."""
        dropped = [k for k in self.unset if k not in self.set]
        dropped += [f"{p}*" for p in self.unset_prefixes]
        out = [f"# dropped from the inherited environment: {' '.join(dropped)}"]
        out += [f"{k}={shlex.quote(v)}" for k, v in sorted(self.set.items())]
        if self.path_prepend:
            out.append(f"PATH={shlex.quote(':'.join(self.path_prepend))}:$PATH")
        out += [f"{name}={shlex.quote(entry)}:${name}" for name, entry in self.search_prepend]
        return out


def _env_changes(
    row: Row,
    *,
    cuda_home: str | None,
    nvcc: str | None,
    bin_dir: str | None,
    kernel_cache: str | None,
    project_name: str | None,
    math_libs: Path | None = None,
    driver_stub: Path | None = None,
) -> BuildEnv:
    prefixes = ["WHEELWRIGHT_"]
    names = ["WHEELWRIGHT"]
    if project_name:
        prefix = env_prefix(project_name)
        if prefix != "WHEELWRIGHT":
            prefixes.append(f"{prefix}_")
            names.append(prefix)
    values: dict[str, str] = {"WHEELWRIGHT_ROW": row.id}
    for name in names:
        values[f"{name}_VARIANT"] = row.variant
        if kernel_cache is not None:
            values[f"{name}_KERNEL_CACHE"] = kernel_cache
    path: tuple[str, ...] = ()
    if row.is_cuda:
        assert cuda_home is not None and nvcc is not None and bin_dir is not None
        values["CUDA_HOME"] = cuda_home
        values["CUDACXX"] = nvcc
        values.update(arch_variables(row))
        values["NVCC_APPEND_FLAGS"] = NVCC_REPRODUCIBLE
        path = (bin_dir,)
    else:
        values["CMAKE_ARGS"] = CPU_CMAKE_ARGS
    search: tuple[tuple[str, str], ...] = ()
    if row.is_cuda and math_libs is not None:
        search += tuple(search_paths(math_libs).items())
    if row.is_cuda and driver_stub is not None:  # after the math libraries: -lcuda, CUDA::cuda_driver
        search += (("LIBRARY_PATH", str(driver_stub)), ("CMAKE_LIBRARY_PATH", str(driver_stub)))
    return BuildEnv(
        set=dict(sorted(values.items())),
        unset=CUDA_ENV_VARS,
        unset_prefixes=tuple(prefixes),
        path_prepend=path,
        search_prepend=search,
    )


def arch_variables(row: Row) -> dict[str, str]:
    """The variables that carry a CUDA row's arch list to every mainstream build system."""
    cmake = row.cmake_cuda_architectures
    return {
        "TORCH_CUDA_ARCH_LIST": row.torch_cuda_arch_list,
        "CUDAARCHS": cmake,
        "CMAKE_CUDA_ARCHITECTURES": cmake,
        "CMAKE_ARGS": f"-DCMAKE_CUDA_ARCHITECTURES={cmake} {CUDA_CMAKE_RUNTIME}",
        "CUFLAGS": " ".join(nvcc_gencode_flags(row.gpu_archs)),
    }


def arch_routes(row: Row) -> tuple[str, ...]:
    """How the row's arch list reaches each build system, one line each (the dry run prints them)."""
    if not row.is_cuda:
        return (
            "none: a CPU row names no architecture; nvcc, CUDA_HOME and CUDA include paths are hidden, "
            f"and CMake's find_package(CUDAToolkit|CUDA) is disabled (CMAKE_ARGS={CPU_CMAKE_ARGS})",
        )
    return (
        f"PyTorch cpp_extension, setuptools builds: TORCH_CUDA_ARCH_LIST={row.torch_cuda_arch_list}",
        f"CMake (any driver): CUDAARCHS={row.cmake_cuda_architectures}",
        "scikit-build-core, conda-style setup.py: -DCMAKE_CUDA_ARCHITECTURES in CMAKE_ARGS, with "
        f"{CUDA_CMAKE_RUNTIME} (not SKBUILD_CMAKE_ARGS: scikit-build-core splits that on ';', "
        "which cuts a CMake list apart)",
        "meson, meson-python: CUFLAGS (the -gencode flags; meson reads it as cuda_args)",
        "nvcc called by the project: TORCH_CUDA_ARCH_LIST or CMAKE_CUDA_ARCHITECTURES, as it reads them",
    )


# --------------------------------------------------------------------------- CPU rows: no CUDA


@dataclass(frozen=True)
class PathFacts:
    """What one folder of a search path holds, as far as hiding CUDA goes (read by the caller)."""

    cuda_tools: tuple[str, ...]  # names of CUDA_TOOLS in it
    toolkit_bin: bool  # the bin folder of a toolkit (its parent has include/cuda_runtime.h)
    cuda_headers: bool  # holds cuda_runtime.h or cuda.h
    cuda_libraries: bool  # holds libcudart.so*


@dataclass(frozen=True)
class HiddenCuda:
    """A CPU row's search paths with CUDA taken out: what is dropped and which folders are mirrored."""

    path: tuple[str, ...]  # the new PATH entries, in order
    mirrors: Mapping[str, tuple[str, tuple[str, ...]]]  # mirror folder -> (source folder, names left out)
    search: Mapping[str, str | None]  # CPATH & co.: new value (None: unset)
    dropped: tuple[str, ...]  # what was taken out, for the dry run and the log


def hide_cuda(env: Mapping[str, str], facts: Mapping[str, PathFacts], *, mirror_root: str) -> HiddenCuda:
    """Take CUDA out of a CPU row's PATH and include/library paths (pure).

    A toolkit's ``bin`` folder leaves PATH; any other folder holding a CUDA program (a
    ``/usr/local/bin/nvcc`` wrapper) is replaced by a mirror of itself without those
    programs. Entries of CPATH, C(PLUS)_INCLUDE_PATH, LIBRARY_PATH and LD_LIBRARY_PATH that
    hold CUDA headers or libcudart are dropped. ``facts`` holds every folder named.
    """
    path: list[str] = []
    mirrors: dict[str, tuple[str, tuple[str, ...]]] = {}
    dropped: list[str] = []
    for index, entry in enumerate(env.get("PATH", "").split(":")):
        fact = facts.get(entry)
        if not entry or fact is None or not fact.cuda_tools:
            if entry:
                path.append(entry)
            continue
        if fact.toolkit_bin:
            dropped.append(f"PATH entry {entry} (a CUDA toolkit's bin)")
            continue
        mirror = f"{mirror_root}/{index}"
        mirrors[mirror] = (entry, fact.cuda_tools)
        path.append(mirror)
        dropped.append(f"{', '.join(fact.cuda_tools)} from PATH entry {entry} (mirrored without them)")
    search: dict[str, str | None] = {}
    for name in CUDA_SEARCH_PATHS:
        if name not in env:
            continue
        kept: list[str] = []
        for entry in env[name].split(":"):
            fact = facts.get(entry)
            if fact is not None and (fact.cuda_headers or fact.cuda_libraries):
                dropped.append(f"{name} entry {entry}")
            else:
                kept.append(entry)
        search[name] = ":".join(kept) if any(kept) else None
    return HiddenCuda(tuple(path), mirrors, search, tuple(dropped))


def apply_hidden(env: Mapping[str, str], hidden: HiddenCuda) -> dict[str, str]:
    """``env`` with :func:`hide_cuda`'s result applied (pure)."""
    out = dict(env)
    out["PATH"] = ":".join(hidden.path)
    for name, value in hidden.search.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


# --------------------------------------------------------------------------- CUDA rows: the pip packages' headers


def pip_cuda_include_dirs(cuda_major: int, present: Iterable[str]) -> tuple[str, ...]:
    """Of ``present`` (site-packages-relative folders that exist: ``nvidia/cu13/include``,
    ``nvidia/cudnn/include``), the include folders of the pip packages that ship CUDA
    ``cuda_major``'s libraries, by cuda.toml (each library's ``installs_to`` with ``include`` for
    its last part), sorted (pure). A CUDA 12 package's folder (``nvidia/cublas/include``) is not
    a CUDA 13 row's."""
    wanted = set()
    for library in cuda().libraries:
        shipping = library.shipped_for(cuda_major)
        if shipping is not None:
            wanted.add(str(PurePosixPath(shipping.installs_to).parent / "include"))
    return tuple(sorted(d for d in set(present) if d in wanted))


def pip_cuda_headers(
    row: Row, site_packages: str, dirs: Sequence[str], inherited_cpath: str | None, *, enabled: bool = True
) -> dict[str, str]:
    """``CPATH`` for a CUDA row whose build environment holds CUDA packages' headers (pure).

    torch depends on the CUDA math libraries' pip packages (nvidia-cublas, -cusparse, -cusolver...),
    whose headers install beside the libraries (``nvidia/cu13/include``); ATen's
    ``ATen/cuda/CUDAContext.h`` includes ``cusparse.h`` and ``cublas_v2.h``, which a toolkit of only
    the compiler and the runtime (PyPI's toolchain, a minimal install) lacks. gcc, and nvcc through
    it, read ``CPATH`` in every build system (cpp_extension, CMake, meson) and search it after every
    ``-I``: the toolkit's own headers (``-I$CUDA_HOME/include``) win, and only what it lacks comes
    from the packages, the versions torch itself was built with. The inherited ``CPATH`` stays first.
    ``enabled=False``, a CPU row or no folder: nothing (``{}``).
    """
    if not enabled or not row.is_cuda or not dirs:
        return {}
    kept = [e for e in (inherited_cpath or "").split(":") if e]
    added = [f"{site_packages.rstrip('/')}/{d}" for d in dirs]
    return {"CPATH": ":".join([*kept, *(a for a in added if a not in kept)])}


def build_env_changes(
    row: Row,
    toolchain: Toolchain | None,
    *,
    kernel_cache: Path | None,
    project_name: str | None = None,
) -> BuildEnv:
    """The host build's environment changes for a row (see the module docstring)."""
    if row.is_cuda and toolchain is None:
        raise ValueError(f"row {row.id} is a CUDA row and needs a toolchain")
    if row.is_cuda and toolchain is not None and toolchain.version != row.train:
        raise ValueError(f"row {row.id} needs CUDA {row.train}, not the {toolchain.version} toolchain")
    tc = toolchain if row.is_cuda else None
    return _env_changes(
        row,
        cuda_home=None if tc is None else str(tc.cuda_home),
        nvcc=None if tc is None else str(tc.nvcc),
        bin_dir=None if tc is None else str(tc.bin_dir),
        kernel_cache=None if kernel_cache is None else str(kernel_cache),
        project_name=project_name,
        math_libs=None if tc is None else tc.math_libs,
        driver_stub=None if tc is None else tc.driver_stub,
    )


def build_environment(
    row: Row,
    toolchain: Toolchain | None,
    *,
    kernel_cache: Path | None,
    project_name: str | None = None,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The complete environment of a host build of ``row``, derived from ``base``.

    With no ``base`` the result holds only what the row sets (PATH is then the
    toolchain's bin folder alone). A CPU row's environment has no CUDA variable at all,
    whatever ``base`` holds.
    """
    changes = build_env_changes(row, toolchain, kernel_cache=kernel_cache, project_name=project_name)
    return changes.apply(base or {})


def container_env_changes(row: Row, *, project_name: str | None = None) -> BuildEnv:
    """The environment changes inside the row's builder image."""
    return _env_changes(
        row,
        cuda_home=str(CONTAINER_CUDA_HOME),
        nvcc=str(CONTAINER_CUDA_HOME / "bin" / "nvcc"),
        bin_dir=str(CONTAINER_CUDA_HOME / "bin"),
        kernel_cache=str(CONTAINER_KERNEL_CACHE),
        project_name=project_name,
    )


# --------------------------------------------------------------------------- cibuildwheel


def _cibw_environment(changes: BuildEnv) -> str:
    """CIBW_ENVIRONMENT syntax: ``K=v`` pairs, shell-quoted, PATH extended with $PATH."""
    parts = [f"{k}={shlex.quote(v)}" for k, v in changes.set.items()]
    if changes.path_prepend:
        prepend = ":".join(changes.path_prepend)
        if '"' in prepend or "$" in prepend or "\\" in prepend or "`" in prepend:
            raise ValueError(f"cannot put {prepend!r} on PATH in CIBW_ENVIRONMENT")
        parts.append(f'PATH="{prepend}:$PATH"')
    return " ".join(parts)


# where the container's build reads the merged build constraints (written by before-build)
CONTAINER_CONSTRAINTS = "/tmp/wheelwright-build-constraints.txt"  # noqa: S108 - inside the throwaway container, as cibuildwheel's /tmp/cibuildwheel


def cibuildwheel_config(
    row: Row, *, project_name: str | None = None, constraints: Sequence[str] = ()
) -> dict[str, str]:
    """cibuildwheel's options (as CIBW_* variables) that build exactly this row.

    The image is the row's builder image; a CPU row's ``default`` leaves cibuildwheel's
    own pinned manylinux image. A CUDA row first checks that the image's nvcc is the
    row's train. Tests are skipped here: the smoke step installs and runs the wheel.
    ``constraints``: the merged build constraints lines (wheelwright's, the project's, the
    train's: what a host build's isolated environment is made under); before-build writes them
    into the container and ``PIP_CONSTRAINT`` makes ``python -m build``'s isolated environment
    honour them, so both backends resolve the same build requirements.
    """
    arch = row.platform
    changes = container_env_changes(row, project_name=project_name)
    if constraints:
        changes = dataclasses.replace(changes, set={**changes.set, "PIP_CONSTRAINT": CONTAINER_CONSTRAINTS})
    config: dict[str, str] = {
        "CIBW_BUILD": row.cibw_identifier,
        "CIBW_ARCHS_LINUX": arch,
        "CIBW_ARCHS": arch,
        "CIBW_SKIP": "",
        "CIBW_ENABLE": "",
        "CIBW_BUILD_VERBOSITY": "1",
        "CIBW_ENVIRONMENT_LINUX": _cibw_environment(changes),
        "CIBW_ENVIRONMENT_PASS_LINUX": "",
        "CIBW_REPAIR_WHEEL_COMMAND_LINUX": " ".join(
            a if a in ("{dest_dir}", "{wheel}") else shlex.quote(a) for a in repair_argv(row)
        ),
        "CIBW_TEST_SKIP": "*",
    }
    if row.builder_image != CPU_IMAGE:
        config[f"CIBW_MANYLINUX_{arch.upper()}_IMAGE"] = row.builder_image
    if constraints:
        lines = " ".join(shlex.quote(line) for line in constraints)
        config["CIBW_BEFORE_BUILD_LINUX"] = f"printf '%s\\n' {lines} > {CONTAINER_CONSTRAINTS}"
    if row.is_cuda:
        nvcc = CONTAINER_CUDA_HOME / "bin" / "nvcc"
        config["CIBW_BEFORE_ALL_LINUX"] = (
            f"{nvcc} --version | grep -F 'release {row.train},' || "
            f"{{ echo 'wheelwright: {row.builder_image} has no CUDA {row.train} nvcc at {nvcc}' >&2; "
            "exit 1; }"
        )
    return dict(sorted(config.items()))
