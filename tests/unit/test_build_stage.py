"""The fixed source folder of host builds (release.wheelbuild.host.stage): a path that names nothing of
the machine, and a root that is used only when it is this user's own."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from release.core.errors import ToolError
from release.wheelbuild.host.stage import STAGE_ROOT, ensure_root, root_problem, source_dir


def test_the_source_folder_names_nothing_of_the_machine() -> None:
    env_paths = [os.environ.get(k, "") for k in ("HOME", "TMPDIR", "WHEELWRIGHT_CACHE", "XDG_CACHE_HOME")]
    src = source_dir("tinyaxpy", "cu130")
    assert src == Path("/tmp/wheelwright-src/tinyaxpy-cu130/src")
    assert src.parent.parent == STAGE_ROOT
    assert not any(p and str(src).startswith(p) for p in env_paths if p not in ("/tmp", "/tmp/"))


def test_a_root_of_this_user_is_made_private_and_used(tmp_path: Path) -> None:
    root = ensure_root(tmp_path / "stage")
    assert root.stat().st_mode & 0o777 == 0o700
    assert ensure_root(root) == root  # again: it exists, it is ours


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.symlink_to(p.parent), "is a symbolic link"),
        (lambda p: p.write_text(""), "is not a folder"),
        (lambda p: (p.mkdir(), p.chmod(0o777)), "can be written by other users (mode 0777)"),
    ],
)
def test_a_root_that_is_not_this_users_own_stops_the_build(tmp_path: Path, make: object, says: str) -> None:
    root = tmp_path / "stage"
    make(root)  # type: ignore[operator]
    with pytest.raises(ToolError, match="fixed build folder") as info:
        ensure_root(root)
    assert says in str(info.value)
    assert info.value.return_code == 3


def test_another_users_root_is_named() -> None:
    st = os.stat_result((0o40700, 0, 0, 0, 1234, 0, 0, 0, 0, 0))
    assert root_problem(Path("/tmp/wheelwright-src"), st, 0) == (
        "/tmp/wheelwright-src belongs to user id 1234, not to this user (0)"
    )
    assert root_problem(Path("/tmp/wheelwright-src"), st, 1234) is None
