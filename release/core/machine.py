"""machine: split out of its former module."""

from __future__ import annotations

import platform as _platform
from collections.abc import Mapping
from pathlib import Path

CACHE_VAR = "WHEELWRIGHT_CACHE"


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
