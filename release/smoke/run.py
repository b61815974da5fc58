"""Smoke: install a wheel the way a user will, in a fresh venv, import it and run it.

Decisions are pure (:func:`evaluate`), effects are in :func:`smoke_wheel`. The probe
runs inside the fresh venv and reports, from the process itself (``/proc/self/maps``),
which ``libcudart`` it loaded: this machine has a CUDA runtime in its loader cache, so
a wheel with a wrong RPATH imports fine here and fails for every user. Without a GPU
the device computation is skipped, and the record says so: never a silent pass.

The fresh venv is made without pip when this environment's pip can install into it from
outside (``pip --python``): ensurepip took most of a venv's time. A rehearsal installs the
wheel's dependencies from a wheelhouse (:mod:`release.smoke.wheelhouse`) instead of asking
the indexes for every row. The probe runs from a file; a crash in the project's code shows
the project's frames only (:mod:`release.smoke.probe`). Which wheel pip and uv would pick
from an index is :mod:`release.smoke.resolve`.

A row of another CPU (aarch64 on this x86_64 machine) runs the same steps under emulation: its
interpreter is :func:`release.emulate.python.find_python`'s, whose variables (``QEMU_LD_PREFIX``)
go into the environment of every command of the row; its dependencies are downloaded for its
platform; its C++ consumer is built by the cross compiler. The verdict is the same
:func:`evaluate`; the outcome adds one line saying it ran under emulation and what that cost
(:mod:`release.smoke.emulation`, pure). The step's record is :mod:`release.smoke.record`'s.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet

from release import records
from release.core import log
from release.core.durations import seconds
from release.core.errors import InputError, StepFailed, ToolError
from release.core.hashing import sha256_file
from release.core.machine import PythonInfo, default_cache_dir
from release.core.pip import NO_PIP_CONFIG
from release.core.proc import Result, run
from release.policy.matrix import Row
from release.policy.model import Project
from release.smoke.emulation import cross_compiler, foreign_python, with_emulation
from release.smoke.evaluate import Outcome, combine, evaluate
from release.smoke.libraries import LIBRARIES_FILE, cuda_linking, other_cpu
from release.smoke.probe import (
    CPP_CONSUMER,
    PROBE,
    PROBE_FILE,
    TRACEBACK_INDENT,
    crash_report,
    with_tracebacks,
)
from release.smoke.record import write_record
from release.smoke.wheelhouse import Target, Wheelhouse, fill, target_for

KEEP_TMP_VAR = "WHEELWRIGHT_KEEP_TMP"
PROBE_TIMEOUT_VAR = "WHEELWRIGHT_SMOKE_TIMEOUT"
DEFAULT_PROBE_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Timeouts:
    """Seconds each smoke subprocess may run before the step fails, naming the row and the step.

    ``probe`` (import the package and run its check, on the GPU when there is one) is the one
    to raise for a slow computation: ``--probe-timeout`` or ``WHEELWRIGHT_SMOKE_TIMEOUT``.
    ``pip`` covers downloading the wheel's dependencies (CUDA runtime packages, torch).
    """

    venv: float = 120.0
    pip: float = 1800.0
    probe: float = DEFAULT_PROBE_TIMEOUT_S
    compile: float = 300.0  # g++ of the C++ consumer
    consumer: float = 60.0  # running the C++ consumer


def probe_timeout(flag: float | None, env: Mapping[str, str]) -> float:
    """The probe's timeout: the command-line flag, else ``WHEELWRIGHT_SMOKE_TIMEOUT``, else 600 s."""
    if flag is not None:
        return seconds(repr(flag), f"--probe-timeout {flag:g}", zero_ok=False)
    raw = env.get(PROBE_TIMEOUT_VAR, "").strip()
    if not raw:
        return DEFAULT_PROBE_TIMEOUT_S
    return seconds(raw, f"{PROBE_TIMEOUT_VAR}={raw!r}", zero_ok=False)


def _step(
    row: Row,
    step: str,
    timeout: float,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    check: bool = True,
) -> Result:
    """One smoke subprocess under a timeout; a timeout names the row, the step and, for the
    probe, how to give it longer."""
    try:
        return run(
            args, env=env, cwd=cwd, timeout=timeout, check=check, step=f"row {row.id}: smoke step '{step}'"
        )
    except StepFailed as exc:
        if step.startswith("probe") and isinstance(exc.__cause__, subprocess.TimeoutExpired):
            raise StepFailed(f"{exc}; give it longer with --probe-timeout or {PROBE_TIMEOUT_VAR}") from exc
        raise


def pip_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment that ignores this machine's pip configuration (constraints, local indexes)."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.startswith("PIP_")}
    return {**env, **NO_PIP_CONFIG}


def install_args(
    wheel: Path | None,
    requirement: str | None,
    *,
    index_url: str | None,
    extra_index_urls: Sequence[str] = (),
    find_links: Sequence[Path] = (),
    no_index: bool = False,
) -> list[str]:
    """The pip install arguments a user would type (pure); ``no_index`` with ``find_links``
    installs from local folders only (the smoke wheelhouse)."""
    args = ["install", "--isolated", "--no-input", "--quiet"]
    if no_index:
        args.append("--no-index")
    if index_url:
        args += ["--index-url", index_url]
    for url in extra_index_urls:
        args += ["--extra-index-url", url]
    for folder in find_links:
        args += ["--find-links", str(folder)]
    args.append(str(wheel) if wheel is not None else str(requirement))
    return args


def pip_drives(python_version: str) -> bool:
    """Whether this environment's pip can install into a venv of ``python_version`` from outside
    (``pip --python``), so the fresh venv is made without pip: ``ensurepip`` took most of the
    venv's time. False when this environment has no pip or the version is outside its range."""
    try:
        spec = SpecifierSet(importlib.metadata.metadata("pip")["Requires-Python"] or "")
        return bool(importlib.util.find_spec("pip")) and spec.contains(python_version, prereleases=True)
    except (importlib.metadata.PackageNotFoundError, InvalidSpecifier):
        return False


def _fresh_venv(
    row: Row, info: PythonInfo, venv: Path, limits: Timeouts, env: Mapping[str, str]
) -> list[str]:
    """Make the fresh venv; the pip command line that installs into it. ``env``: the environment
    the interpreter needs (an emulated one's ``QEMU_LD_PREFIX``). Into an emulated venv this
    environment's pip runs as ``pip --python`` would run it, from a copy compiled for that Python
    (:mod:`release.emulate.pip`): compiling pip under emulation on every call took a minute."""
    python, vpy = info.path, venv / "bin" / "python"
    if pip_drives(row.python):
        _log(row, f"creating a fresh venv with {python} (pip {_pip_version()} installs into it)")
        venv_args = [str(python), "-m", "venv", "--without-pip", str(venv)]
        _step(row, "create a venv", limits.venv, venv_args, env=env)
        if foreign_python(info):
            from release.emulate.pip import pip_runner

            return [str(vpy), str(pip_runner(info, default_cache_dir(env)))]
        return [sys.executable, "-m", "pip", "--python", str(vpy)]
    _log(row, f"creating a fresh venv with {python}")
    _step(row, "create a venv", limits.venv, [str(python), "-m", "venv", str(venv)], env=env)
    return [str(vpy), "-m", "pip"]


def _pip_version() -> str:
    try:
        return importlib.metadata.version("pip")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - pip_drives said yes
        return "?"


def _install(
    row: Row,
    pip: list[str],
    wheel: Path,
    *,
    index_url: str | None,
    extra_index_urls: Sequence[str],
    wheelhouse: Wheelhouse | Path | None,
    env: Mapping[str, str],
    cwd: Path,
    limits: Timeouts,
    target: Target | None = None,
) -> None:
    """Install ``wheel`` and its dependencies: from the indexes, from the (cached, filled on
    demand) wheelhouse, or from a folder given as it is (a machine with no network). ``target``:
    the platform the wheelhouse downloads for, when the venv's interpreter is another CPU's."""
    if isinstance(wheelhouse, Path):
        _log(row, f"pip install {wheel.name}, its dependencies from {wheelhouse} only (no index)")
        args = install_args(wheel, None, index_url=None, find_links=[wheelhouse], no_index=True)
        result = run(
            [*pip, *args], env=env, cwd=cwd, check=False, timeout=limits.pip,
            step=f"row {row.id}: smoke step 'pip install from {wheelhouse}'",
        )  # fmt: skip
        if result.returncode != 0:
            said = "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])
            raise StepFailed(
                f"row {row.id}: {wheel.name} does not install from {wheelhouse} with no index:\n{said}\n"
                f"put its dependencies there first, on a machine with network: pip download "
                f"--only-binary=:all: --dest {wheelhouse} {wheel.name}"
            )
        return
    if wheelhouse is None:
        _log(row, f"pip install {wheel.name} and its dependencies")
        args = install_args(wheel, None, index_url=index_url, extra_index_urls=extra_index_urls)
        _step(row, "pip install", limits.pip, [*pip, *args], env=env, cwd=cwd)
        return

    def from_wheelhouse() -> str | None:
        args = install_args(wheel, None, index_url=None, find_links=[wheelhouse.folder], no_index=True)
        result = run(
            [*pip, *args], env=env, cwd=cwd, check=False, timeout=limits.pip,
            step=f"row {row.id}: smoke step 'pip install from the wheelhouse'",
        )  # fmt: skip
        if result.returncode == 0:
            return None
        return "\n".join((result.stderr or result.stdout).strip().splitlines()[-15:])

    # for another CPU, this environment's pip downloads natively (--platform ...); the venv's
    # pip would run under emulation for the same files
    fetcher = [sys.executable, "-m", "pip"] if target is not None and importlib.util.find_spec("pip") else pip

    def download(args: list[str]) -> None:
        _step(row, "pip download into the wheelhouse", limits.pip, [*fetcher, *args], env=env, cwd=cwd)

    _log(row, f"pip install {wheel.name}, its dependencies from {wheelhouse.folder} (no index)")
    if not wheelhouse.fresh() or from_wheelhouse() is not None:
        fill(wheelhouse, wheel, row_id=row.id, download=download, install=from_wheelhouse, target=target)


SITES = "import json, sysconfig; p = sysconfig.get_paths(); print(json.dumps([p['platlib'], p['purelib']]))"


def _libraries(
    row: Row, wheel: Path, vpy: Path, tmp: Path, env: Mapping[str, str], limits: Timeouts
) -> tuple[Path, tuple[tuple[str, str], ...]]:
    """The JSON file of the wheel's installed libraries that link a CUDA library, for the probe
    to load after the import (:mod:`release.smoke.libraries`); the installed libraries built for
    another CPU than the row's."""
    out = _step(row, "find site-packages", limits.venv, [str(vpy), "-c", SITES], env=env, cwd=tmp)
    try:
        sites = [Path(p) for p in json.loads(out.stdout.strip().splitlines()[-1])]
    except (json.JSONDecodeError, IndexError, TypeError) as exc:
        raise StepFailed(f"row {row.id}: the fresh venv did not say where site-packages is: {exc}") from None
    unique = list(dict.fromkeys(sites))
    shipped = cuda_linking(wheel, unique)
    target = tmp / LIBRARIES_FILE
    target.write_text(json.dumps([lib.to_json() for lib in shipped]), encoding="utf-8")
    return target, other_cpu(wheel, unique, row.platform)


def _probe(
    row: Row,
    project: Project,
    vpy: Path,
    tmp: Path,
    env: Mapping[str, str],
    limits: Timeouts,
    libraries: Path,
) -> dict[str, Any] | Outcome:
    """Run the probe from a file in the venv's folder: its report, or the failed Outcome of a
    probe that died before reporting (a crash in the project's code), with the project's frames."""
    script = tmp / PROBE_FILE
    script.write_text(PROBE, encoding="utf-8")
    doing = f"run {project.check}" if project.check else "load its libraries"
    _log(row, f"importing {project.import_name}, loading its libraries that link CUDA"
         + (f", running {project.check}" if project.check else " (no check is set)"))  # fmt: skip
    argv = [str(vpy), str(script), project.import_name, project.check or "", project.sdk or "", row.variant]
    result = _step(
        row, f"probe (import {project.import_name}, {doing})", limits.probe,
        [*argv, str(libraries)], env=env, cwd=tmp, check=False,
    )  # fmt: skip
    lines = result.stdout.strip().splitlines()
    if result.returncode == 0 and lines:
        try:
            report: dict[str, Any] = json.loads(lines[-1])
            return report
        except json.JSONDecodeError:
            pass
    first, shown = crash_report(result.returncode, result.stderr, str(script))
    if result.returncode == 0:
        first = f"✗ the probe printed no report (its last output: {result.stdout.strip()[-300:]!r})"
    details = {"crash": {"returncode": result.returncode, "stderr": result.stderr[-4000:]}}
    return Outcome(False, False, (first, *(TRACEBACK_INDENT + line for line in shown)), None, None, details)


def smoke_wheel(
    row: Row,
    project: Project,
    wheel: Path,
    python: Path | PythonInfo,
    *,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    workdir: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeouts: Timeouts | None = None,
    wheelhouse: Wheelhouse | Path | None = None,
) -> Outcome:
    """Fresh venv with ``python``, install ``wheel`` and its dependencies, probe, judge.

    Every subprocess runs under ``timeouts`` (default :class:`Timeouts`, the probe's from
    ``WHEELWRIGHT_SMOKE_TIMEOUT`` in ``env``); a timeout is a StepFailed naming the row and step.
    With a :class:`Wheelhouse` the dependencies come from its folder (:mod:`release.smoke.wheelhouse`),
    fetched from the same indexes once, instead of from the indexes for every row; with a plain
    folder (a GPU machine with no network) from that folder only, nothing fetched.

    ``python``: the interpreter (a path: this machine's own), or a :class:`PythonInfo` whose
    ``env`` every command of the run gets (an emulated interpreter's ``QEMU_LD_PREFIX``).
    """
    info = python if isinstance(python, PythonInfo) else PythonInfo(python, row.python)
    base = info.environ(os.environ if env is None else env)
    limits = timeouts or Timeouts(probe=probe_timeout(None, base))
    started = time.monotonic()
    keep = base.get(KEEP_TMP_VAR) == "1"
    wheel = wheel.resolve()  # pip runs in the temporary folder
    tmp = Path(tempfile.mkdtemp(prefix=f"ww-smoke-{row.id}-", dir=workdir))
    try:
        venv = tmp / "venv"
        pip = _fresh_venv(row, info, venv, limits, base)
        target = (
            target_for(row.manylinux, info.arch, row.python) if foreign_python(info) and info.arch else None
        )
        _install(
            row, pip, wheel, index_url=index_url, extra_index_urls=extra_index_urls,
            wheelhouse=wheelhouse, env=pip_env(base), cwd=tmp, limits=limits, target=target,
        )  # fmt: skip
        clean = {k: v for k, v in base.items() if k not in ("LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONHOME")}
        vpy = venv / "bin" / "python"
        libraries, foreign = _libraries(row, wheel, vpy, tmp, clean, limits)
        probe = _probe(row, project, vpy, tmp, clean, limits, libraries)
        if isinstance(probe, Outcome):
            return with_emulation(probe, info, time.monotonic() - started)
        sdk = probe.get("sdk")
        if project.sdk and "sdk_error" not in probe and not isinstance(sdk, dict):
            probe["sdk_error"] = (
                f"{project.sdk} returned {type(sdk).__name__}, not a dict of include_dir/lib_dir/libraries"
            )
        cxx = cross_compiler(info.arch) if foreign_python(info) else "g++"
        cpp = _cpp_consumer(row, sdk, tmp, clean, limits, cxx) if isinstance(sdk, dict) else None
        outcome = evaluate(row, probe, cpp, project=project, other_cpu=foreign)
        lines = with_tracebacks(outcome.lines, probe)
        if isinstance(wheelhouse, Path):
            lines = (*lines, f"- dependencies installed from {wheelhouse} only (no index)")
        elif wheelhouse is not None:
            lines = (
                *lines,
                f"- dependencies installed from the smoke wheelhouse {wheelhouse.folder} (no index)",
            )
        return with_emulation(dataclasses.replace(outcome, lines=lines), info, time.monotonic() - started)
    finally:
        if keep:
            log.warn(f"==> [{row.id}] smoke: kept {tmp} ({KEEP_TMP_VAR}=1)")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def _cpp_consumer(
    row: Row, sdk: Mapping[str, Any], tmp: Path, env: Mapping[str, str], limits: Timeouts, cxx: str = "g++"
) -> dict[str, Any]:
    """Compile, link and run a C++ program against the installed SDK, outside the wheel (``cxx``:
    the cross compiler of an emulated row, whose program then runs under emulation too)."""
    try:
        header = str(sdk["header"])
        src = tmp / "consumer.cpp"
        src.write_text(CPP_CONSUMER.format(header=header), encoding="utf-8")
        exe = tmp / "consumer"
        libs = [f"-l{name}" for name in sdk.get("libraries", [])]
        _step(
            row, f"compile the C++ consumer ({cxx})", limits.compile,
            [cxx, "-std=c++17", str(src), "-o", str(exe), f"-I{sdk['include_dir']}", f"-L{sdk['lib_dir']}",
             "-Wl,--no-as-needed", *libs, f"-Wl,-rpath,{sdk['lib_dir']}"])  # fmt: skip
        out = _step(row, "run the C++ consumer", limits.consumer, [str(exe)], env=env)
        return {"loaded": out.stdout.split(), "libraries": list(sdk.get("libraries", []))}
    except (StepFailed, ToolError, KeyError) as exc:
        return {"error": str(exc)}


def _log(row: Row, message: str) -> None:
    log.say(row.id, f"smoke: {message}")


def smoke_pythons(row: Row, env: Mapping[str, str]) -> dict[str, PythonInfo]:
    """The interpreter of each Python the row's wheel serves (:attr:`Row.pythons`): one for a
    cpython row, every Python of the variant for an abi3/py3-none row; for a row of another CPU,
    the emulated one (:func:`release.emulate.python.find_python`, its sysroot made on first use).
    A missing one is a ToolError naming it and why, before anything is installed."""
    from release.emulate.python import find_python

    return {version: find_python(version, row.platform, env=env) for version in row.pythons}


def smoke_step(
    row: Row,
    project: Project,
    wheel: Path,
    pythons: Mapping[str, Path | PythonInfo],
    *,
    policy_sha256: str,
    index_url: str | None = None,
    extra_index_urls: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    timeouts: Timeouts | None = None,
    wheelhouse: Wheelhouse | Path | None = None,
    audited: bool = True,
    policy_path: str | None = None,
) -> tuple[Outcome, Path | None]:
    """The smoke step of a row's wheel: its passing audit record first (bound to these bytes,
    this row and this policy), then a fresh smoke on each of ``pythons`` (version -> interpreter:
    :func:`smoke_pythons`), then one smoke record. The old smoke record goes before the run, so
    a failed or stopped rerun never leaves a stale pass behind.

    ``audited=False`` (``smoke --unaudited``): no audit record is required and none is written
    (the record path is None), so a run of a wheel that failed its audit can never feed a publish.
    ``policy_path``: the policy as the user gave it, repeated in a refusal's hint (None: the build
    record's)."""
    sha = sha256_file(wheel)
    if audited:
        records.require(
            wheel, records.AuditRecord, step="smoke", row_id=row.id, policy_sha256=policy_sha256, sha256=sha,
            policy_path=policy_path,
        )  # fmt: skip
    records.remove(wheel, "smoke")
    runs: list[tuple[str, Outcome]] = []
    for version, python in pythons.items():
        if len(pythons) > 1:
            _log(row, f"Python {version} ({len(runs) + 1} of {len(pythons)}: one wheel serves them all)")
        one = smoke_wheel(
            dataclasses.replace(row, python=version),
            project,
            wheel,
            python,
            index_url=index_url,
            extra_index_urls=extra_index_urls,
            env=env,
            timeouts=timeouts,
            wheelhouse=wheelhouse,
        )
        runs.append((version, one))
    if not runs:
        raise InputError(f"row {row.id}: no Python to smoke-test {wheel.name} with")
    outcome = combine(runs)
    if not audited:
        return outcome, None
    return outcome, write_record(wheel, row, outcome, policy_sha256=policy_sha256, sha256=sha)
