"""Why the sandbox finds its tool itself (release.core.sandbox._program) and not through
release.core.proc.which: a name with a slash is the tool in the sandbox's directory, a directory is
no tool, the path handed to prlimit is absolute, and a missing tool is Popen's OSError."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from release.core import proc
from release.core.errors import ToolError
from release.core.sandbox import _program


def _tool(folder: Path, name: str = "tool") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n", encoding="utf-8")
    path.chmod(0o755)
    return path


def test_a_relative_tool_is_the_one_in_the_sandbox(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sandbox, elsewhere = tmp_path / "sandbox", tmp_path / "elsewhere"
    tool = _tool(sandbox)
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    env = {"PATH": os.defpath}
    assert _program("./tool", sandbox, env) == str(tool)  # must pass: absolute, in the sandbox
    with pytest.raises(ToolError):  # proc.which looks in this process's directory
        proc.which("./tool")
    with pytest.raises(FileNotFoundError):  # must fail: not in the sandbox
        _program("./tool", elsewhere, env)


def test_a_directory_or_a_plain_file_is_no_tool(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "plain").write_text("x", encoding="utf-8")
    env = {"PATH": os.defpath}
    assert proc.which(str(tmp_path / "sub")) == str(tmp_path / "sub")  # proc.which takes a directory
    with pytest.raises(FileNotFoundError):
        _program("./sub", tmp_path, env)
    with pytest.raises(PermissionError):
        _program("./plain", tmp_path, env)


def test_a_bare_name_is_found_on_the_sandbox_path_only(tmp_path: Path) -> None:
    tool = _tool(tmp_path / "bin", "only-here-tool")
    assert _program("only-here-tool", tmp_path, {"PATH": str(tool.parent)}) == str(tool)
    with pytest.raises(FileNotFoundError):
        _program("only-here-tool", tmp_path, {"PATH": os.defpath})
