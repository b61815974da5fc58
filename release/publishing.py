"""Publish selected rows to a policy target: the guards, then every variant prepared before any upload.

Glue between the policy (rows, targets), dist/ (wheels and their records) and
:mod:`release.publish` (the checks and uploads). A local-server target gets a
pypiserver started under ``.wheelwright/index`` that outlives the command, so a
rehearsal leaves an index to ``pip install`` from.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.dist import read_record, wheels_for_row
from release.errors import CheckFailed, InputError, StepFailed
from release.matrix import Row, expand
from release.policy import Policy
from release.publish import (
    PublishReport,
    check_release_complete,
    collect_audited_rows,
    execute_publish,
    prepare_publish,
    sha256_file,
)
from release.servers import LocalIndex, attach, start_detached
from release.targets import Target

LOCAL_INDEX_DIR = Path(".wheelwright") / "index"


@dataclass(frozen=True)
class Destination:
    target: Target
    env: Mapping[str, str]  # credentials for publish (never printed)
    local: LocalIndex | None


def policy_sha256(policy: Policy) -> str:
    return hashlib.sha256(Path(policy.path).read_bytes()).hexdigest()


def ensure_local_index(
    variants: Sequence[str], root: Path = LOCAL_INDEX_DIR, *, fresh: bool = False
) -> LocalIndex:
    """Attach to the rehearsal index under ``root``, or start one that outlives this process.

    ``fresh``: stop it and empty it first (each ``release --rehearsal`` publishes to a clean index,
    so rehearsing again after a change never meets the last rehearsal's files).
    """
    if fresh:
        from release.servers import stop

        stop(root)
        import shutil

        shutil.rmtree(root / "packages", ignore_errors=True)
    try:
        index = attach(root)
        if set(variants) <= set(index.variants):
            return index
        from release.servers import stop

        stop(root)
    except StepFailed:
        pass
    print(
        f"==> starting a local index under {root} (stop it: python -m release.servers stop --root {root})",
        file=sys.stderr,
    )
    return start_detached(list(variants), root)


def destination(
    policy: Policy, target_name: str, env: Mapping[str, str], *, fresh: bool = False
) -> Destination:
    pt = policy.target(target_name)
    if not pt.local_server:
        return Destination(pt.to_target(), dict(env), None)
    local = ensure_local_index(policy.variants, fresh=fresh)
    creds = dict(env)
    for variant in policy.variants:
        creds.update(local.credentials_env(variant))
    return Destination(local.target(target_name, rehearsal=True), creds, local)


def smoked_rows(rows: Sequence[Row], dist: Path) -> set[str]:
    """Rows whose wheel has a passing smoke record bound to its current sha256."""
    out: set[str] = set()
    for row in rows:
        for wheel in wheels_for_row(dist, row):
            record = read_record(wheel, "smoke")
            if record and record.get("passed") is True and record.get("sha256") == sha256_file(wheel):
                out.add(row.id)
    return out


def publish_rows(
    policy: Policy,
    rows: Sequence[Row],
    *,
    target_name: str,
    dist: Path,
    env: Mapping[str, str] | None = None,
    check_only: bool = False,
    skip_variants: Sequence[str] = (),
    fresh_local_index: bool = False,
) -> list[PublishReport]:
    """All guards first (completeness, audit records, index state for every variant), then uploads.

    ``skip_variants`` are checked like the others but uploaded by someone else (CI uploads the CPU
    wheel to the default index with trusted publishing).
    """
    env = dict(os.environ if env is None else env)
    pt = policy.target(target_name)
    psha = policy_sha256(policy)
    all_rows = expand(policy)
    wheels: dict[str, list[Path]] = {}
    missing_wheels: list[str] = []
    for row in rows:
        found = wheels_for_row(dist, row)
        if not found:
            missing_wheels.append(row.id)
        wheels.setdefault(row.variant, []).extend(found)
    every_wheel = [w for r in all_rows for w in wheels_for_row(dist, r)]
    audited = collect_audited_rows(every_wheel, policy_sha256=psha)
    smoked = smoked_rows(all_rows, dist)
    # A non-rehearsal target needs the whole matrix, whatever was selected.
    placeholder = Target(pt.name, pt.rehearsal, dict(pt.indexes))
    completeness = check_release_complete(
        [r.id for r in all_rows], audited.keys(), smoked if not pt.rehearsal else None, placeholder
    )
    if not pt.rehearsal and len(rows) != len(all_rows):
        raise CheckFailed(
            f"target {pt.name!r} is not a rehearsal target: it only takes the whole release "
            f"({len(all_rows)} rows), not a selection of {len(rows)}"
        )
    if missing_wheels:
        raise CheckFailed(
            "nothing was published: no wheel in dist/ for "
            + ", ".join(missing_wheels)
            + "; build and audit them first"
        )
    not_audited = [r.id for r in rows if r.id not in audited]
    if not_audited:
        raise CheckFailed(
            "nothing was published: no passing audit record for the current wheel and policy of "
            + ", ".join(not_audited)
            + "; run the audit sessions first"
        )
    if pt.rehearsal and completeness.missing_audit:
        print(
            f"note: rehearsal target {pt.name!r}: {len(completeness.missing_audit)} row(s) of the policy are not "
            "part of this publish (a partial release is allowed only on a rehearsal target)",
            file=sys.stderr,
        )
    if check_only:
        print(f"ok: {len(rows)} row(s) ready for target {pt.name!r}; nothing uploaded (--check-only)")
        return []
    dest = destination(policy, target_name, env, fresh=fresh_local_index)
    prepared = [
        prepare_publish(
            paths,
            dest.target,
            variant=variant,
            policy_sha256=psha,
            expected_files=[p.name for p in paths],
            env=dest.env,
        )
        for variant, paths in sorted(wheels.items())
        if variant not in skip_variants
    ]
    return [execute_publish(p) for p in prepared]


def install_line(project: str, simple_url: str, *, cuda: bool) -> str:
    """What a user types. A CUDA wheel's runtime packages come from the default index, so the
    CUDA index is the --index-url (it wins for the package) and the default index is extra."""
    from release.index_client import resolve_simple_url

    default = resolve_simple_url("pypi")
    if not cuda:
        return f"pip install {project} --index-url {simple_url} --extra-index-url {default}"
    return f"pip install {project} --index-url {simple_url} --extra-index-url {default}"


__all__ = ["LOCAL_INDEX_DIR", "InputError", "destination", "install_line", "publish_rows"]
