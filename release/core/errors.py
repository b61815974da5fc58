"""One error tree for wheelwright.

Every error a user can cause or meet carries an exit code and is caught in one
place (:func:`release.cli.main`), which prints ``error: <message>`` and exits
with that code. No traceback reaches the user for an expected failure.

Exit codes:
  1  the artifact failed a check (audit findings, smoke failure, guard refused)
  2  bad input: policy file, command line, wheel that cannot be read
  3  a required tool is missing or broken (nvcc, cuobjdump, python of a row)
  4  a step failed while running (build, upload, index server)
"""

from __future__ import annotations


class WheelwrightError(Exception):
    """Base of every expected wheelwright failure."""

    return_code: int = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class CheckFailed(WheelwrightError):
    """An artifact or a release was checked and did not pass."""

    return_code = 1


class InputError(WheelwrightError):
    """Bad input: command line, wheel file, JSON file."""

    return_code = 2


class PolicyError(InputError):
    """rows.toml is malformed. The message names file, row and key path."""

    def __init__(self, path: str, where: str, message: str) -> None:
        self.path = path
        self.where = where
        super().__init__(f"{path}: {where}: {message}" if where else f"{path}: {message}")


class SelectionError(InputError):
    """A selection (glob, --pr, --offered, an excluded row) cannot be satisfied."""


class ToolError(WheelwrightError):
    """A tool the step needs is missing, the wrong version, or broke."""

    return_code = 3


class StepFailed(WheelwrightError):
    """A step (build, upload, server start) ran and failed."""

    return_code = 4
