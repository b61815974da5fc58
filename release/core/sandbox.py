"""A sandbox for a tool run on untrusted input (the audit's C++ compiler on a wheel's headers and libraries).

:func:`run_limited` runs it in its own session, with a clean environment, limits on CPU time, address
space and file size, a wall-clock limit, and only the first part of its output read back
(:class:`Sandbox`). Beside :mod:`release.core.proc`, the one subprocess wrapper: this is the one other
place a process starts, because the limits must be set in the child (docs/security.md lists them).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import math
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from release.core.sizes import GIB, KIB, MIB, size

__all__ = ["Ran", "Sandbox", "clean_env", "rlimits", "run_limited"]


@dataclass(frozen=True)
class Sandbox:
    """Limits for one tool run on the wheel's contents."""

    cpu_seconds: int = 120
    memory_bytes: int = 4 * GIB  # RLIMIT_AS of the tool and of each process it starts
    file_bytes: int = 512 * MIB  # RLIMIT_FSIZE: no file it writes grows past this
    wall_seconds: float = 300.0
    output_chars: int = 64 * KIB  # stdout and stderr read back, each


@dataclass(frozen=True)
class Ran:
    """How a sandboxed tool ended. ``stdout``/``stderr``: the first ``output_chars`` of each."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def why(self, sandbox: Sandbox) -> str:
        """Why it failed, in words: the limit it hit, or its exit code."""
        if self.timed_out:
            return f"stopped after {sandbox.wall_seconds:g} s (the wall-clock limit)"
        if self.returncode < 0:
            sig = -self.returncode
            named: dict[int, str] = {
                signal.SIGXCPU: f"stopped at {sandbox.cpu_seconds} s of CPU time (the limit)",
                signal.SIGXFSZ: f"stopped writing past {size(sandbox.file_bytes)} (the file size limit)",
                signal.SIGKILL: "killed",
            }
            return named.get(sig, f"killed by signal {sig}")
        return f"exit code {self.returncode}"


def rlimits(sandbox: Sandbox) -> tuple[tuple[int, int, int], ...]:
    """(resource, soft, hard) for each limit of ``sandbox``: lowered, never raised, from this
    process's hard limits (the child inherits them)."""
    out = []
    for which, value, grace in (
        (resource.RLIMIT_CPU, sandbox.cpu_seconds, 1),  # SIGXCPU at the limit, SIGKILL a second later
        (resource.RLIMIT_AS, sandbox.memory_bytes, 0),
        (resource.RLIMIT_FSIZE, sandbox.file_bytes, 0),
        (resource.RLIMIT_CORE, 0, 0),
    ):
        _soft, hard = resource.getrlimit(which)
        top = value + grace if hard == resource.RLIM_INFINITY else min(value + grace, hard)
        out.append((which, min(value, top), top))
    return tuple(out)


# The tool starts through a fresh interpreter that sets the limits on itself, restores the signals
# Python ignores (as subprocess's restore_signals does) and execs the tool: the same process, in
# the same session. Not ``preexec_fn``: that runs Python code between fork and exec, which can
# deadlock when the parent has threads, and the audit's has.
_EXEC_LIMITED = """\
import os, resource, signal, sys
for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ"):  # Python ignores these; the tool gets them back
    if hasattr(signal, name):
        signal.signal(getattr(signal, name), signal.SIG_DFL)
for spec in sys.argv[1].split(","):
    which, soft, hard = (int(x) for x in spec.split(":"))
    resource.setrlimit(which, (soft, hard))
try:
    os.execv(sys.argv[2], sys.argv[3:])
except OSError as exc:
    sys.stderr.write(f"{sys.argv[2]}: cannot run: {exc.strerror or exc}\\n")
    os._exit(127)
"""


def _program(name: str, cwd: Path, env: dict[str, str]) -> str:
    """The file ``name`` runs, found as exec would (a name with a slash from ``cwd``, else on
    ``env``'s PATH): FileNotFoundError or PermissionError here, as Popen raises them.

    Not :func:`release.core.proc.which`: that resolves a name with a slash from this process's
    directory (the tool runs in ``cwd``), accepts a directory, returns a relative path as given
    (prlimit would look it up again from ``cwd``) and raises ToolError (exit 3) where the
    sandbox's callers expect Popen's OSError."""
    if os.sep in name:
        path = cwd / name
        if not path.is_file():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
        if not os.access(path, os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), name)
        return str(path.absolute())
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    if found is None:
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), name)
    return str(Path(found).absolute())


# util-linux's prlimit sets the same limits on itself and execs the tool (no fork) in a millisecond,
# where a fresh interpreter takes 15 ms of CPU; the interpreter is the fallback where it is missing.
_PRLIMIT_OPTIONS = {
    resource.RLIMIT_CPU: "--cpu",
    resource.RLIMIT_AS: "--as",
    resource.RLIMIT_FSIZE: "--fsize",
    resource.RLIMIT_CORE: "--core",
}


@functools.cache
def _prlimit() -> str | None:
    for directory in ("/usr/bin", "/bin", "/usr/sbin", "/sbin"):
        path = os.path.join(directory, "prlimit")
        if os.access(path, os.X_OK):
            return path
    return None


def _limited_argv(argv: Sequence[str], sandbox: Sandbox, program: str, *, prlimit: bool = True) -> list[str]:
    """The command line that runs ``argv`` (its file: ``program``) under ``sandbox``'s rlimits:
    through prlimit when it is installed (``prlimit=False``: never), else a fresh interpreter."""
    limits = rlimits(sandbox)
    tool = _prlimit() if prlimit else None
    if tool is not None:
        options = [f"{_PRLIMIT_OPTIONS[which]}={soft}:{hard}" for which, soft, hard in limits]
        return [tool, *options, "--", program, *argv[1:]]
    spec = ",".join(f"{which}:{soft}:{hard}" for which, soft, hard in limits)
    return [sys.executable, "-I", "-S", "-c", _EXEC_LIMITED, spec, program, *argv]


def _exits_within(popen: subprocess.Popen[bytes], seconds: float) -> bool:
    """Wait for ``popen`` to exit, at most ``seconds``; whether it did (then it is reaped).

    Through a pidfd (Linux 5.3+): woken the moment it exits. ``Popen.wait(timeout)`` polls with
    sleeps growing to 50 ms, so a tool that runs 20 ms is seen done up to 30 ms late."""
    try:
        fd = os.pidfd_open(popen.pid)
    except (AttributeError, OSError):
        try:
            popen.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return False
        return True
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        if not poller.poll(-1 if math.isinf(seconds) else min(max(0, int(seconds * 1000)), 2**31 - 1)):
            return False
    finally:
        os.close(fd)
    popen.wait()
    return True


def clean_env(scratch: Path) -> dict[str, str]:
    """The environment of a sandboxed tool: PATH, the C locale and a scratch TMPDIR; nothing of the
    auditing machine's own (no CPATH, no LIBRARY_PATH, no tokens)."""
    return {
        "PATH": os.environ.get("PATH", os.defpath),
        "LC_ALL": "C",
        "LANG": "C",
        "TMPDIR": str(scratch),
    }


def run_limited(argv: Sequence[str | os.PathLike[str]], *, cwd: Path, sandbox: Sandbox = Sandbox()) -> Ran:
    """Run ``argv`` in ``cwd`` under ``sandbox``: its own session (no terminal to read), stdin from
    /dev/null, a clean environment, the limits in the child and its whole group stopped at the wall
    limit. Output goes to files in ``cwd`` (so the file size limit bounds it too) and only the first
    ``output_chars`` of each come back."""
    args = [os.fspath(a) for a in argv]
    env = clean_env(cwd)
    command = _limited_argv(args, sandbox, _program(args[0], cwd, env))
    out_path, err_path = cwd / ".tool-stdout", cwd / ".tool-stderr"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        popen = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        timed_out = not _exits_within(popen, sandbox.wall_seconds)
        if timed_out:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(popen.pid, signal.SIGKILL)
            popen.wait()
    texts = []
    for path in (out_path, err_path):
        with path.open("rb") as f:
            texts.append(f.read(sandbox.output_chars).decode("utf-8", errors="replace"))
        path.unlink()
    return Ran(popen.returncode, texts[0], texts[1], timed_out)
