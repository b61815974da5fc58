"""Command line: ``python -m release <command>``. Errors are caught here, once.

The top-level parser (``--version``, ``-q``/``-v``, each command's lock options), and :func:`main`,
the one place a :class:`release.core.errors.WheelwrightError` becomes an exit code. The commands
themselves are :mod:`release.commands`, one module per command.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import NoReturn

from release import early
from release.commands import COMMANDS
from release.core import log
from release.core.errors import InputError, WheelwrightError
from release.run_lock import LOCKED_COMMANDS, add_wait_option, command_lock


def _add_verbosity(p: argparse.ArgumentParser, *, default: object) -> None:
    """``-q``/``-v``, before or after the command (after it wins)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "-q", "--quiet", dest="level", action="store_const", const=log.QUIET, default=default,
        help="only warnings, failures and results",
    )  # fmt: skip
    g.add_argument(
        "-v", "--verbose", dest="level", action="store_const", const=log.VERBOSE, default=default,
        help="also every step's log as it happens, and the commands run",
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="python -m release",
        description="wheelwright: build, audit, smoke-test and publish every row of a CUDA wheel "
        "release policy (rows.toml), all or nothing.",
        epilog="Exit codes: 0 ok, 1 a check failed, 2 bad input, 3 tool missing, 4 a step failed.",
    )
    from release import __version__

    parser.add_argument("--version", action="version", version=f"wheelwright {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    parser.commands = sub.choices
    for name in COMMANDS:  # one module per command, each with add_parser and run (release.commands)
        importlib.import_module(f"release.commands.{name}").add_parser(sub)
    _add_verbosity(parser, default=log.NORMAL)
    for name, command in sub.choices.items():
        command.description = plain(command.description)  # a module docstring's reST, as a reader sees it
        _add_verbosity(command, default=argparse.SUPPRESS)
        if name in LOCKED_COMMANDS:
            add_wait_option(command)
    return parser


def plain(text: str | None) -> str | None:
    """reST markup of a docstring made plain for ``--help``: ``x`` and :func:`x` read as x (pure)."""
    if text is None:
        return None
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]+)``", r"\1", text)


FLAGS = ("0", "1", "true", "false", "yes", "no", "on", "off")


def environment_problem(env: Mapping[str, str]) -> str | None:
    """A ``WHEELWRIGHT_*`` variable whose value no command can take, named with the values it takes
    (pure; the numeric ones are checked, naming themselves, where they are read)."""
    from release.resources.cpus import cpus

    arch = env.get("WHEELWRIGHT_ARCH")
    if arch and arch != "all" and arch not in cpus().names:
        return f"WHEELWRIGHT_ARCH={arch!r}: give a CPU arch ({', '.join(cpus().names)}) or all, or unset it"
    value = env.get("WHEELWRIGHT_CPP_CACHE")
    if value is not None and value.strip().lower() not in (*FLAGS, ""):
        return f"WHEELWRIGHT_CPP_CACHE={value!r}: give 1 or 0 (or true/false, yes/no, on/off), or unset it"
    for name in ("WHEELWRIGHT_KEEP_TMP", "WHEELWRIGHT_KEEP_AUDIT_DIR"):  # read as "1" or not
        value = env.get(name)
        if value is not None and value not in ("0", "1", ""):
            return f"{name}={value!r}: give 1 (keep) or 0, or unset it"
    return None


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors (an unknown option, a value missing) are remembered, so
    that ``audit --json`` can put them into its JSON document too (subcommands' parsers are this class)."""

    last_error: str | None = None
    commands: Mapping[str, argparse.ArgumentParser] = {}  # the top-level parser's subcommands

    def parse_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> argparse.Namespace:
        """An unknown option is reported by the subcommand's parser, with that command's usage."""
        parsed, extra = self.parse_known_args(args, namespace)
        if extra:
            command = self.commands.get(getattr(parsed, "command", None) or "")
            (command or self).error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed

    def error(self, message: str) -> NoReturn:
        _Parser.last_error = f"{self.prog}: error: {message}"
        super().error(message)


def _usage_error_json(argv: Sequence[str]) -> None:
    """``audit ... --json`` whose command line does not parse: the JSON document names the error as well
    (argparse has said it on stderr, with the usage), so a script that reads stdout sees it."""
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["audit"] and "--json" in argv and _Parser.last_error is not None:
        from release.audit.report.render import render_json

        print(render_json([], [{"wheel": None, "error": _Parser.last_error, "exit_code": 2}]))


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    early.start(given)  # python -m release did it already
    parser = build_parser()
    try:
        args = parser.parse_args(given)
    except SystemExit as exc:
        if exc.code == 2:
            _usage_error_json(given)
        raise
    log.configure(level=args.level)
    problem = environment_problem(os.environ)
    if problem is not None:
        log.warn(f"error: {problem}")
        return InputError.return_code
    try:
        with command_lock(args):  # the whole run holds dist/'s lock (release.run_lock)
            code: int = args.func(args)
        sys.stdout.flush()  # a reader that went away (`plan | head -1`) shows here, not at exit
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a pipe closed early
    except WheelwrightError as exc:
        log.warn(f"error: {exc}")
        return exc.return_code
    except KeyboardInterrupt:
        log.warn("error: interrupted")
        return 130
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
