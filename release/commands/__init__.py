"""The commands of ``python -m release``: one module per command, each exporting the same two names,
``add_parser(subparsers) -> argparse.ArgumentParser`` (registers the command, its options and its
``func``) and ``run(args) -> int`` (the command: its output and its exit code).

:func:`release.cli.build_parser` registers them in the order of :data:`COMMANDS`, a release's order
(``--help`` lists them so): plan, build, audit, smoke, publish, verify; release (all of them); then
index, matrix, channels, trains, coverage. :mod:`.options` holds the options and the row selection
they share. A command raises a
:class:`release.core.errors.WheelwrightError`; :func:`release.cli.main` is the one place that turns it
into an exit code. No stage, and nothing in release/core or release/binary, imports this package.
"""

from __future__ import annotations

__all__ = ["COMMANDS"]

COMMANDS = (  # the order of a release, then the one command that runs them all, then the helpers
    "plan",
    "build",
    "audit",
    "smoke",
    "publish",
    "verify",
    "release",
    "index",
    "matrix",
    "channels",
    "trains",
    "coverage",
)
