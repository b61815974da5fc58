"""The one subprocess wrapper: find the tool, echo the command, bound its time, raise on failure.

Every command gets a time limit: :data:`DEFAULT_TIMEOUT_S` unless the caller gives its own.
Only a build passes ``timeout=None`` (no limit), and it does so explicitly at the call site.
A command that runs past its limit is stopped with its whole process group (a pip or a
compiler it started does not outlive it) and raises :class:`StepFailed` naming the step
and the command.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.core.errors import StepFailed, ToolError

# The limit of any command whose caller names none: generous for a pip install or a
# link, short enough that a hung tool does not hang a CI job (90 minutes).
DEFAULT_TIMEOUT_S = 900.0


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


def timeout_message(step: str, argv: Sequence[str], timeout: float) -> str:
    """``<step>: `<command>` timed out after N s and was stopped``."""
    return (
        f"{step}: `{shlex.join(argv)}` timed out after {timeout:g} s and was stopped "
        "(with every process it started)"
    )


def _kill_group(popen: subprocess.Popen[str]) -> None:
    """Stop the command and everything it started (it leads its own process group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(popen.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        popen.kill()


def run(
    args: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    check: bool = True,
    capture: bool = True,
    echo: bool = False,
    ok_codes: Sequence[int] = (0,),
    timeout: float | None = DEFAULT_TIMEOUT_S,
    step: str | None = None,
) -> Result:
    """Run a command.

    ``env`` replaces the environment when given (callers build it explicitly).
    With ``check`` a return code outside ``ok_codes`` raises StepFailed with the
    tail of stderr. ``capture=False`` streams output to the terminal (long steps).
    ``timeout`` is in seconds (:data:`DEFAULT_TIMEOUT_S` unless given; ``None`` only for
    a build); past it the command's process group is killed and StepFailed names
    ``step`` (default ``running <program>``) and the command. The command reads no
    input: stdin is ``/dev/null``, so a tool that would prompt fails instead of waiting.
    """
    argv = [str(a) for a in args]
    path = None if env is None else env.get("PATH")
    argv[0] = which(argv[0], path=path)
    what = step or f"running {Path(argv[0]).name}"
    if echo:
        print(f"+ {shlex.join(argv)}", file=sys.stderr, flush=True)
    try:
        popen = subprocess.Popen(
            argv,
            env=None if env is None else dict(env),
            cwd=None if cwd is None else Path(cwd),
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture else None,
            process_group=0,
        )
    except OSError as exc:
        raise ToolError(f"cannot run {argv[0]}: {exc}") from exc
    with popen:
        try:
            stdout, stderr = popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            _kill_group(popen)
            # a daemon that left the group may still hold the pipes: do not wait for it
            with contextlib.suppress(subprocess.TimeoutExpired):
                popen.communicate(timeout=5)
            raise StepFailed(timeout_message(what, argv, exc.timeout)) from exc
        except BaseException:  # Ctrl-C or an error here: leave nothing running behind us
            _kill_group(popen)
            popen.wait()
            raise
    result = Result(tuple(argv), popen.returncode, stdout or "", stderr or "")
    if check and popen.returncode not in ok_codes:
        tail = "\n".join((result.stderr or result.stdout).strip().splitlines()[-25:])
        raise StepFailed(
            f"command failed with exit code {popen.returncode}: {shlex.join(argv)}"
            + (f"\n{tail}" if tail else "")
        )
    return result
