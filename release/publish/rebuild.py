"""The rebuild behind ``python -m release verify --rebuild ROW`` (:mod:`release.commands.verify`):
rebuild a published row, compare it with the manifest.

Anyone with the checkout can check a release: the row is built again from the current checkout
(the policy's project, as ``python -m release build`` builds it) into a private temporary folder
(mode 0700, removed after), with a kernel cache of its own (a cache must not stand in for the
compile being checked), and the wheel's sha256 is compared with the signed manifest's entry for
that row (the manifest's signature is checked first, :mod:`release.publish.signing`). Host builds
compile at a fixed path on every machine (:mod:`release.wheelbuild.host.stage`), so a verifier's home
and cache folders do not change the bytes.

Exit 0 when the rebuilt wheel is the manifest's file (name and sha256); 1 naming both digests
when it is not (``[rule: reproducible]``); 2 for bad input (a row the policy or the manifest does
not have); what the build itself raises otherwise (3 a tool is missing, 4 the build failed).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from release.core.errors import InputError
from release.core.hashing import sha256_file
from release.core.machine import default_cache_dir
from release.coverage.take import take_lists
from release.policy.matrix import expand
from release.policy.model import Policy
from release.publish import manifest as mf
from release.wheelbuild.engine import BackendChoice
from release.wheelbuild.run import build_row

RULE = "[rule: reproducible]"


@dataclass(frozen=True)
class Rebuilt:
    row: str
    filename: str
    sha256: str


def manifest_entry(manifest: mf.Manifest, row_id: str) -> mf.ManifestFile:
    """The manifest's one file of ``row_id``; InputError naming the rows it has (pure)."""
    found = [f for f in manifest.files if f.row == row_id]
    if len(found) != 1:
        rows = ", ".join(sorted({f.row for f in manifest.files})) or "none"
        how = "no file" if not found else f"{len(found)} files"
        raise InputError(f"{manifest.name} lists {how} of row {row_id!r}; its rows: {rows}")
    return found[0]


def rebuild_problems(entry: mf.ManifestFile, rebuilt: Rebuilt) -> list[str]:
    """How the rebuilt wheel differs from the manifest's file (pure); [] when it is that file."""
    problems = []
    if rebuilt.filename != entry.filename:
        problems.append(f"the rebuild is {rebuilt.filename}, the manifest lists {entry.filename} {RULE}")
    if rebuilt.sha256 != entry.sha256:
        problems.append(
            f"{entry.filename}: rebuilt with sha256 {rebuilt.sha256}, the manifest says {entry.sha256}: "
            f"this checkout does not build the published bytes {RULE}"
        )
    return problems


def rebuild(row_id: str, *, policy: Policy, backend: BackendChoice, env: Mapping[str, str]) -> Rebuilt:
    """Build ``row_id`` of the loaded ``policy`` (the command loads it once) from its project into a
    private temporary folder; its name and sha256. A row whose dependency says ``gpu_coverage = "take"``
    is rebuilt with the list taken from that dependency's wheel, as its release build was."""
    rows = {r.id: r for r in take_lists(policy, expand(policy), env=env)}
    if row_id not in rows:
        raise InputError(f"{policy.path} has no row {row_id!r}")
    with tempfile.TemporaryDirectory(prefix="wheelwright-rebuild-", dir=env.get("TMPDIR") or None) as tmp:
        work = Path(tmp)  # mkdtemp: mode 0700, this user's
        (built,) = build_row(
            rows[row_id],
            policy=policy,
            dist_dir=work / "dist",
            cache_dir=default_cache_dir(env),
            backend=backend,
            env=env,
            kernel_cache=work / "kernels",
        )
        return Rebuilt(row_id, built.wheel.name, sha256_file(built.wheel))
