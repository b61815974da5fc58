"""Every ``python -m release ...`` command line written in README.md and docs/*.md parses with the
real command line (issue 24 item 9: docs that match the code): the command exists and every option
it names is one that command takes. Parsing, not running: tests/integration/test_docs_commands_run.py
runs these same lines (this module's ``_commands()``), each classified there as run here, run with
the network, needing a GPU, needing a dist/ or an index, or covered by the integration test that runs
it end to end. Synopsis lines with placeholders (``[--row ID]``, ``WHEEL...``, ``<wheel>``, ``ROW``)
are left out, and a test holds that most lines are checked."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from release.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMMAND = re.compile(r"(?:\.venv/bin/)?python3? -m release (?P<args>[^`\n]*)")
PLACEHOLDER = re.compile(
    r"[\[\]<>|]|\.\.\.|\bROW\b|\bWHEEL\b|\bW\b|\bW\.whl\b|\bVARIANT\b|\bCLAIM\b|\bCCS\b|\bID\b"
)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """A doc's lines as a shell reads them, each with the number of its first line: a line ending in a
    backslash goes on with the next (a wrapped command is one command, all its options kept)."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.lstrip()
            pending = None
        if line.endswith("\\"):
            pending = (number, line[:-1].rstrip())
            continue
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def _commands(docs: list[Path] = DOCS) -> list[tuple[str, str]]:
    found = []
    for doc in docs:
        for _number, line in logical_lines(doc.read_text(encoding="utf-8")):
            for match in COMMAND.finditer(line):
                args = match["args"].split(" #")[0].split(")")[0].strip().rstrip(".,;:")
                if not args or PLACEHOLDER.search(args):
                    continue
                found.append((f"{doc.name}: python -m release {args}", args))
    return found


COMMANDS = _commands()


def test_most_documented_commands_are_checked() -> None:
    assert len(COMMANDS) >= 30, COMMANDS


def test_a_wrapped_command_is_read_whole(tmp_path: Path) -> None:
    """Issue 33: a command continued with a backslash was read up to the backslash, its options lost."""
    doc = tmp_path / "wrapped.md"
    doc.write_text(
        "```bash\npython -m release audit x.whl \\\n    --runs-on 8.0 \\\n    --driver 13.0\n```\n"
        "then python -m release plan\n",
        encoding="utf-8",
    )
    assert [args for _, args in _commands([doc])] == ["audit x.whl --runs-on 8.0 --driver 13.0", "plan"]
    assert [n for n, _ in logical_lines(doc.read_text())] == [1, 2, 5, 6]


def test_a_wrong_command_line_fails_the_check() -> None:
    """Must fail: an option no command takes, and a command that does not exist."""
    for args in ("audit x.whl --no-such-option", "no-such-command"):
        with pytest.raises(SystemExit) as exc:
            build_parser().parse_args(shlex.split(args))
        assert exc.value.code == 2


@pytest.mark.parametrize("where,args", COMMANDS, ids=[w for w, _ in COMMANDS])
def test_a_documented_command_parses(where: str, args: str) -> None:
    argv = shlex.split(args)
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:  # --help and --version answer and exit 0; anything else is a parse error
        if exc.code != 0:
            pytest.fail(f"{where}: does not parse (exit {exc.code})")


NOX_SESSION = re.compile(r"\bnox -s (?P<names>[a-z0-9-]+(?: [a-z][a-z0-9-]*)*)")


def _nox_sessions() -> list[str]:
    names: set[str] = set()
    for doc in DOCS:
        for match in NOX_SESSION.finditer(doc.read_text(encoding="utf-8")):
            names.update(n for n in match["names"].split() if not n.endswith("-"))
    return sorted(names)


def test_every_documented_nox_session_exists() -> None:
    """``nox -s NAME`` in the docs names a session the noxfile generates on this machine (its arch's rows)."""
    listed = subprocess.run(
        [sys.executable, "-m", "nox", "-l", "--no-color"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    sessions = {line.split()[1] for line in listed.splitlines() if line[:2] in ("* ", "- ")}
    documented = _nox_sessions()
    assert len(documented) >= 8, documented
    assert [name for name in documented if name not in sessions] == []
