# Run with .venv/bin/nox (./scripts/bootstrap.sh makes it): the sessions call `python -m release`
# with the interpreter running nox, which must have wheelwright and its pinned tools installed,
# so a PEP 723 header (uvx nox, pipx run) could not describe what it needs.
"""wheelwright sessions, generated from rows.toml. Thin: every session calls `python -m release`.

`nox -l` lists them. Row sessions are for this machine's CPU arch; set
WHEELWRIGHT_ARCH=aarch64 to list another arch's rows. Sessions that build,
publish or change files are not default: name them with -s.

The policy file: WHEELWRIGHT_POLICY=path/to/policy.toml (default rows.toml) chooses
the policy the sessions are generated from and that every session passes on. Arguments
after `--` win over it: `nox -s plan -- --policy other.toml` plans other.toml.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import nox

sys.path.insert(0, str(Path(__file__).parent))

from release.core.errors import WheelwrightError
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.resources.cpus import host_arch

nox.needs_version = ">=2026.10.20"
nox.options.default_venv_backend = "none"
nox.options.sessions = ["plan"]

POLICY = os.environ.get("WHEELWRIGHT_POLICY", "rows.toml")
ARCH = os.environ.get("WHEELWRIGHT_ARCH", host_arch())
PY = sys.executable  # the interpreter running nox has wheelwright installed

STEPS = {
    "build": "Build the {row} wheel (host toolchain here, cibuildwheel container in CI).",
    "audit": "Audit the built {row} wheel against its row.",
    "smoke": "Install the {row} wheel in a fresh venv and run it.",
    "upload": "Publish the audited {row} wheel to the rehearsal index (-- --target NAME for another).",
}


def _rows() -> tuple[Row, ...]:
    try:
        return tuple(r for r in expand(load_policy(POLICY)) if r.platform == ARCH)
    except WheelwrightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(exc.return_code) from None


ROWS = _rows()


def _release(session: nox.Session, command: str, *args: str) -> None:
    """`python -m release COMMAND --policy POLICY ARGS...`: the session's own arguments come
    last, so a `--policy` among them (argparse keeps the last) wins over WHEELWRIGHT_POLICY."""
    session.run(PY, "-m", "release", command, "--policy", POLICY, *args, external=True)


COMMAND = {"build": "build", "audit": "audit", "smoke": "smoke", "upload": "publish"}


def _step_args(step: str, posargs: Sequence[str]) -> tuple[str, ...]:
    """An upload session publishes one row: only a rehearsal target takes a part of the release, so
    it names ``--rehearsal`` unless the session's arguments name a target."""
    named = any(a == "--rehearsal" or a.startswith("--target") for a in posargs)
    return ("--rehearsal",) if step == "upload" and not named else ()


def _row_session(step: str, row: Row) -> None:
    def run(session: nox.Session) -> None:
        _release(session, COMMAND[step], row.id, *_step_args(step, session.posargs), *session.posargs)

    run.__doc__ = STEPS[step].format(row=row.id)
    nox.session(
        name=f"{step}-{row.session_suffix}",
        default=False,
        tags=[step, row.variant, f"py{row.python.replace('.', '')}"],
    )(run)


def _alias_session(step: str, row: Row, python: str) -> None:
    """``build-cu130-py312`` for an abi3/py3-none row built as ``build-cu130-py310``: its one wheel
    serves 3.12 too. No tags, so ``nox -t build`` runs each row once."""

    def run(session: nox.Session) -> None:
        _release(session, COMMAND[step], row.id, *_step_args(step, session.posargs), *session.posargs)

    run.__doc__ = f"The same as {step}-{row.session_suffix}: its wheel serves Python {python} too."
    nox.session(name=f"{step}-{row.variant}-py{python.replace('.', '')}", default=False)(run)


for _row in ROWS:
    for _step in STEPS:
        _row_session(_step, _row)
        for _python in _row.pythons:
            if _python != _row.python:
                _alias_session(_step, _row, _python)


@nox.session(tags=["plan"])
def plan(session: nox.Session) -> None:
    """Show the rows rows.toml expands to (pass --json, --pr, --arch, --offered, --policy after --)."""
    _release(session, "plan", *session.posargs)


@nox.session(tags=["plan"])
def coverage(session: nox.Session) -> None:
    """Which GPUs each row's gpu_archs serve, and against its GPU dependency (pass --wheelhouse DIR, --json after --)."""
    _release(session, "coverage", *session.posargs)


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """Print the GitHub Actions build matrix, generated from rows.toml."""
    _release(session, "matrix", *session.posargs)


@nox.session(default=False)
def trains(session: nox.Session) -> None:
    """Which CUDA releases newer than the policy's trains pip's index offers (changes nothing)."""
    _release(session, "trains", "--check", *session.posargs)


@nox.session(default=False)
def release(session: nox.Session) -> None:
    """Build, audit, smoke-test and publish every row, all or nothing."""
    _release(session, "release", *session.posargs)


def _pytest(session: nox.Session, marker: str) -> None:
    """pytest with ``-m marker`` unless the arguments give their own ``-m``."""
    env = {"WHEELWRIGHT_BIG_BINARIES": os.environ.get("WHEELWRIGHT_BIG_BINARIES", "1")}
    given = any(a.startswith("-m") for a in session.posargs)
    session.run(
        PY, "-m", "pytest", *([] if given else ["-m", marker]), *session.posargs, external=True, env=env
    )


@nox.session(default=False)
def tests(session: nox.Session) -> None:
    """Run the test suite: unit and integration, without the slow tier (``tests-slow``)."""
    _pytest(session, "not slow")


@nox.session(name="tests-slow", default=False)
def tests_slow(session: nox.Session) -> None:
    """Run the slow tier: real third-party wheels (incl. the 400 MB+ CUDA libraries where present),
    whole-matrix rehearsals and builds under emulation. CI runs it after ``tests``."""
    _pytest(session, "slow")


@nox.session(default=False)
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check and mypy --strict."""
    session.run(PY, "-m", "ruff", "check", ".", external=True)
    session.run(PY, "-m", "ruff", "format", "--check", ".", external=True)
    session.run(PY, "-m", "mypy", external=True)
