"""The host backend: one row's build on this machine, from a plan made before it runs.

1. the project is copied into its fixed source folder (:mod:`release.wheelbuild.host.stage`):
   ``/tmp/wheelwright-src/<project>-<variant>/src`` on every machine, under a lock. nvcc names a
   source's anonymous namespaces after its absolute path, so a folder that follows the cache or
   the home folder would make every machine's device code differ;
2. the isolated build environment (:mod:`release.wheelbuild.host.isolated`) runs the project's own
   backend through :mod:`release.wheelbuild.host.frontend`; when the backend asks for more than its
   ``[build-system].requires``, an environment that also holds that is made and used;
3. a CPU row's environment has no CUDA in it: no toolkit ``bin`` on PATH (a folder that only
   holds an nvcc wrapper is mirrored without it), no CUDA include or library path;
4. the shared repair command, then the row's contract, the name check and dist/
   (:func:`release.wheelbuild.output.finish_wheel`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import shutil
import time
from collections.abc import Mapping
from pathlib import Path

from release.core import proc
from release.core.errors import StepFailed
from release.core.log import detail, say
from release.core.machine import PythonInfo
from release.core.pip import NO_PIP_CONFIG
from release.policy.matrix import Row
from release.wheelbuild.environment import (
    CUDA_SEARCH_PATHS,
    CUDA_TOOLS,
    PathFacts,
    apply_hidden,
    build_env_changes,
    hide_cuda,
    pip_cuda_headers,
    pip_cuda_include_dirs,
)
from release.wheelbuild.host.cross import CrossTarget, cross_diagnosis, cross_env
from release.wheelbuild.host.frontend import MISSING_EXIT, MISSING_PREFIX
from release.wheelbuild.host.isolated import BuildSystem, EnvSpec, ensure_build_env, env_spec
from release.wheelbuild.host.stage import copy_project, source_slot
from release.wheelbuild.job import RowJob
from release.wheelbuild.output import finish_wheel, one_wheel
from release.wheelbuild.plan import BuildPlan, Command
from release.wheelbuild.toolchain import Toolchain

_KERNEL_CACHE_RE = re.compile(r"kernel cache (hit|miss)\b")
REPAIR_TIMEOUT_S = 1800.0  # auditwheel repair of a large wheel
# per command environment: the compile is a build (no limit), the repair is not
COMMAND_TIMEOUT_S: dict[str, float | None] = {"build": None, "tools": REPAIR_TIMEOUT_S, "cibuildwheel": None}


@dataclasses.dataclass(frozen=True)
class HostJob(RowJob):
    """Everything one host build was decided to use: the row's job, and the host's tools."""

    toolchain: Toolchain | None
    python: PythonInfo
    system: BuildSystem
    env: EnvSpec
    src_dir: Path
    epoch: str | None
    cross: CrossTarget | None = None  # another CPU arch's row, cross-compiled (release.wheelbuild.host.cross)


# --------------------------------------------------------------------------- CPU rows: facts and mirrors


def _facts(folder: str) -> PathFacts:
    p = Path(folder)
    if not folder or not p.is_dir():
        return PathFacts((), False, False, False)
    tools = tuple(t for t in CUDA_TOOLS if (p / t).exists())
    toolkit = bool(tools) and (p.parent / "include" / "cuda_runtime.h").exists()
    headers = (p / "cuda_runtime.h").exists() or (p / "cuda.h").exists()
    libraries = any(p.glob("libcudart.so*"))
    return PathFacts(tools, toolkit, headers, libraries)


def path_facts(env: Mapping[str, str]) -> dict[str, PathFacts]:
    """What each folder of PATH and the CUDA search paths holds (reads the file system)."""
    folders = {
        *env.get("PATH", "").split(":"),
        *(e for n in CUDA_SEARCH_PATHS for e in env.get(n, "").split(":")),
    }
    return {f: _facts(f) for f in sorted(folders) if f}


def make_mirrors(mirrors: Mapping[str, tuple[str, tuple[str, ...]]]) -> None:
    """Each mirror folder: a link to every entry of its source folder but the CUDA programs."""
    for mirror, (source, hidden) in mirrors.items():
        folder = Path(mirror)
        folder.mkdir(parents=True, exist_ok=True)
        for entry in sorted(Path(source).iterdir()):
            if entry.name not in hidden:
                (folder / entry.name).symlink_to(entry)


def row_env(job: HostJob) -> dict[str, str]:
    """The inherited environment with the row's changes applied (pure): the math libraries' include
    folder first on ``CPATH``, ``LIBRARY_PATH`` and CMake's search paths."""
    changes = build_env_changes(
        job.row, job.toolchain, kernel_cache=job.kernel_cache, project_name=job.project_name
    )
    return changes.apply(job.base)


def pip_headers(job: HostJob, spec: EnvSpec, cpath: str | None) -> dict[str, str]:
    """``cpath`` (the row's, from :func:`row_env`: the math libraries' include first), then the include
    folders of the CUDA packages ``spec``'s environment holds (reads them)."""
    if not job.row.is_cuda or job.row.train is None:
        return {}
    major, minor = job.python.version.split(".")[:2]
    site = spec.folder / "lib" / f"python{major}.{minor}" / "site-packages"
    present = [str(p.relative_to(site)) for p in sorted(site.glob("nvidia/*/include")) if p.is_dir()]
    dirs = pip_cuda_include_dirs(int(job.row.train.split(".")[0]), present)
    return pip_cuda_headers(job.row, str(site), dirs, cpath)


def build_environment(job: HostJob, work: Path) -> dict[str, str]:
    """The environment the backend runs in: the row's changes, no pip configuration,
    SOURCE_DATE_EPOCH, a CPU row's CUDA hidden, the build environment's scripts first."""
    changed = row_env(job)
    env = {**changed, **NO_PIP_CONFIG, **pip_headers(job, job.env, changed.get("CPATH"))}
    if job.epoch:
        env["SOURCE_DATE_EPOCH"] = job.epoch
    if not job.row.is_cuda:
        hidden = hide_cuda(env, path_facts(env), mirror_root=str(work / "path"))
        make_mirrors(hidden.mirrors)
        for line in hidden.dropped:
            detail(f"[{job.row.id}] CPU row: hid {line}")
        env = apply_hidden(env, hidden)
    env["PATH"] = os.pathsep.join([str(job.env.bin_dir), env.get("PATH", "")]).rstrip(os.pathsep)
    env.pop("PYTHONPATH", None)
    env.pop("PYTHONHOME", None)
    if job.cross is not None:
        env.update(cross_env(job.cross))
    return env


# --------------------------------------------------------------------------- running


def run_logged(
    row: Row,
    command: Command,
    argv: list[str],
    env: Mapping[str, str],
    log: Path,
    cache_dir: Path,
    *,
    ok_codes: tuple[int, ...] = (0,),
) -> tuple[int, str]:
    """Run one plan command into the build log; StepFailed (keeping the log) outside ``ok_codes``."""
    say(row.id, f"{command.what}...")
    start = time.monotonic()
    keep = cache_dir / "logs" / f"{row.id}.log"
    try:
        result = proc.run(
            argv,
            env=env,
            check=False,
            echo=False,
            timeout=COMMAND_TIMEOUT_S[command.env],
            step=f"row {row.id}: {command.what}",
        )
    except StepFailed as exc:  # timed out
        with log.open("a", encoding="utf-8") as f:
            f.write(f"+ {shlex.join(argv)}\n# {exc}\n")
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, keep)
        raise StepFailed(f"{exc}\nfull log: {keep}") from None
    seconds = time.monotonic() - start
    text = f"+ {shlex.join(result.args)}\n{result.stdout}{result.stderr}\n# exit {result.returncode} after {seconds:.1f} s\n"
    with log.open("a", encoding="utf-8") as f:
        f.write(text)
    if result.returncode not in ok_codes:
        keep.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, keep)
        # stderr last: a failing tool says why there, after its progress on stdout
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-30:])
        raise StepFailed(
            f"row {row.id}: {command.what} failed (exit {result.returncode}): {argv[0]} "
            f"{' '.join(argv[1:4])} ...\n{tail}\nfull log: {keep}"
        )
    return result.returncode, result.stdout + result.stderr


def _missing(output: str) -> list[str]:
    for line in output.splitlines():
        if line.startswith(MISSING_PREFIX):
            return [str(r) for r in json.loads(line[len(MISSING_PREFIX) :])]
    return []


def _compile(job: HostJob, command: Command, env: dict[str, str], log: Path) -> None:
    """The frontend in the isolated environment; once more in a larger one when the backend
    asks for requirements the project's [build-system] does not name. A cross build that fails
    linking this machine's libraries, or whose CMake cannot look for the target's Python, says so
    first (:func:`cross_diagnosis`)."""
    try:
        _compile_in_env(job, command, env, log)
    except StepFailed as exc:
        diagnosis = (
            None if job.cross is None else cross_diagnosis(log.read_text(errors="replace"), job.cross.arch)
        )
        if diagnosis is None:
            raise
        raise StepFailed(f"row {job.row.id}: {diagnosis}\n{exc}") from None


def _compile_in_env(job: HostJob, command: Command, env: dict[str, str], log: Path) -> None:
    row = job.row
    code, output = run_logged(
        row, command, list(command.argv), env, log, job.cache_dir, ok_codes=(0, MISSING_EXIT)
    )
    if code == MISSING_EXIT:
        extra = _missing(output)
        say(row.id, f"the build backend also needs {', '.join(extra)} (get_requires_for_build_wheel)")
        spec = env_spec(job.python, [*job.env.requires, *extra], job.env.constraints, job.cache_dir)
        ensure_build_env(spec, job.system, env=job.base, row_id=row.id)
        argv = [str(spec.interpreter), *command.argv[1:]]
        env = {
            **env,
            "PATH": env["PATH"].replace(str(job.env.bin_dir), str(spec.bin_dir), 1),
            **pip_headers(job, spec, row_env(job).get("CPATH")),
        }
        _code, output = run_logged(row, command, argv, env, log, job.cache_dir)
    hits = _KERNEL_CACHE_RE.findall(output)
    if hits:
        say(row.id, f"kernel cache {hits[-1]} ({job.kernel_cache})")


def build_host(job: HostJob, plan: BuildPlan, work: Path, patchelf: Path) -> Path:
    """Build, repair and hold to the contract; the finished wheel (in ``work``)."""
    row = job.row
    say(row.id, f"{plan.toolchain}; {job.python.describe()}")
    (work / "built").mkdir()
    (work / "repaired").mkdir()
    log = work / "build.log"
    tools_env = {
        **job.base,
        **NO_PIP_CONFIG,
        "PATH": os.pathsep.join([str(patchelf), job.base.get("PATH", "")]),
    }
    if job.epoch:
        tools_env["SOURCE_DATE_EPOCH"] = job.epoch
    compile_cmd, repair_cmd = plan.commands
    with source_slot(job.src_dir, row.id):
        copy_project(job.project_dir, job.src_dir)
        _compile(job, compile_cmd, build_environment(job, work), log)
    built = one_wheel(work / "built", row, "the build")
    argv = [a.replace("{wheel}", built.name) for a in repair_cmd.argv]
    run_logged(row, repair_cmd, argv, tools_env, log, job.cache_dir)
    repaired = one_wheel(work / "repaired", row, "auditwheel repair")
    return finish_wheel(repaired, job, work=work, patchelf=patchelf, epoch=job.epoch)
