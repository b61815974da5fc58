"""The build backends, named once (cibuildwheel's ``platforms/`` are the model): this registry, and one
module of this package per backend with ``plan(setup, work)`` and ``build(setup, plan, work, patchelf)``
(:class:`release.wheelbuild.backends.protocol.BuildBackend`). ``auto`` is no backend but the route's
choice between them (the engine and image probes of :mod:`release.wheelbuild.engine`, then
:mod:`release.route`). The command line's ``--backend`` choices and docs/building.md's backend table come
from here (tests/unit/test_backends.py); adding a backend is this registry and one new module. Imports
nothing of release."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

__all__ = ["AUTO", "BACKENDS", "CHOICES", "NAMES", "Backend", "BackendChoice", "BackendInfo", "info"]

Backend = Literal["host", "container"]
BackendChoice = Literal["auto", Backend]
AUTO: Literal["auto"] = "auto"


@dataclass(frozen=True)
class BackendInfo:
    """One backend: its name, its module, and what it builds with (one line, for --help and the docs)."""

    name: Backend
    module: str  # "release.wheelbuild.backends.host"
    builds: str


BACKENDS: tuple[BackendInfo, ...] = (
    BackendInfo(
        "host",
        f"{__name__}.host",
        "this machine's compilers, in an isolated build environment, with the row's pinned CUDA toolchain "
        "(another CPU's rows cross-compiled: release/wheelbuild/host/)",
    ),
    BackendInfo(
        "container",
        f"{__name__}.container",
        "cibuildwheel in the row's builder image, with docker or podman (another CPU's image under qemu-user)",
    ),
)
NAMES: tuple[Backend, ...] = tuple(b.name for b in BACKENDS)
CHOICES: tuple[BackendChoice, ...] = (AUTO, *NAMES)
if get_args(Backend) != NAMES:  # wheelwright's own bug: the registry and the type must agree
    raise AssertionError(f"the registry names {NAMES}, the Backend type {get_args(Backend)}")


def info(name: str) -> BackendInfo:
    """The registered backend called ``name``; KeyError for one that is not."""
    for backend in BACKENDS:
        if backend.name == name:
            return backend
    raise KeyError(f"no backend {name!r} (registered: {', '.join(NAMES)})")
