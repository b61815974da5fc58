"""The one subprocess wrapper: find the tool, echo the command, raise on failure."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.core.errors import StepFailed, ToolError


@dataclass(frozen=True)
class Result:
    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


def which(program: str, *, path: str | None = None) -> str:
    """Return the absolute path of ``program`` or raise ToolError naming it."""
    if os.sep in program:
        if os.access(program, os.X_OK):
            return program
        raise ToolError(f"{program} is not an executable file")
    found = shutil.which(program, path=path)
    if found is None:
        raise ToolError(f"'{program}' was not found on PATH")
    return found


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
    capture: bool = True,
    echo: bool = False,
    ok_codes: Sequence[int] = (0,),
    timeout: float | None = None,
) -> Result:
    """Run a command.

    ``env`` replaces the environment when given (callers build it explicitly).
    With ``check`` a return code outside ``ok_codes`` raises StepFailed with the
    tail of stderr. ``capture=False`` streams output to the terminal (long steps).
    """
    argv = [str(a) for a in args]
    path = None if env is None else env.get("PATH")
    argv[0] = which(argv[0], path=path)
    if echo:
        print(f"+ {shlex.join(argv)}", file=sys.stderr, flush=True)
    try:
        proc = subprocess.run(
            argv,
            env=None if env is None else dict(env),
            cwd=None if cwd is None else Path(cwd),
            text=True,
            errors="replace",
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise StepFailed(f"{shlex.join(argv)} timed out after {timeout} s") from exc
    except OSError as exc:
        raise ToolError(f"cannot run {argv[0]}: {exc}") from exc
    result = Result(tuple(argv), proc.returncode, proc.stdout or "", proc.stderr or "")
    if check and proc.returncode not in ok_codes:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-25:])
        raise StepFailed(
            f"command failed with exit code {proc.returncode}: {shlex.join(argv)}"
            + (f"\n{tail}" if tail else "")
        )
    return result
