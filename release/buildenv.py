"""A row's build environment, cibuildwheel options and build plan. Pure: no os.environ,
no files, no processes.

The same row gives the same variables on the host and in a container; only the
toolkit's location differs (the resolved toolchain on the host, ``/usr/local/cuda``
in the row's builder image). The repair step is one argv with cibuildwheel's
``{dest_dir}``/``{wheel}`` placeholders, used by both backends.

Variables a build gets (``<P>`` is the project name upper-cased, ``tinyaxpy`` ->
``TINYAXPY``):

=========================== ============================================================
``WHEELWRIGHT_VARIANT``     ``cpu`` or ``cu130``: from the row, never from the machine
``<P>_VARIANT``             the same, under the project's own prefix
``WHEELWRIGHT_ROW``         the row id, for logs
``TORCH_CUDA_ARCH_LIST``    CUDA rows: ``7.5;8.0;...;12.0+PTX``
``CMAKE_CUDA_ARCHITECTURES`` CUDA rows: ``75-real;...;120-real;120-virtual``
``CUDA_HOME``, ``CUDACXX``  CUDA rows: the toolkit and its nvcc
``PATH``                    CUDA rows: the toolkit's ``bin`` first
``WHEELWRIGHT_KERNEL_CACHE`` / ``<P>_KERNEL_CACHE``: where compiled kernels are reused
=========================== ============================================================

Removed from the inherited environment for every row: every CUDA location variable
and every arch or nvcc-flag variable (a CPU row on a machine with nvcc still builds a
CPU wheel; a shell's ``NVCC_APPEND_FLAGS`` cannot add architectures), and every
``WHEELWRIGHT_*`` / ``<P>_*`` variable (only the row sets those).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from release.matrix import CPU_IMAGE, Row
from release.toolchain import Toolchain

Backend = Literal["host", "container"]

# Where the builder images keep their toolkit, and where kernels are reused inside
# one container (one cibuildwheel run keeps its container across identifiers).
CONTAINER_CUDA_HOME = PurePosixPath("/usr/local/cuda")
CONTAINER_KERNEL_CACHE = PurePosixPath("/tmp/wheelwright-kernels")  # noqa: S108 (in the container)

# The host backend's per-Python build venv, installed exactly (pip --no-deps): the
# build backend the project pins for cibuildwheel's isolated builds, and the `build`
# frontend that cibuildwheel itself uses on Linux, with its dependencies.
BUILD_VENV_PINS: tuple[str, ...] = (
    "setuptools==84.2.1",
    "wheel==0.48.0",
    "packaging==26.2",
    "build==1.6.1",
    "pyproject_hooks==1.3.3",
    'tomli==2.5.0; python_version < "3.11"',
)
# PEP 517's default for a project without [build-system].
DEFAULT_BUILD_REQUIRES: tuple[str, ...] = ("setuptools>=40.8.0",)

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
)

# CUDA libraries that are never grafted into a wheel by repair: the driver comes with
# the GPU driver, everything else from the nvidia-* packages the wheel declares.
# auditwheel matches these with fnmatch against each DT_NEEDED soname.
CUDA_LIBRARY_EXCLUDES: tuple[str, ...] = (
    # driver and management library (installed with the driver, never shippable)
    "libcuda.so.*",
    "libnvidia-ml.so.*",
    # runtime, JIT and compiler libraries
    "libcudart.so.*",
    "libnvrtc.so.*",
    "libnvrtc-builtins.so.*",
    "libnvJitLink.so.*",
    "libnvfatbin.so.*",
    "libnvvm.so.*",
    # math libraries
    "libcublas.so.*",
    "libcublasLt.so.*",
    "libnvblas.so.*",
    "libcufft.so.*",
    "libcufftw.so.*",
    "libcurand.so.*",
    "libcusolver.so.*",
    "libcusolverMg.so.*",
    "libcusparse.so.*",
    "libcusparseLt.so.*",
    "libnpp*.so.*",
    # deep learning, communication, I/O
    "libcudnn*.so.*",
    "libnccl.so.*",
    "libnvshmem*.so*",
    "libcufile.so.*",
    "libcufile_rdma.so.*",
    "libcudla.so.*",
    # profiling and tools
    "libcupti.so.*",
    "libnvToolsExt.so.*",
    "libnvtx3interop.so.*",
    "libnvperf_host.so",
    "libnvperf_target.so",
    "libcheckpoint.so",
    "libpcsamplingutil.so",
)


def unmet_build_requires(
    requires: Sequence[str], *, pins: Sequence[str], python_version: str
) -> tuple[str, ...]:
    """The project's ``[build-system].requires`` that the build venv's pins do not satisfy.

    ``python_version`` (``3.10.13``) decides environment markers on both sides. A
    requirement that is not a valid PEP 508 string is returned as unmet.
    """
    major_minor = ".".join(python_version.split(".")[:2])
    marker_env = {"python_version": major_minor, "python_full_version": python_version}
    installed: dict[str, str] = {}
    for pin in pins:
        req = Requirement(pin)
        if req.marker is not None and not req.marker.evaluate(marker_env):
            continue
        (spec,) = req.specifier
        installed[canonicalize_name(req.name)] = spec.version
    unmet: list[str] = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            unmet.append(text)
            continue
        if req.marker is not None and not req.marker.evaluate(marker_env):
            continue
        version = installed.get(canonicalize_name(req.name))
        if version is None or not req.specifier.contains(version, prereleases=True):
            unmet.append(text)
    return tuple(unmet)


def env_prefix(project_name: str) -> str:
    """``tinyaxpy`` -> ``TINYAXPY``; ``my-pkg`` -> ``MY_PKG``."""
    return re.sub(r"[^A-Za-z0-9]+", "_", project_name).strip("_").upper()


def repair_excludes(row: Row) -> tuple[str, ...]:
    """Every CUDA library pattern, plus the libraries the row's CUDA packages provide."""
    out = list(CUDA_LIBRARY_EXCLUDES)
    for package in row.cuda_packages:
        for lib in package.libraries:
            if lib not in out:
                out.append(lib)
    return tuple(out)


def repair_argv(row: Row, *, auditwheel: Sequence[str] = ("auditwheel",)) -> tuple[str, ...]:
    """The repair both backends run, with cibuildwheel's ``{dest_dir}`` and ``{wheel}``."""
    argv = [*auditwheel, "repair", "--only-plat", "--plat", row.platform_tag]
    for pattern in repair_excludes(row):
        argv += ["--exclude", pattern]
    return (*argv, "-w", "{dest_dir}", "{wheel}")


# --------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class BuildEnv:
    """Changes to an inherited environment: what is set, removed and put first on PATH."""

    set: Mapping[str, str]
    unset: tuple[str, ...]
    unset_prefixes: tuple[str, ...]
    path_prepend: tuple[str, ...] = ()

    def apply(self, base: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in base.items() if k not in self.unset and not k.startswith(self.unset_prefixes)}
        env.update(self.set)
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
        return out


def _env_changes(
    row: Row,
    *,
    cuda_home: str | None,
    nvcc: str | None,
    bin_dir: str | None,
    kernel_cache: str | None,
    project_name: str | None,
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
        values["TORCH_CUDA_ARCH_LIST"] = row.torch_cuda_arch_list
        values["CMAKE_CUDA_ARCHITECTURES"] = row.cmake_cuda_architectures
        path = (bin_dir,)
    return BuildEnv(
        set=dict(sorted(values.items())),
        unset=CUDA_ENV_VARS,
        unset_prefixes=tuple(prefixes),
        path_prepend=path,
    )


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


def cibuildwheel_config(row: Row, *, project_name: str | None = None) -> dict[str, str]:
    """cibuildwheel's options (as CIBW_* variables) that build exactly this row.

    The image is the row's builder image; a CPU row's ``default`` leaves cibuildwheel's
    own pinned manylinux image. A CUDA row first checks that the image's nvcc is the
    row's train. Tests are skipped here: the smoke step installs and runs the wheel.
    """
    arch = row.platform
    changes = container_env_changes(row, project_name=project_name)
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
    if row.is_cuda:
        nvcc = CONTAINER_CUDA_HOME / "bin" / "nvcc"
        config["CIBW_BEFORE_ALL_LINUX"] = (
            f"{nvcc} --version | grep -F 'release {row.train},' || "
            f"{{ echo 'wheelwright: {row.builder_image} has no CUDA {row.train} nvcc at {nvcc}' >&2; "
            "exit 1; }"
        )
    return dict(sorted(config.items()))


# --------------------------------------------------------------------------- plan


CommandEnv = Literal["build", "tools", "cibuildwheel"]


@dataclass(frozen=True)
class Command:
    """One command the build runs, verbatim, in one of the plan's environments."""

    what: str  # progress text: "compiling", "repairing"
    argv: tuple[str, ...]
    env: CommandEnv  # build: the row's build environment; tools: the inherited one


@dataclass(frozen=True)
class BuildPlan:
    """What a build of one row will do, printable before anything runs (``--dry-run``)."""

    row_id: str
    variant: str
    backend: Backend
    toolchain: str  # description, or "none (CPU row)"
    python: str  # interpreter description
    env: BuildEnv  # the build environment's changes (host) or the container's
    prepare: tuple[str, ...]  # what is made ready first (toolchain, venv, copy)
    commands: tuple[Command, ...]
    finish: tuple[str, ...]  # what happens on success
    cibuildwheel: Mapping[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        out = [
            f"build plan for {self.row_id} ({self.variant}), backend: {self.backend}",
            f"  toolchain: {self.toolchain}",
            f"  python:    {self.python}",
            "  environment:",
            *(f"    {line}" for line in self.env.lines()),
        ]
        if self.cibuildwheel:
            out.append("  cibuildwheel options:")
            out += [f"    {k}={shlex.quote(v)}" for k, v in self.cibuildwheel.items()]
        if self.prepare:
            out.append("  prepare:")
            out += [f"    - {p}" for p in self.prepare]
        out.append("  commands:")
        for c in self.commands:
            out.append(f"    # {c.what} ({c.env} environment)")
            out.append(f"    {shlex.join(c.argv)}")
        out.append("  on success:")
        out += [f"    - {f}" for f in self.finish]
        out += [f"  note: {n}" for n in self.notes]
        return "\n".join(out)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "row": self.row_id,
            "variant": self.variant,
            "backend": self.backend,
            "toolchain": self.toolchain,
            "python": self.python,
            "env": {
                "set": dict(self.env.set),
                "unset": list(self.env.unset),
                "unset_prefixes": list(self.env.unset_prefixes),
                "path_prepend": list(self.env.path_prepend),
            },
            "cibuildwheel": dict(self.cibuildwheel),
            "prepare": list(self.prepare),
            "commands": [{"what": c.what, "argv": list(c.argv), "env": c.env} for c in self.commands],
            "finish": list(self.finish),
            "notes": list(self.notes),
        }


def build_plan(
    row: Row,
    *,
    backend: Backend,
    toolchain: Toolchain | None,
    project_dir: Path,
    dist_dir: Path,
    work_dir: Path,
    kernel_cache: Path | None,
    project_name: str | None = None,
    python: str = "",
    venv_python: Path | None = None,
    auditwheel: Sequence[str] = ("auditwheel",),
    cibuildwheel: Sequence[str] = ("cibuildwheel",),
    engine: str | None = None,
    prepare: Sequence[str] = (),
    notes: Sequence[str] = (),
) -> BuildPlan:
    """The plan of one row's build. ``work_dir`` is the temporary folder it builds in."""
    dest = dist_dir / row.variant
    finish = (
        f"check the wheel's name: version local label {row.local_version or '(none)'}, "
        f"tag {row.python_tag}-{row.python_tag}-{row.platform_tag}",
        f"move it atomically into {dest}/ with <wheel>.build.json beside it",
        f"remove {work_dir} (WHEELWRIGHT_KEEP_TMP=1 keeps it)",
    )
    tc_text = "none (CPU row)" if toolchain is None else toolchain.describe()
    if backend == "container":
        config = cibuildwheel_config(row, project_name=project_name)
        if engine:
            config = dict(sorted({**config, "CIBW_CONTAINER_ENGINE": engine}.items()))
        argv = (
            *cibuildwheel,
            "--platform",
            "linux",
            "--output-dir",
            str(work_dir / "wheelhouse"),
            str(project_dir),
        )
        return BuildPlan(
            row_id=row.id,
            variant=row.variant,
            backend=backend,
            toolchain=(
                f"CUDA {row.train} from the image {row.builder_image}" if row.is_cuda else "none (CPU row)"
            ),
            python=f"{row.cibw_identifier} (in the image)",
            env=container_env_changes(row, project_name=project_name),
            prepare=tuple(prepare),
            commands=(Command("building and repairing in the container", argv, "cibuildwheel"),),
            finish=finish,
            cibuildwheel=config,
            notes=tuple(notes),
        )
    if venv_python is None:
        raise ValueError("a host build plan needs the build venv's python")
    env = build_env_changes(row, toolchain, kernel_cache=kernel_cache, project_name=project_name)
    built, repaired, src = work_dir / "built", work_dir / "repaired", work_dir / "src"
    # `build` without isolation in the cached venv: the frontend cibuildwheel runs in the
    # container, one backend call (pip would prepare metadata in a second one). The
    # dependency check is done before, statically (unmet_build_requires).
    wheel_cmd = (
        str(venv_python),
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--skip-dependency-check",
        "--outdir",
        str(built),
        str(src),
    )
    repair = tuple(
        str(repaired) if a == "{dest_dir}" else str(built / "{wheel}") if a == "{wheel}" else a
        for a in repair_argv(row, auditwheel=auditwheel)
    )
    return BuildPlan(
        row_id=row.id,
        variant=row.variant,
        backend=backend,
        toolchain=tc_text,
        python=python,
        env=env,
        prepare=(*prepare, f"copy {project_dir} to {src} (no build/, dist/, *.egg-info)"),
        commands=(
            Command("compiling", wheel_cmd, "build"),
            Command("repairing", repair, "tools"),
        ),
        finish=finish,
        notes=tuple(notes),
    )
