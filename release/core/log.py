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
  is a plain line, the others do nothing;
* :func:`capture` collects what one thread says (a row's step, while other rows run in
  parallel) instead of writing it, so the caller can show a step's whole log when it
  fails and one line when it passes. Lines are written whole: rows running in parallel
  never cut into each other's lines.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
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
_write_lock = threading.Lock()


@dataclass
class Capture:
    """The lines said in one thread inside :func:`capture`, in order."""

    lines: list[str] = field(default_factory=list)


class _Local(threading.local):
    capture: Capture | None = None


_local = _Local()


def configure(*, level: int = NORMAL, env: Mapping[str, str] | None = None) -> None:
    """Set the verbosity (QUIET, NORMAL, VERBOSE); GitHub mode from ``env`` (default os.environ)."""
    source = os.environ if env is None else env
    _state.level = level
    _state.github = source.get("GITHUB_ACTIONS") == "true"
    _state.said.clear()


def level() -> int:
    return _state.level


def github() -> bool:
    """True when running under GitHub Actions (``GITHUB_ACTIONS=true`` at :func:`configure`)."""
    return _state.github


def _err() -> TextIO:
    return sys.stderr


def _emit(line: str) -> None:
    """Write ``line`` whole: one write under a lock, so parallel rows never split a line."""
    with _write_lock, contextlib.suppress(BrokenPipeError):  # a closed stderr is not worth a traceback
        stream = _err()
        stream.write(line + "\n")
        stream.flush()


def _say(line: str, *, minimum: int) -> None:
    """Into this thread's capture when one is open (written too with ``--verbose``), else out."""
    cap = _local.capture
    if cap is not None:
        cap.lines.append(line)
        if _state.level >= VERBOSE:
            _emit(line)
    elif _state.level >= minimum:
        _emit(line)


def say(row_id: str, message: str) -> None:
    """A step line for one row: ``==> [cu130-py312-x86_64] message``."""
    _say(f"==> [{row_id}] {message}", minimum=NORMAL)


def info(message: str) -> None:
    """A line about the whole run (``==> ...`` lines are written by the caller)."""
    _say(message, minimum=NORMAL)


def detail(message: str) -> None:
    """Only with ``--verbose``: commands run, files read, reasons behind a choice (kept in a
    capture at any level: a failing step's log is shown whole)."""
    _say(message, minimum=VERBOSE)


def warn(message: str) -> None:
    """Always said, even with ``--quiet`` (and kept in this thread's capture, if one is open)."""
    cap = _local.capture
    if cap is not None:
        cap.lines.append(message)
    _emit(message)


def once(message: str, *, key: str | None = None) -> bool:
    """Say ``message`` the first time ``key`` (default: the message) is seen; True if said now.

    A line about the whole run: written out even inside a :func:`capture`."""
    k = message if key is None else key
    with _write_lock:
        if k in _state.said:
            return False
        _state.said.add(k)
    if _state.level >= NORMAL:
        _emit(message)
    return True


@contextlib.contextmanager
def capture() -> Iterator[Capture]:
    """Collect what this thread says (:func:`say`, :func:`info`, :func:`detail`, :func:`warn`)
    instead of writing it; ``--verbose`` writes it as well. Other threads are not affected."""
    outer = _local.capture
    cap = Capture()
    _local.capture = cap
    try:
        yield cap
    finally:
        _local.capture = outer
        if outer is not None:
            outer.lines.extend(cap.lines)


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


def folded(title: str, lines: Sequence[str]) -> None:
    """``title`` and ``lines`` in one write: under ``::group::``/``::endgroup::`` on GitHub Actions
    (folded in the log), as ``==> title`` and the lines elsewhere. For a row's whole log once the
    row is done, so rows running in parallel never interleave inside a group."""
    if _state.github:
        block = [f"::group::{_escape_data(title)}", *lines, "::endgroup::"]
    elif _state.level >= NORMAL:
        block = [f"==> {title}", *lines]
    else:
        return
    _emit("\n".join(block))


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
