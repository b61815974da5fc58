"""What every build of a row uses, whichever backend builds it: decided before anything runs
(:class:`RowJob`, :class:`BuildSetup`), the temporary folder it builds in, and its SOURCE_DATE_EPOCH."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from release.core import proc
from release.core.log import say
from release.core.machine import PythonInfo
from release.policy.matrix import Row
from release.policy.model import Policy
from release.route import Route
from release.wheelbuild.backends import Backend
from release.wheelbuild.host.isolated import BuildSystem, Constraints, EnvSpec
from release.wheelbuild.repair.contract import RowContract
from release.wheelbuild.toolchain import Toolchain

KEEP_TMP_VAR = "WHEELWRIGHT_KEEP_TMP"
GIT_TIMEOUT_S = 60.0


@dataclasses.dataclass(frozen=True)
class RowJob:
    """The row, its environment, the project and the caches; a backend's job adds its own."""

    row: Row
    base: Mapping[str, str]  # the environment the build starts from
    project_name: str
    project_dir: Path
    cache_dir: Path
    kernel_cache: Path
    contract: RowContract

    def row_job(self) -> dict[str, Any]:
        """This job's :class:`RowJob` fields, to make a backend's job from (``HostJob(**...)``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(RowJob)}


@dataclasses.dataclass(frozen=True)
class BuildSetup(RowJob):
    """Everything a row's build was decided to use, before anything is built: what a backend's
    ``plan`` and ``build`` are handed (:mod:`release.wheelbuild.backends`)."""

    policy_file: Path  # the policy's path as given, for the build record
    policy: Policy  # loaded once, by the command or the pipeline
    dist_dir: Path
    backend: Backend
    engine: str | None
    notes: tuple[str, ...]
    toolchain: Toolchain | None = None  # host builds of CUDA rows
    python: PythonInfo | None = None  # host builds
    system: BuildSystem | None = None  # host builds
    env: EnvSpec | None = None  # host builds: the isolated build environment
    prepare: tuple[str, ...] = ()
    # wheelwright's build constraints, then the policy's, then the caller's: both backends build under them
    constraints: Constraints | None = None
    config_settings: tuple[tuple[str, str], ...] = ()  # the backend's -C KEY=VALUE (a cross build's)
    route: Route | None = None  # how the row is built here (release/route.py), decided once


@contextlib.contextmanager
def work_dir(row: Row, env: Mapping[str, str]) -> Iterator[Path]:
    """A fresh temporary folder for one build, removed after it (kept with WHEELWRIGHT_KEEP_TMP=1)."""
    work = Path(tempfile.mkdtemp(prefix=f"wheelwright-{row.id}-", dir=env.get("TMPDIR") or None))
    try:
        yield work
    finally:
        if env.get(KEEP_TMP_VAR) == "1":
            say(row.id, f"kept the build folder {work} ({KEEP_TMP_VAR}=1)")
        else:
            shutil.rmtree(work, ignore_errors=True)


def source_date_epoch(project_dir: Path, env: Mapping[str, str]) -> str | None:
    """SOURCE_DATE_EPOCH for reproducible wheels: the caller's, else the last commit's time.

    The same commit then builds byte-identical wheels, so a rebuilt wheel matches what an
    index already holds instead of conflicting with it.
    """
    if env.get("SOURCE_DATE_EPOCH"):
        return env["SOURCE_DATE_EPOCH"]
    result = proc.run(
        ["git", "log", "-1", "--format=%ct"],
        cwd=project_dir,
        check=False,
        timeout=GIT_TIMEOUT_S,
        step="reading the last commit's time for SOURCE_DATE_EPOCH",
    )
    text = result.stdout.strip()
    return text if result.returncode == 0 and text.isdigit() else None
