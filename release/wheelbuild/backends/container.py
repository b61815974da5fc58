"""The container backend: cibuildwheel builds the row in its builder image (docker or podman; another
CPU's image under qemu-user), run in the project's own folder; the row's contract is then applied on
this machine, as for the host backend. The engine and image probes are :mod:`release.wheelbuild.engine`'s."""

from __future__ import annotations

import sys
from pathlib import Path

from release.core import proc
from release.core.errors import StepFailed
from release.core.log import say
from release.wheelbuild.job import BuildSetup, source_date_epoch
from release.wheelbuild.output import BuiltWheel, finish_wheel, move_into_dist, one_wheel, record_data
from release.wheelbuild.plan import BuildPlan, build_plan

CONTAINER_NVCC = "/usr/local/cuda/bin/nvcc"  # where the builder images put the toolkit


def plan(setup: BuildSetup, work: Path) -> BuildPlan:
    """cibuildwheel's command and options for the row (:func:`release.wheelbuild.plan.build_plan`)."""
    s = setup
    return build_plan(
        s.row,
        backend="container",
        toolchain=s.toolchain,
        project_dir=s.project_dir,
        dist_dir=s.dist_dir,
        work_dir=work,
        kernel_cache=s.kernel_cache,
        project_name=s.project_name,
        cibuildwheel=(sys.executable, "-m", "cibuildwheel"),
        engine=s.engine,
        prepare=s.prepare,
        notes=s.notes,
        contract=s.contract.describe(),
        constraints=tuple(c.text for c in s.constraints.lines) if s.constraints else (),
    )


def build(setup: BuildSetup, work: Path, patchelf: Path) -> BuiltWheel:
    """Run cibuildwheel by the plan, then the row's contract on this machine, and record."""
    s, row = setup, setup.row
    planned = plan(s, work)
    (command,) = planned.commands
    # only the row's options: a shell's CIBW_* (or CIBW_BEFORE_BUILD) must not leak into a release
    env = {**{k: v for k, v in s.base.items() if not k.startswith("CIBW_")}, **planned.cibuildwheel}
    epoch = source_date_epoch(s.project_dir, s.base)
    if epoch:
        env["SOURCE_DATE_EPOCH"] = epoch
    say(row.id, f"building in {row.builder_image} with {s.engine} (cibuildwheel)...")
    try:
        # a build: no time limit (cibuildwheel may first pull a multi-GB image)
        proc.run(
            command.argv,
            env=env,
            cwd=command.cwd,
            capture=False,
            echo=True,
            timeout=None,
            step=f"row {row.id}: {command.what}",
        )
    except StepFailed as exc:
        raise StepFailed(f"row {row.id}: the container build failed: {exc}") from None
    built = one_wheel(work / "wheelhouse", row, "cibuildwheel")
    # the contract is applied here, on the host, to what cibuildwheel produced
    wheel = finish_wheel(built, s, work=work, patchelf=patchelf, epoch=epoch)
    toolchain = None
    if row.is_cuda:
        toolchain = {
            "version": row.train,
            "full_version": None,
            "source": "image",
            "image": row.builder_image,
            "nvcc": CONTAINER_NVCC,
        }
    data = record_data(
        row,
        wheel=wheel,
        backend="container",
        toolchain=toolchain,
        python=row.python,
        policy_path=s.policy_file,
        kernel_cache=None,
        policy_sha256=s.policy.sha256,
    )
    return move_into_dist(wheel, s.dist_dir / row.variant, data, row)
