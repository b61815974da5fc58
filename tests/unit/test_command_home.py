"""One home for commands (issue 23 item 4): one module per command, one error catch.

(a) every subcommand of :func:`release.cli.build_parser` runs a ``func`` defined in
``release.commands.<the command's name>``, and each such module exports ``add_parser`` and ``run``;
(b) no module of release/ outside release/cli.py and release/commands/ builds an argparse parser or
subparsers, but the internal process entry points listed below, each with its reason;
(c) only release/cli.py turns a WheelwrightError into an exit code (reads ``.return_code``), but the
places listed below, each with its reason; (d) no stage, and nothing of the floor, imports the
command line (release.cli, release.commands). Read from the code itself (``ast``, the real parser);
each rule has a must-fail case: a synthetic parser, source or tree that breaks it is caught."""

from __future__ import annotations

import argparse
import ast
import importlib
from collections.abc import Callable, Iterable
from pathlib import Path

from release.cli import build_parser
from release.commands import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
RELEASE = ROOT / "release"
COMMAND_LINE = ("release/cli.py", "release/commands/")
# The modules outside the command line that build a parser: each is a process of its own, started by
# wheelwright with its own argv, never a command of ``python -m release``.
PARSER_ENTRY_POINTS = {
    "release/publish/index/server.py": "the local index's own process (python -m "
    "release.publish.index.server serve|start|stop), started detached so it outlives the command",
    "release/publish/sealed_twine.py": "publish's uploader child (python -P -m release.publish.sealed_twine): "
    "twine's own Settings parse twine's upload arguments, then it sends the sealed memfd it inherited",
    "release/wheelbuild/host/frontend.py": "the build frontend a host build runs as a script with the "
    "isolated build environment's own interpreter; it imports nothing of wheelwright",
    "release/wheelbuild/repair/auditwheel_as.py": "auditwheel's repair for another CPU arch, run as a "
    "child process (python -m release.wheelbuild.repair.auditwheel_as) with auditwheel's own arguments",
}
# The modules besides release/cli.py that read an error's exit code, each with its reason.
RETURN_CODE_READERS = {
    "release/cli.py": "the one error catch: main() turns a WheelwrightError into the process's exit code",
    "release/commands/audit.py": "the audit goes on after one wheel's bad input: each wheel's error and "
    "its exit code go into the --json document, the command's exit code is the worst wheel's",
    "release/pipeline.py": "a release goes on with the other rows when one row's step fails: the step's "
    "exit code is kept in the row's report, and the release's exit code is the worst row's",
    "release/publish/index/server.py": "the local index's own process entry point, which has no "
    "release.cli.main above it (see PARSER_ENTRY_POINTS)",
}


def _relative(path: Path, root: Path) -> str:
    return path.relative_to(root).as_posix()


def _in_command_line(rel: str) -> bool:
    return rel == COMMAND_LINE[0] or rel.startswith(COMMAND_LINE[1])


def _sources(root: Path) -> Iterable[tuple[str, str]]:
    """(path relative to ``root``'s parent, source) of every module under ``root`` (release/)."""
    for path in sorted(root.rglob("*.py")):
        yield _relative(path, root.parent), path.read_text(encoding="utf-8")


# (a) each command's func is in release.commands.<name>


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return {
        name: command
        for action in parser._actions
        if isinstance(action, argparse._SubParsersAction)
        for name, command in action.choices.items()
    }


def misplaced_commands(parser: argparse.ArgumentParser) -> dict[str, str]:
    """The subcommands whose ``func`` is not defined in ``release.commands.<name>``: name -> its module."""
    wrong = {}
    for name, command in subcommands(parser).items():
        func = command.get_default("func")
        where = getattr(func, "__module__", None)
        if where != f"release.commands.{name}":
            wrong[name] = str(where)
    return wrong


def test_every_command_runs_from_its_own_module() -> None:
    parser = build_parser()
    assert list(subcommands(parser)) == list(COMMANDS)  # registered in COMMANDS' order
    assert misplaced_commands(parser) == {}
    for name in COMMANDS:
        module = importlib.import_module(f"release.commands.{name}")
        assert callable(module.add_parser) and callable(module.run), name
        assert subcommands(parser)[name].get_default("func") is module.run, name
        assert module.__doc__, f"release/commands/{name}.py says what the command does"
    modules = {p.stem for p in (RELEASE / "commands").glob("*.py")} - {"__init__", "options"}
    assert modules == set(COMMANDS), "one module per command, and every module a command"


def test_a_command_run_from_elsewhere_is_caught() -> None:
    def elsewhere(args: argparse.Namespace) -> int:
        return 0

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("plan").set_defaults(func=importlib.import_module("release.commands.plan").run)
    sub.add_parser("smoke").set_defaults(func=elsewhere)  # defined in this test module
    sub.add_parser("index").set_defaults(func=importlib.import_module("release.commands.trains").run)
    assert misplaced_commands(parser) == {
        "smoke": __name__,
        "index": "release.commands.trains",
    }


# (b) parsers are built on the command line only


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def parser_builds(source: str) -> list[int]:
    """The lines that construct an argparse parser or subparsers (pure)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and (
            _call_name(node) == "ArgumentParser"
            or (isinstance(node.func, ast.Attribute) and node.func.attr in ("add_subparsers", "add_parser"))
        )
    )


def scan(root: Path, find: Callable[[str], list[int]], allowed: Iterable[str]) -> dict[str, list[int]]:
    """Modules under ``root`` outside the command line and ``allowed`` where ``find`` finds lines."""
    listed = set(allowed)
    return {
        rel: lines
        for rel, source in _sources(root)
        if not _in_command_line(rel) and rel not in listed and (lines := find(source))
    }


def test_only_the_command_line_builds_parsers() -> None:
    assert scan(RELEASE, parser_builds, PARSER_ENTRY_POINTS) == {}
    for rel in PARSER_ENTRY_POINTS:  # a listed one that no longer builds a parser is unlisted
        assert parser_builds((ROOT / rel).read_text(encoding="utf-8")), f"unlist {rel}"


def test_a_parser_built_in_a_stage_is_caught(tmp_path: Path) -> None:
    release = tmp_path / "release"
    (release / "commands").mkdir(parents=True)
    (release / "stage").mkdir()
    (release / "cli.py").write_text("import argparse\np = argparse.ArgumentParser()\n")
    (release / "commands" / "x.py").write_text("def add_parser(s):\n    return s.add_parser('x')\n")
    (release / "stage" / "clean.py").write_text("def f(p):\n    p.add_argument('--x')\n")
    (release / "stage" / "own.py").write_text(
        "from argparse import ArgumentParser\n\nparser = ArgumentParser()\n"
    )
    (release / "stage" / "sub.py").write_text(
        "def register(sub):\n    p = sub.add_parser('y')\n    return p.add_subparsers()\n"
    )
    assert scan(release, parser_builds, ()) == {"release/stage/own.py": [3], "release/stage/sub.py": [2, 3]}
    assert scan(release, parser_builds, ["release/stage/own.py"]) == {"release/stage/sub.py": [2, 3]}


# (c) one error catch


def return_code_reads(source: str) -> list[int]:
    """The lines that read an error's ``.return_code`` (pure)."""
    return sorted(
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr == "return_code" and isinstance(node.ctx, ast.Load)
    )


def test_only_the_cli_turns_an_error_into_an_exit_code() -> None:
    readers = {rel for rel, source in _sources(RELEASE) if return_code_reads(source)}
    assert readers - set(RETURN_CODE_READERS) == set(), "catch WheelwrightError in release/cli.py only"
    assert set(RETURN_CODE_READERS) - readers == set(), "unlist a module that no longer reads .return_code"
    main = (RELEASE / "cli.py").read_text(encoding="utf-8")
    assert "return exc.return_code" in main


def test_an_exit_code_taken_elsewhere_is_caught(tmp_path: Path) -> None:
    source = (
        "from release.core.errors import WheelwrightError\n\n"
        "def run():\n"
        "    try:\n"
        "        step()\n"
        "    except WheelwrightError as exc:\n"
        "        return exc.return_code\n"
    )
    assert return_code_reads(source) == [7]
    assert return_code_reads("class E(Exception):\n    return_code: int = 2\n") == []  # a definition
    release = tmp_path / "release"
    (release / "publish").mkdir(parents=True)
    (release / "cli.py").write_text(source)
    (release / "publish" / "step.py").write_text(source)
    assert scan(release, return_code_reads, ()) == {"release/publish/step.py": [7]}


# (d) nothing below the command line imports it


def command_line_imports(source: str) -> list[int]:
    """The lines that import release.cli or release.commands (function-level imports too; pure)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        if any(n in ("release.cli", "release.commands") or n.startswith("release.commands.") for n in names):
            found.append(node.lineno)
    return sorted(found)


def test_no_stage_imports_the_command_line() -> None:
    # release/__main__.py is ``python -m release``: it calls release.cli.main
    assert scan(RELEASE, command_line_imports, ["release/__main__.py"]) == {}


def test_a_stage_importing_a_command_is_caught(tmp_path: Path) -> None:
    release = tmp_path / "release"
    (release / "core").mkdir(parents=True)
    (release / "audit").mkdir()
    (release / "core" / "x.py").write_text("def f():\n    from release.commands.options import add_dist\n")
    (release / "audit" / "y.py").write_text("from release import cli\nimport release.commands\n")
    (release / "audit" / "z.py").write_text("from release.core import log\n")
    assert scan(release, command_line_imports, ()) == {"release/core/x.py": [2], "release/audit/y.py": [1, 2]}
