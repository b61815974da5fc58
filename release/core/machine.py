"""This machine: its wheelwright cache folder and its CPython interpreters (:func:`find_python`:
``python3.12`` on PATH, then pyenv's versions), which the build and the smoke stage both run. Its
CPU is :func:`release.resources.cpus.host_arch`'s. Another CPU's interpreters, run under emulation,
are :func:`release.emulate.python.find_python`'s: a :class:`PythonInfo` with its own ``env``."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
from collections.abc import Mapping
from pathlib import Path

from release.core import proc
from release.core.errors import StepFailed, ToolError

CACHE_VAR = "WHEELWRIGHT_CACHE"
PROBE_TIMEOUT_S = 60.0  # asking an interpreter or pyenv a question


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


# --------------------------------------------------------------------------- pythons


@dataclasses.dataclass(frozen=True)
class PythonInfo:
    path: Path  # the real interpreter (sys.executable), not a shim
    version: str  # "3.12.1"
    # Variables every process of this interpreter needs (a venv's too): QEMU_LD_PREFIX for an
    # emulated one (release.emulate.python); empty for this machine's own interpreters.
    env: tuple[tuple[str, str], ...] = ()
    # How it runs when not natively: "aarch64 under qemu-user (Debian bookworm arm64 sysroot)"
    emulated: str | None = None
    arch: str | None = None  # the interpreter's CPU ("aarch64"); None: this machine's

    def describe(self) -> str:
        return f"CPython {self.version} at {self.path}" + (f" ({self.emulated})" if self.emulated else "")

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this interpreter's own variables set: the environment of every command
        that runs it, or a venv made from it, or anything such a process starts."""
        return {**base, **dict(self.env)}


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
