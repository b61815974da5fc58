"""This environment's pip, copied into the wheelwright cache with its bytecode compiled for an
emulated interpreter's Python, so that pip runs in a venv of that interpreter as ``pip --python``
runs it (the copy's ``__pip-runner__.py``), without compiling its 14 MB of source under emulation
on every call (``pip --version`` took 20 s under emulation for Python 3.13, 0.9 s with bytecode).

``<cache>/emulate/pip-26.3-cp313/pip/`` (+ ``manifest.json``): made once, under a lock, in a
temporary folder renamed into place; compiled by this machine's CPython of the same version when
there is one (bytecode does not depend on the CPU), else by the emulated interpreter.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import shutil
import time
from pathlib import Path

from release.core.errors import StepFailed, ToolError
from release.core.locks import install_once
from release.core.machine import PythonInfo
from release.core.machine import find_python as find_host_python
from release.core.proc import run
from release.emulate.recipes import LAYOUT_VERSION
from release.emulate.sysroot import FOLDER, MANIFEST, Log, info

RUNNER = "__pip-runner__.py"
COMPILE_TIMEOUT_S = 900.0


def _source() -> tuple[Path, str]:
    spec = importlib.util.find_spec("pip")
    if spec is None or not spec.submodule_search_locations:
        raise ToolError("this environment has no pip to run in an emulated venv: install pip into it")
    return Path(next(iter(spec.submodule_search_locations))), importlib.metadata.version("pip")


def pip_folder(cache_dir: Path, pip_version: str, python: str) -> Path:
    """Where pip ``pip_version`` compiled for CPython ``python`` lives (pure)."""
    return cache_dir / FOLDER / f"pip-{pip_version}-cp{python.replace('.', '')}"


def _ready(folder: Path, pip_version: str, python: str) -> bool:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        isinstance(data, dict)
        and data.get("layout") == LAYOUT_VERSION
        and data.get("pip") == pip_version
        and data.get("python") == python
        and (folder / "pip" / RUNNER).is_file()
    )


def pip_runner(python: PythonInfo, cache_dir: Path, *, log: Log = info) -> Path:
    """The ``__pip-runner__.py`` of this environment's pip, compiled for ``python``'s version:
    ``[<venv python>, runner, install, ...]`` installs into that venv as ``pip --python`` would."""
    source, version = _source()
    minor = ".".join(python.version.split(".")[:2])
    folder = pip_folder(cache_dir, version, minor)

    def fill(tmp: Path) -> None:
        started = time.monotonic()
        shutil.copytree(source, tmp / "pip", ignore=shutil.ignore_patterns("__pycache__"))
        args = ["-m", "compileall", "-q", "-j", "0", "-s", str(tmp), "-p", str(folder), str(tmp / "pip")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        try:
            host: PythonInfo | None = find_host_python(minor, env=os.environ)
        except ToolError:
            host = None
        if host is not None:
            by = host.describe()
            log(f"compiling pip {version} for Python {minor} with {by}")
            run([str(host.path), *args], env=env, timeout=COMPILE_TIMEOUT_S, step=f"compiling pip {version}")
        else:
            by = python.describe()
            log(f"compiling pip {version} for Python {minor} under emulation (once; minutes)")
            run([str(python.path), *args], env=python.environ(env), timeout=COMPILE_TIMEOUT_S,
                step=f"compiling pip {version} under emulation")  # fmt: skip
        tag = f"cpython-{minor.replace('.', '')}"
        if not any((tmp / "pip" / "__pycache__").glob(f"__init__.{tag}.pyc")):
            raise StepFailed(f"compiling pip {version} with {by} left no {tag} bytecode")
        manifest = {"layout": LAYOUT_VERSION, "pip": version, "python": minor, "source": str(source),
                    "compiled_by": by, "seconds": round(time.monotonic() - started, 2)}  # fmt: skip
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    if not _ready(folder, version, minor):
        install_once(
            folder,
            ready=lambda f: _ready(f, version, minor),
            fill=fill,
            holder=f"compiling pip {version} for Python {minor}",
            waiting=lambda holder: log(f"waiting for {holder or 'another process'} to make {folder}"),
        )
    return folder / "pip" / RUNNER
