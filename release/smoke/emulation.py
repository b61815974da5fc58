"""What a row of another CPU adds to the smoke (pure): whether an interpreter runs under emulation,
the cross compiler that builds its C++ consumer, and the one line and the details its outcome adds.

A row of another CPU (aarch64 on this x86_64 machine) runs the same steps as a native one
(:func:`release.smoke.run.smoke_wheel`): its interpreter is :func:`release.emulate.python.find_python`'s,
its verdict the same :func:`release.smoke.evaluate.evaluate`; these say what differs.
"""

from __future__ import annotations

import dataclasses

from release.core.errors import ToolError
from release.core.machine import PythonInfo
from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import host_arch, is_foreign
from release.smoke.evaluate import Outcome


def foreign_python(info: PythonInfo) -> bool:
    """Whether the interpreter is another CPU's than this machine's (run under emulation)."""
    return is_foreign(info.arch)


def cross_compiler(arch: str | None) -> str:
    """The C++ compiler that builds programs for ``arch`` on this machine: Debian's cross
    ``g++`` (``aarch64-linux-gnu-g++``, package ``g++-aarch64-linux-gnu``), pure."""

    from release.emulate.recipes import sysroot_arches  # the arches the emulated smoke runs

    known = sysroot_arches()
    cpu = cpu_arch(arch) if arch is not None and arch in known else None
    if cpu is None:
        raise ToolError(f"no cross compiler is known for {arch!r} (known: {sorted(known)})")
    return cpu.cross_gxx


def emulation_line(info: PythonInfo, seconds: float) -> str:
    """The one line a run under emulation adds to its outcome (pure)."""
    return (
        f"- ran under emulation: CPython {info.version} for {info.arch} on this {host_arch()} machine "
        f"({info.emulated}); the fresh venv, install and probe took {seconds:.1f} s wall time"
    )


def with_emulation(outcome: Outcome, info: PythonInfo, seconds: float) -> Outcome:
    """``outcome`` with the emulation line and ``details["emulation"]`` when it ran under
    emulation; as it is otherwise."""
    if not info.emulated:
        return outcome
    details = {
        **outcome.details,
        "emulation": {
            "arch": info.arch,
            "host": host_arch(),
            "how": info.emulated,
            "interpreter": str(info.path),
            "python_version": info.version,
            "wall_seconds": round(seconds, 2),
        },
    }
    return dataclasses.replace(
        outcome, lines=(*outcome.lines, emulation_line(info, seconds)), details=details
    )
