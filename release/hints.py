"""The commands a message tells the user to run, written for that user: their own ``--policy`` and
``--dist``, and for nox the environment its sessions need (the arch, the policy). Pure."""

from __future__ import annotations

from pathlib import Path

from release.policy.load import DEFAULT_POLICY
from release.policy.matrix import Row
from release.resources.cpus import is_foreign

__all__ = ["a_or_an", "build_hint", "rerun_hint", "step_hint"]


def build_hint(row: Row, dist_dir: Path, policy_path: str | None = None, host: str | None = None) -> str:
    """The command that builds the row's wheel where the user's step looks for it, repeating the
    user's own ``--policy`` and ``--dist`` and, for nox, the arch the session must select (pure)."""
    policy = policy_path if policy_path and Path(policy_path).as_posix() != DEFAULT_POLICY else None
    dist = None if Path(dist_dir) == Path("dist") else str(dist_dir)
    options = (f" --policy {policy}" if policy else "") + (f" --dist {dist}" if dist else "")
    env = (f"WHEELWRIGHT_ARCH={row.platform} " if is_foreign(row.platform, host) else "") + (
        f"WHEELWRIGHT_POLICY={policy} " if policy else ""
    )
    nox = f"{env}nox -s build-{row.session_suffix}" + (f" -- --dist {dist}" if dist else "")
    return f"`python -m release build {row.id}{options}` ({nox})"


def step_hint(step: str, target: str, *, dist_dir: Path | None = None, policy_path: str | None = None) -> str:
    """``python -m release STEP TARGET`` with the user's own ``--policy`` and ``--dist`` (the defaults
    left out), so that run as printed it acts on the same wheel (pure)."""
    policy = policy_path if policy_path and Path(policy_path).as_posix() != DEFAULT_POLICY else None
    dist = None if dist_dir is None or Path(dist_dir) == Path("dist") else str(dist_dir)
    options = (f" --policy {policy}" if policy else "") + (f" --dist {dist}" if dist else "")
    return f"`python -m release {step} {target}{options}`"


def rerun_hint(kind: str, wheel: Path, row_id: str | None, *, policy: str | None, variant: str) -> str:
    """The command that makes the ``kind`` record of ``wheel`` where the next step reads it, as the
    user must type it (pure): for a row's wheel in ``<dist>/<variant>/`` (``variant``: its file name's),
    the row id with the ``--dist`` above it and ``policy`` (the user's, or its build record's); a build
    otherwise names the row (it writes into a dist folder); any other step names the wheel's path
    with ``--row`` (and, for an audit, ``--record``: outside a dist folder it writes none unasked)."""
    if row_id is None:
        return step_hint(kind, str(wheel), policy_path=policy)
    if wheel.parent.name == variant:
        return step_hint(kind, row_id, dist_dir=wheel.parent.parent, policy_path=policy)
    if kind == "build":
        return step_hint(kind, row_id, policy_path=policy)
    extra = " --record" if kind == "audit" else ""
    return step_hint(kind, f"{wheel} --row {row_id}{extra}", policy_path=policy)


def a_or_an(word: str) -> str:
    """``word`` with the article a reader says before it: "an aarch64", "an x86_64" (read "ex"),
    "an s390x" (read "ess"), "a ppc64le", "a riscv64" (pure)."""
    spoken_vowel = word[:1].lower() in "aeiou" or word.lower().startswith(("x86", "s390"))
    return f"{'an' if spoken_vowel else 'a'} {word}"
