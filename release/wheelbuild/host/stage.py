"""Where a host build compiles: one fixed folder per project and variant, the same on every machine.

nvcc names a source's anonymous namespaces ``_GLOBAL__N__<8 hex>_<len>_<file>_<8 hex>``; the
first hash follows the source file's absolute path (its real path: a symlink is resolved). It
lands in the kernels' symbols, host and device, so a wheel compiled from
``~/.cache/wheelwright/src/...`` differs from one compiled from ``/srv/cache/src/...``. The
container backend compiles in cibuildwheel's fixed ``/project``; the host backend compiles in
:data:`STAGE_ROOT` ``/<project>-<variant>/src``, a path that names nothing of the machine (no
home folder, no cache folder, no ``TMPDIR``, no user id), so anyone who builds the same commit
on any Linux machine compiles the same paths.

Measured with nvcc 13.0 (tests/integration/test_reproducible.py): the same file under two
folders gives two hashes; ``-frandom-seed`` does not reach it; ``-Xcudafe
--orig_src_path_name=<fixed>`` does, but it names one file, so it cannot be given to a whole
build (``NVCC_APPEND_FLAGS``) of a project with several ``.cu`` files. A fixed real path can.

The root lives in ``/tmp``, which other users can write: it is made mode 0700 and used only
when it is a real folder (not a link) of this user that nobody else can write; anything else
stops the build naming it. One slot is held under a lock for a whole compile (two builds of the
same project and variant, from any checkout or cache, take turns); every row of a variant
compiles at the same path, so a kernel cache hit of one Python is the bytes a cold build of
another gives.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from release.core.errors import ToolError
from release.core.locks import exclusive
from release.core.log import say

# fixed: never derived from HOME, TMPDIR or the cache; ensure_root checks it is private to this user
STAGE_ROOT = Path("/tmp/wheelwright-src")  # noqa: S108
_COPY_IGNORE_TOP = frozenset({"build", "dist", ".git", ".nox", ".venv", ".tox", "wheelhouse"})


def source_dir(project_name: str, variant: str, root: Path = STAGE_ROOT) -> Path:
    """The fixed source folder of a project's rows of one variant (pure)."""
    return root / f"{project_name}-{variant}" / "src"


def root_problem(root: Path, st: os.stat_result, uid: int) -> str | None:
    """Why ``root`` (whose ``lstat`` is ``st``) may not hold builds of user ``uid``; None when it may (pure)."""
    if stat.S_ISLNK(st.st_mode):
        return f"{root} is a symbolic link, not a folder"
    if not stat.S_ISDIR(st.st_mode):
        return f"{root} is not a folder"
    if st.st_uid != uid:
        return f"{root} belongs to user id {st.st_uid}, not to this user ({uid})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{root} can be written by other users (mode {stat.S_IMODE(st.st_mode):04o})"
    return None


def ensure_root(root: Path = STAGE_ROOT) -> Path:
    """Make ``root`` (mode 0700) unless it exists; ToolError (exit 3) when it is not this user's own."""
    with contextlib.suppress(FileExistsError):
        root.mkdir(mode=0o700, parents=False)
    problem = root_problem(root, root.lstat(), os.getuid())
    if problem is not None:
        raise ToolError(
            f"the fixed build folder {problem}. Host builds compile there so that every machine compiles "
            f"the same paths (reproducible wheels); remove it (or have its owner remove it) and build again"
        )
    return root


@contextlib.contextmanager
def source_slot(src: Path, row_id: str) -> Iterator[Path]:
    """Hold the fixed source folder ``src`` for one build (waiting for another build of it)."""

    def waiting(holder: str) -> None:
        say(row_id, f"waiting for {holder or 'another build'} to finish with {src}")

    ensure_root(src.parent.parent)
    lock = src.parent.with_name(src.parent.name + ".lock")
    with exclusive(lock, holder=f"the build of row {row_id}", waiting=waiting):
        yield src


def copy_project(project_dir: Path, dest: Path) -> None:
    """Copy the project so every build starts from clean sources (no stale build/ tree)."""
    top = str(project_dir)

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith(".egg-info")}
        if folder == top:
            skipped |= {n for n in names if n in _COPY_IGNORE_TOP}
        return skipped

    shutil.rmtree(dest, ignore_errors=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(project_dir, dest, symlinks=True, ignore=ignore)
