"""The host backend: the row built on this machine, in the project's isolated build environment with the
row's pinned CUDA toolchain; another CPU's row cross-compiled. Its wing is :mod:`release.wheelbuild.host`
(the build and repair, the isolated environments, the fixed compile folder, the cross build)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import release.wheelbuild.host.frontend
from release.core.log import say
from release.wheelbuild.host.backend import HostJob, build_host
from release.wheelbuild.host.cross import config_settings, prepare_cross
from release.wheelbuild.host.driver_stub import native_driver_stub
from release.wheelbuild.host.isolated import ensure_build_env
from release.wheelbuild.host.stage import source_dir
from release.wheelbuild.job import BuildSetup, source_date_epoch
from release.wheelbuild.output import BuiltWheel, move_into_dist, record_data
from release.wheelbuild.plan import BuildPlan, build_plan

FRONTEND = Path(release.wheelbuild.host.frontend.__file__)


def _cross(setup: BuildSetup) -> bool:
    return setup.route is not None and setup.route.cross


def plan(setup: BuildSetup, work: Path) -> BuildPlan:
    """The compile in the isolated environment and auditwheel's repair (another CPU's, across)."""
    s = setup
    return build_plan(
        s.row,
        backend="host",
        toolchain=s.toolchain,
        project_dir=s.project_dir,
        dist_dir=s.dist_dir,
        work_dir=work,
        kernel_cache=s.kernel_cache,
        project_name=s.project_name,
        python="" if s.python is None else s.python.describe(),
        build_python=None if s.env is None else s.env.interpreter,
        frontend=FRONTEND,
        src_dir=source_dir(s.project_name, s.row.variant),
        auditwheel=(
            (sys.executable, "-m", "release.wheelbuild.repair.auditwheel_as", s.row.platform)
            if _cross(s)
            else (sys.executable, "-m", "auditwheel")
        ),
        prepare=s.prepare,
        notes=s.notes,
        contract=s.contract.describe(),
        constraints=tuple(c.text for c in s.constraints.lines) if s.constraints else (),
        config_settings=dict(s.config_settings),
    )


def build(setup: BuildSetup, work: Path, patchelf: Path) -> BuiltWheel:
    """Make the isolated environment, lay out a cross build's target, then build by the plan, repair and
    record."""
    s, row = setup, setup.row
    assert s.python is not None and s.env is not None and s.system is not None
    ensure_build_env(s.env, s.system, env=s.base, row_id=row.id)
    cross = None
    if _cross(s):
        cross, toolchain = prepare_cross(row, s.python, s.toolchain, s.cache_dir, s.base)
        settings = tuple(config_settings(s.system.backend_name, cross).items())
        s = dataclasses.replace(s, toolchain=toolchain, config_settings=settings)
        say(row.id, cross.describe())
    elif (
        s.toolchain is not None
    ):  # a cross home carries the target's driver stub; a native toolkit may lack one
        stub = native_driver_stub(s.toolchain.cuda_home, s.cache_dir, s.base)
        s = dataclasses.replace(s, toolchain=dataclasses.replace(s.toolchain, driver_stub=stub))
    assert s.python is not None and s.env is not None and s.system is not None
    job = HostJob(
        **s.row_job(),
        toolchain=s.toolchain,
        python=s.python,
        system=s.system,
        env=s.env,
        src_dir=source_dir(s.project_name, row.variant),
        epoch=source_date_epoch(s.project_dir, s.base),
        cross=cross,
    )
    wheel = build_host(job, plan(s, work), work, patchelf)  # a cross build's settings are in its plan
    data = record_data(
        row,
        wheel=wheel,
        backend="host",
        toolchain=None if s.toolchain is None else s.toolchain.record(),
        python=s.python.version,
        policy_path=s.policy_file,
        kernel_cache=str(s.kernel_cache),
        policy_sha256=s.policy.sha256,
    )
    return move_into_dist(wheel, s.dist_dir / row.variant, data, row)
