"""Find the CPython interpreter a row needs: PATH first, then pyenv's versions."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from release.errors import ToolError
from release.proc import run


def candidates(version: str, env: Mapping[str, str]) -> list[Path]:
    """Where ``python<version>`` may live, in the order we try them (pure: no file access)."""
    out: list[Path] = [Path(d) / f"python{version}" for d in env.get("PATH", "").split(os.pathsep) if d]
    roots = [env["PYENV_ROOT"]] if env.get("PYENV_ROOT") else []
    if env.get("HOME"):
        roots.append(str(Path(env["HOME"]) / ".pyenv"))
    for root in roots:
        out.append(Path(root) / "versions" / version / "bin" / f"python{version}")
    return out


def find_python(version: str, env: Mapping[str, str] | None = None) -> Path:
    """The interpreter for ``version`` ("3.12"), checked by running it; ToolError if none."""
    env = dict(os.environ if env is None else env)
    tried: list[str] = []
    for candidate in candidates(version, env):
        # pyenv shims answer only for the versions `pyenv global/local` enables: skip them
        if "shims" not in candidate.parts and candidate.is_file() and _works(candidate, version):
            return candidate
        tried.append(str(candidate))
    # pyenv names folders by full version (3.12.1): pick the newest matching one.
    for root in filter(None, [env.get("PYENV_ROOT"), str(Path(env.get("HOME", "/")) / ".pyenv")]):
        versions = Path(root) / "versions"
        if versions.is_dir():
            matches = sorted(
                (
                    p
                    for p in versions.iterdir()
                    if p.name.startswith(f"{version}.") and p.name[len(version) + 1 :].isdigit()
                ),
                key=lambda p: int(p.name.rsplit(".", 1)[1]),
            )
            for folder in reversed(matches):
                exe = folder / "bin" / f"python{version}"
                if exe.is_file() and _works(exe, version):
                    return exe
                tried.append(str(exe))
    raise ToolError(
        f"no Python {version} found (tried PATH and pyenv: {', '.join(tried[:4])}{' ...' if len(tried) > 4 else ''}); "
        f"install it (e.g. `pyenv install {version}`) or put python{version} on PATH"
    )


def _works(exe: Path, version: str) -> bool:
    result = run([str(exe), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=False)
    return result.returncode == 0 and result.stdout.strip() == version
