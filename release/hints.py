"""The commands a message tells the user to run, written for that user: their own ``--policy`` and
``--dist``, and for nox the environment its sessions need (the arch, the policy). Pure."""

from __future__ import annotations

from pathlib import Path

from release.policy.load import DEFAULT_POLICY
from release.policy.matrix import Row
from release.resources.cpus import host_arch

__all__ = ["build_hint"]


def build_hint(row: Row, dist_dir: Path, policy_path: str | None = None, host: str | None = None) -> str:
    """The command that builds the row's wheel where the user's step looks for it, repeating the
    user's own ``--policy`` and ``--dist`` and, for nox, the arch the session must select (pure)."""
    policy = policy_path if policy_path and Path(policy_path).as_posix() != DEFAULT_POLICY else None
    dist = None if Path(dist_dir) == Path("dist") else str(dist_dir)
    options = (f" --policy {policy}" if policy else "") + (f" --dist {dist}" if dist else "")
    env = (f"WHEELWRIGHT_ARCH={row.platform} " if row.platform != (host or host_arch()) else "") + (
        f"WHEELWRIGHT_POLICY={policy} " if policy else ""
    )
    nox = f"{env}nox -s build-{row.session_suffix}" + (f" -- --dist {dist}" if dist else "")
    return f"`python -m release build {row.id}{options}` ({nox})"
