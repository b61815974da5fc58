"""A row's build plan: what a build will do, as a value you can print before anything runs
(``--dry-run``, ``BuildPlan.to_json``). Pure: no os.environ, no files, no processes.

The host plan runs the project's build backend in an isolated build environment made from
its own ``[build-system]`` (:mod:`release.wheelbuild.host.isolated`) through
:mod:`release.wheelbuild.host.frontend`, in the row's build environment
(:mod:`release.wheelbuild.environment`), from the project's stable source folder, then the one
repair argv both backends share, then the row's contract (:mod:`release.wheelbuild.repair.contract`).
The container plan is cibuildwheel with the row's options, then the same contract.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from release.policy.matrix import Row
from release.wheelbuild.backends import Backend
from release.wheelbuild.environment import (
    BuildEnv,
    arch_routes,
    build_env_changes,
    cibuildwheel_config,
    container_env_changes,
)
from release.wheelbuild.repair.auditwheel import repair_argv
from release.wheelbuild.toolchain import Toolchain

# --------------------------------------------------------------------------- plan


CommandEnv = Literal["build", "tools", "cibuildwheel"]


@dataclass(frozen=True)
class Command:
    """One command the build runs, verbatim, in one of the plan's environments."""

    what: str  # progress text: "compiling", "repairing"
    argv: tuple[str, ...]
    env: CommandEnv  # build: the row's build environment; tools: the inherited one
    # the folder it runs in; None: the caller's. cibuildwheel runs in the project's own folder: it copies
    # its working directory into the container as /project and refuses a package outside it
    cwd: str | None = None


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
    archs: tuple[str, ...] = ()  # how the arch list reaches each build system
    contract: tuple[str, ...] = ()  # what the CUDA repair step holds the wheel to

    def render(self) -> str:
        out = [
            f"build plan for {self.row_id} ({self.variant}), backend: {self.backend}",
            f"  toolchain: {self.toolchain}",
            f"  python:    {self.python}",
            "  environment:",
            *(f"    {line}" for line in self.env.lines()),
        ]
        if self.archs:
            out.append("  arch list reaches:")
            out += [f"    - {a}" for a in self.archs]
        if self.cibuildwheel:
            out.append("  cibuildwheel options:")
            out += [f"    {k}={shlex.quote(v)}" for k, v in self.cibuildwheel.items()]
        if self.prepare:
            out.append("  prepare:")
            out += [f"    - {p}" for p in self.prepare]
        out.append("  commands:")
        for c in self.commands:
            out.append(f"    # {c.what} ({c.env} environment)")
            out.append(f"    {'cd ' + shlex.quote(c.cwd) + ' && ' if c.cwd else ''}{shlex.join(c.argv)}")
        if self.contract:
            out.append("  then the row's contract (release/wheelbuild/repair/contract.py), on the host:")
            out += [f"    - {c}" for c in self.contract]
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
            "commands": [
                {"what": c.what, "argv": list(c.argv), "env": c.env, "cwd": c.cwd} for c in self.commands
            ],
            "finish": list(self.finish),
            "notes": list(self.notes),
            "archs": list(self.archs),
            "contract": list(self.contract),
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
    build_python: Path | None = None,
    frontend: Path | None = None,
    src_dir: Path | None = None,
    auditwheel: Sequence[str] = ("auditwheel",),
    cibuildwheel: Sequence[str] = ("cibuildwheel",),
    engine: str | None = None,
    prepare: Sequence[str] = (),
    notes: Sequence[str] = (),
    contract: Sequence[str] = (),
    constraints: Sequence[str] = (),
    config_settings: Mapping[str, str] | None = None,
) -> BuildPlan:
    """The plan of one row's build. ``work_dir`` is the temporary folder it builds in;
    a host build compiles in ``src_dir`` with the isolated environment's ``build_python``
    running ``frontend``, given ``config_settings`` (``-C KEY=VALUE``)."""
    dest = dist_dir / row.variant
    finish = (
        f"check the wheel's name: version local label {row.local_version or '(none)'}, "
        f"tag {row.python_tag}-{row.python_tag}-{row.platform_tag} (or an abi3/py3 tag of the row, "
        "where the release identifies it as the row's)",
        f"move it atomically into {dest}/ with <wheel>.build.json beside it",
        f"remove {work_dir} (WHEELWRIGHT_KEEP_TMP=1 keeps it)",
    )
    tc_text = "none (CPU row)" if toolchain is None else toolchain.describe()
    if backend == "container":
        config = cibuildwheel_config(row, project_name=project_name, constraints=constraints)
        if engine:
            config = dict(sorted({**config, "CIBW_CONTAINER_ENGINE": engine}.items()))
        argv = (
            *cibuildwheel,
            "--platform",
            "linux",
            "--output-dir",
            str((work_dir / "wheelhouse").absolute()),
            ".",  # the project is the working directory: /project in the container, wherever it lies here
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
            commands=(
                Command(
                    "building and repairing in the container",
                    argv,
                    "cibuildwheel",
                    str(project_dir.absolute()),
                ),
            ),
            finish=finish,
            cibuildwheel=config,
            notes=tuple(notes),
            archs=arch_routes(row),
            contract=tuple(contract),
        )
    if build_python is None or frontend is None or src_dir is None:
        raise ValueError(
            "a host build plan needs the build environment's python, the frontend and the source folder"
        )
    env = build_env_changes(row, toolchain, kernel_cache=kernel_cache, project_name=project_name)
    built, repaired = work_dir / "built", work_dir / "repaired"
    # build's ProjectBuilder in the isolated environment: it asks the backend for its own
    # requirements (get_requires_for_build_wheel), checks them, then builds the wheel.
    settings = tuple(f"-C{k}={v}" for k, v in sorted((config_settings or {}).items()))
    wheel_cmd = (str(build_python), str(frontend), "--outdir", str(built), *settings, str(src_dir))
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
        prepare=(
            *prepare,
            f"copy {project_dir} to {src_dir} (no build/, dist/, *.egg-info; the same folder on every "
            f"machine and for every build of the project's {row.variant} rows, under a lock: nvcc names "
            "anonymous namespaces after the source's path)",
        ),
        commands=(
            Command("compiling", wheel_cmd, "build"),
            Command("repairing", repair, "tools"),
        ),
        finish=finish,
        notes=tuple(notes),
        archs=arch_routes(row),
        contract=tuple(contract),
    )
