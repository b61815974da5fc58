"""The CPython of a row's CPU: this machine's own for its own CPU
(:func:`release.core.machine.find_python`), an emulated one for another (aarch64 on x86_64):
the interpreter of an arm64 Debian sysroot in the wheelwright cache, run by qemu-user, with
``QEMU_LD_PREFIX`` in :attr:`PythonInfo.env` for every process that runs it or a venv made from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from release.core import machine
from release.core.errors import ToolError
from release.core.machine import PythonInfo, default_cache_dir
from release.emulate import binfmt
from release.emulate.recipes import load
from release.emulate.sysroot import Log, Sysroot, ensure_sysroot
from release.resources.cpus import is_foreign


def emulated_python(
    version: str, arch: str, *, cache_dir: Path, log: Log | None = None
) -> tuple[PythonInfo, Sysroot]:
    """CPython ``version`` for ``arch`` from its sysroot (made on first use), and the sysroot.

    ToolError when this machine cannot run ``arch`` programs (with the commands that make it
    so) or when no reachable source has that Python for ``arch`` (saying what was looked at)."""
    cap = binfmt.require(arch)
    recipe = load().for_python(version, arch)
    sysroot = ensure_sysroot(recipe, cache_dir) if log is None else ensure_sysroot(recipe, cache_dir, log=log)
    how = f"{arch} under qemu-user, {sysroot.describe()}" if cap.emulated else f"{arch}, {sysroot.describe()}"
    info = PythonInfo(sysroot.interpreter, sysroot.version, env=sysroot.env(), emulated=how, arch=arch)
    return info, sysroot


def find_python(version: str, arch: str | None = None, *, env: Mapping[str, str]) -> PythonInfo:
    """CPython ``version`` (``"3.11"``) that runs ``arch`` code (default: this machine's CPU).

    This machine's CPU: :func:`release.core.machine.find_python` (PATH, then pyenv). Another:
    the emulated interpreter of :func:`emulated_python`, its sysroot in ``env``'s wheelwright
    cache (:func:`release.core.machine.default_cache_dir`)."""
    if not is_foreign(arch):
        return machine.find_python(version, env=env)
    assert arch is not None
    info, _sysroot = emulated_python(version, arch, cache_dir=default_cache_dir(env))
    return info


def emulation_problem(version: str, arch: str) -> str | None:
    """Why CPython ``version`` for ``arch`` cannot run on this machine, or None when it can (its
    own CPU, or emulation set up and a recipe for that Python). Cheap: it reads the kernel's
    ``binfmt_misc`` files and the recipes, and makes no sysroot (:func:`find_python` does)."""
    if not is_foreign(arch):
        return None
    try:
        binfmt.require(arch)
        load().for_python(version, arch)
    except ToolError as exc:
        return str(exc)
    return None
