"""environment: split out of its former module."""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from release.build.repair import repair_argv
from release.build.toolchain import Toolchain
from release.policy.matrix import CPU_IMAGE, Row

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
