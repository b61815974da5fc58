"""What a build backend is (:class:`BuildBackend`: ``plan`` and ``build``), and the one way a backend is
found by its name (:func:`load`, through the registry in :mod:`release.wheelbuild.backends`)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Protocol, cast

from release.wheelbuild.backends import Backend, info
from release.wheelbuild.job import BuildSetup
from release.wheelbuild.output import BuiltWheel
from release.wheelbuild.plan import BuildPlan


class BuildBackend(Protocol):
    """A backend module: its plan of a row's build (pure; ``work`` is the build's temporary folder,
    ``$WORK`` in a dry run: the ``--dry-run`` text), and the build by that plan into ``setup.dist_dir``
    with its record (``patchelf``: the one auditwheel runs)."""

    def plan(self, setup: BuildSetup, work: Path) -> BuildPlan: ...

    def build(self, setup: BuildSetup, work: Path, patchelf: Path) -> BuiltWheel: ...


def load(name: Backend) -> BuildBackend:
    """The module of the backend called ``name`` (:func:`release.wheelbuild.backends.info`)."""
    return cast(BuildBackend, importlib.import_module(info(name).module))
