"""The one logger: progress and step lines on stderr, results on stdout.

Every stage says what it is doing through these functions, never through ``print`` to
stderr of its own, so that ``--quiet``/``--verbose`` and GitHub Actions output apply
everywhere:

* :func:`say` a step line for a row (``==> [cu130-py312-x86_64] auditing ...``);
* :func:`info` a line about the whole run; :func:`detail` only with ``--verbose``;
* :func:`warn` always, even with ``--quiet``;
* :func:`once` a line said once per process however many rows hit it (the "no
  container engine" reason is the same for every row);
* :func:`group` folds a row's steps under ``::group::`` when ``GITHUB_ACTIONS`` is
  set, :func:`annotate` turns a failing finding into an ``::error`` annotation, and
  :func:`job_summary` appends markdown to ``GITHUB_STEP_SUMMARY``. Elsewhere the first
  is a plain line, the others do nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

QUIET, NORMAL, VERBOSE = 0, 1, 2


@dataclass
class _State:
    level: int = NORMAL
    github: bool = False
    said: set[str] = field(default_factory=set)


_state = _State(github=os.environ.get("GITHUB_ACTIONS") == "true")


def configure(*, level: int = NORMAL, env: Mapping[str, str] | None = None) -> None:
    """Set the verbosity (QUIET, NORMAL, VERBOSE); GitHub mode from ``env`` (default os.environ)."""
    source = os.environ if env is None else env
    _state.level = level
    _state.github = source.get("GITHUB_ACTIONS") == "true"
    _state.said.clear()


def level() -> int:
    return _state.level


def _err() -> TextIO:
    return sys.stderr


def _emit(line: str) -> None:
    with contextlib.suppress(BrokenPipeError):  # a closed stderr is not worth a traceback
        print(line, file=_err(), flush=True)


def say(row_id: str, message: str) -> None:
    """A step line for one row: ``==> [cu130-py312-x86_64] message``."""
    if _state.level >= NORMAL:
        _emit(f"==> [{row_id}] {message}")


def info(message: str) -> None:
    """A line about the whole run (``==> ...`` lines are written by the caller)."""
    if _state.level >= NORMAL:
        _emit(message)


def detail(message: str) -> None:
    """Only with ``--verbose``: commands run, files read, reasons behind a choice."""
    if _state.level >= VERBOSE:
        _emit(message)


def warn(message: str) -> None:
    """Always said, even with ``--quiet``."""
    _emit(message)


def once(message: str, *, key: str | None = None) -> bool:
    """Say ``message`` the first time ``key`` (default: the message) is seen; True if said now."""
    k = message if key is None else key
    if k in _state.said:
        return False
    _state.said.add(k)
    info(message)
    return True


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(text).replace(":", "%3A").replace(",", "%2C")


@contextlib.contextmanager
def group(title: str) -> Iterator[None]:
    """Fold what is said inside under ``title`` in a GitHub Actions log; a plain line elsewhere."""
    if not _state.github:
        info(f"==> {title}")
        yield
        return
    _emit(f"::group::{_escape_data(title)}")
    try:
        yield
    finally:
        _emit("::endgroup::")


def annotate(title: str, message: str, *, level_name: str = "error") -> None:
    """A GitHub Actions annotation (``::error title=...::message``); nothing elsewhere."""
    if _state.github:
        _emit(f"::{level_name} title={_escape_property(title)}::{_escape_data(message)}")


def job_summary(markdown: str, env: Mapping[str, str] | None = None) -> Path | None:
    """Append ``markdown`` to ``$GITHUB_STEP_SUMMARY`` when it is set; the file written, or None."""
    source = os.environ if env is None else env
    target = source.get("GITHUB_STEP_SUMMARY", "")
    if not target:
        return None
    path = Path(target)
    with path.open("a", encoding="utf-8") as f:
        f.write(markdown.rstrip("\n") + "\n\n")
    return path
