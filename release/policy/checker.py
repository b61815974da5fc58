"""Type and key checks for the policy loader: each failure is a PolicyError naming the key path.

A key path reads like ``train."13.0".gpu_archs.x86_64[6]``. Values shown in messages are
cut short (a hostile file may hold a megabyte string) and spelled in ASCII, so a
newline or a fullwidth digit is visible.
"""

from __future__ import annotations

import difflib
import math
import re
from pathlib import Path, PurePosixPath
from typing import Any

from release.core.errors import PolicyError
from release.policy.versions import token_problem

_SHOWN_CHARS = 80
_MAX_MESSAGE = 800


def brief(value: object) -> str:
    """``repr`` of ``value`` in ASCII, at most about 80 characters."""
    try:
        text = ascii(value)
    except RecursionError:
        text = f"<a {type(value).__name__} nested too deeply to show>"
    except ValueError:  # an int too long to print (0x followed by ten thousand digits)
        text = f"<an {type(value).__name__} too long to show>"
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 3] + "..."


def kind(value: object) -> str:
    return {
        dict: "a table",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a float",
    }.get(type(value), type(value).__name__)


def join(where: str, key: str) -> str:
    """``train`` + ``13.0`` -> ``train."13.0"``; keys that are not bare are quoted, long ones cut."""
    bare = len(key) <= _SHOWN_CHARS and re.fullmatch(r"[A-Za-z0-9_-]+", key, flags=re.ASCII)
    part = key if bare else f'"{brief(key)[1:-1]}"'
    return f"{where}.{part}" if where else part


class Checker:
    """Type and key checks that raise PolicyError with the file and key path."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.notes: list[str] = []  # what the load noticed that is no error, for `plan` to say

    def note(self, where: str, message: str) -> None:
        self.notes.append(f"{self.path}: {where}: {message}")

    def fail(self, where: str, message: str) -> PolicyError:
        # A last bound: every value in a message is already cut short, but a message never
        # grows past a screenful whatever a file holds.
        if len(message) > _MAX_MESSAGE:
            message = message[: _MAX_MESSAGE - 3] + "..."
        return PolicyError(self.path, where, message)

    def table(
        self, value: object, where: str, required: tuple[str, ...], optional: tuple[str, ...]
    ) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where or "top level", f"expected a table, got {kind(value)}")
        allowed = (*required, *optional)
        for key in value:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1)
                hint = f"; did you mean {close[0]!r}?" if close else f"; allowed keys: {', '.join(allowed)}"
                raise self.fail(join(where, key), f"unknown key {brief(key)}{hint}")
        for key in required:
            if key not in value:
                raise self.fail(join(where, key), f"missing required key {key!r}")
        return value

    def entries(
        self, value: object, key: str, required: tuple[str, ...], optional: tuple[str, ...]
    ) -> list[tuple[str, dict[str, Any]]]:
        """An array of tables (``[[key]]``): (where, table) for each entry, each checked by :meth:`table`."""
        if not isinstance(value, list):
            raise self.fail(key, f"expected [[{key}]] entries, got {kind(value)}")
        return [
            (f"{key}[{i}]", self.table(item, f"{key}[{i}]", required, optional))
            for i, item in enumerate(value)
        ]

    def string(self, value: object, where: str, *, nonempty: bool = True) -> str:
        if not isinstance(value, str):
            raise self.fail(where, f"expected a string, got {kind(value)} {brief(value)}")
        if nonempty and not value.strip():
            raise self.fail(where, "must not be empty")
        return value

    def token(self, value: object, where: str) -> str:
        """A string that is one plain ASCII word: an axis value, a name, an image."""
        text = self.string(value, where)
        problem = token_problem(text)
        if problem:
            raise self.fail(where, problem)
        return text

    def boolean(self, value: object, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.fail(where, f"expected true or false, got {kind(value)}")
        return value

    def strings(self, value: object, where: str, *, nonempty: bool = True) -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.fail(where, f"expected a list of strings, got {kind(value)} {brief(value)}")
        if nonempty and not value:
            raise self.fail(where, "must not be an empty list")
        out = tuple(self.string(v, f"{where}[{i}]") for i, v in enumerate(value))
        seen: set[str] = set()
        for i, v in enumerate(out):
            if v in seen:
                raise self.fail(f"{where}[{i}]", f"duplicate entry {brief(v)}; list it once")
            seen.add(v)
        return out

    def choice(self, value: object, where: str, choices: tuple[str, ...]) -> str:
        text = self.string(value, where)
        if text not in choices:
            close = difflib.get_close_matches(text, choices, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise self.fail(
                where, f"{brief(text)} is not allowed; {hint}use exactly one of: {', '.join(choices)}"
            )
        return text

    def tolerance(self, value: object, where: str) -> float:
        """A non-negative, finite number (an integer or a float; not a boolean)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(where, f"expected a number like 1e-6, got {kind(value)} {brief(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer too large for a float
            number = math.inf
        if not math.isfinite(number) or number < 0:
            raise self.fail(where, f"{brief(value)} must be a finite number, 0 or more (0 means exact)")
        return number

    def relative_files(self, value: object, where: str, base: Path) -> tuple[Path, ...]:
        """A list of existing regular files, each written relative to ``base`` (the policy file's
        folder) in POSIX spelling; returned as absolute paths."""
        out: list[Path] = []
        for i, text in enumerate(self.strings(value, where)):
            at = f"{where}[{i}]"
            problem = token_problem(text)
            if problem:
                raise self.fail(at, problem)
            if PurePosixPath(text).is_absolute() or "\\" in text:
                raise self.fail(
                    at, f"{brief(text)} must be relative to the policy file's folder, in POSIX spelling"
                )
            path = (base / text).resolve()
            try:
                regular = path.is_file()
            except OSError as exc:
                raise self.fail(at, f"{brief(text)} ({path}) cannot be read: {exc.strerror or exc}") from None
            if not regular:
                what = "is not a regular file" if path.exists() else "does not exist"
                raise self.fail(
                    at,
                    f"{brief(text)} ({path}) {what}; a build constraints file is given relative to the "
                    "policy file's folder",
                )
            out.append(path)
        return tuple(out)
