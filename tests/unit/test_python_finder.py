"""find_python (release.core.machine), which the build and the smoke stage both ask: a real
interpreter is found, a python that is another version is skipped and named, nothing found is
a ToolError (exit 3) that says every place looked and how to fix it."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

import pytest

from release.core.errors import ToolError
from release.core.machine import PythonInfo, find_python

VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"
OTHER = f"{sys.version_info.major}.{sys.version_info.minor - 1}.9"


def _impostor(folder: Path) -> Path:
    """A ``python<VERSION>`` that is really another Python."""
    folder.mkdir()
    script = folder / f"python{VERSION}"
    script.write_text(
        "#!/bin/sh\n"
        f'echo \'{{"impl": "cpython", "version": "{OTHER}", "exe": "/x", "gil_disabled": false}}\'\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_a_python_of_another_version_is_skipped_for_the_real_one(tmp_path: Path) -> None:
    real = Path(sys.executable).parent
    assert (real / f"python{VERSION}").is_file()  # this test's interpreter, under its versioned name
    _impostor(tmp_path / "bin")
    found = find_python(VERSION, env={"PATH": f"{tmp_path / 'bin'}:{real}", "HOME": str(tmp_path)})
    assert isinstance(found, PythonInfo) and found.version.startswith(f"{VERSION}.")
    assert found.describe() == f"CPython {found.version} at {found.path}"


def test_only_a_python_of_another_version_is_a_tool_error_naming_it(tmp_path: Path) -> None:
    script = _impostor(tmp_path / "bin")
    with pytest.raises(ToolError) as info:
        find_python(VERSION, env={"PATH": str(tmp_path / "bin"), "HOME": str(tmp_path)})
    assert str(info.value) == (
        f"CPython {VERSION} is needed to build this row and was not found ({script}: is Python {OTHER}; "
        f"no pyenv); install it (e.g. `pyenv install {VERSION}`) or put the folder holding "
        f"python{VERSION} on PATH"
    )
    assert info.value.return_code == 3
