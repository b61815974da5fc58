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

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from release.build.environment import BuildEnv, build_env_changes, cibuildwheel_config, container_env_changes
from release.build.repair import repair_argv
from release.build.toolchain import Toolchain
from release.policy.matrix import Row

Backend = Literal["host", "container"]

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
