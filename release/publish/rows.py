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
from typing import Literal

from release.core.errors import CheckFailed, InputError, StepFailed, WheelwrightError
from release.core.hashing import sha256_file
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.policy.targets import Target
from release.publish.local import collect_audited_rows
from release.publish.local_index import LocalIndex, attach, start_detached
from release.publish.plan import PublishReport, check_release_complete
from release.publish.upload import execute_publish, prepare_publish
from release.records import read_record, wheels_for_row

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
        from release.publish.local_index import stop

        stop(root)
        import shutil

        shutil.rmtree(root / "packages", ignore_errors=True)
    try:
        index = attach(root)
        if set(variants) <= set(index.variants):
            return index
        from release.publish.local_index import stop

        stop(root)
    except StepFailed:
        pass
    print(
        f"==> starting a local index under {root} (stop it: python -m release.publish.index_server stop --root {root})",
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


Mode = Literal["publish", "check", "verify"]


def executed_smoke_variants(rows: Sequence[Row], dist: Path) -> set[str]:
    """CUDA variants with at least one smoke record that really ran on a GPU (bound to the wheel)."""
    out: set[str] = set()
    for row in rows:
        if not row.is_cuda:
            continue
        for wheel in wheels_for_row(dist, row):
            record = read_record(wheel, "smoke")
            ran = record and record.get("passed") is True and record.get("executed") is True
            if ran and record is not None and record.get("sha256") == sha256_file(wheel):
                out.add(row.variant)
    return out


def publish_rows(
    policy: Policy,
    rows: Sequence[Row],
    *,
    target_name: str,
    dist: Path,
    env: Mapping[str, str] | None = None,
    mode: Mode = "publish",
    skip_variants: Sequence[str] = (),
    fresh_local_index: bool = False,
) -> list[PublishReport]:
    """All guards first (completeness, audit records, index state for every variant), then uploads.

    ``mode``: ``check`` runs every guard and reads every index, uploading nothing; ``verify``
    also requires that every audited file is already on its index (after another tool uploaded
    part of the release). ``skip_variants`` are checked like the others but uploaded by someone
    else (CI uploads the CPU wheel to the default index with trusted publishing).
    """
    env = dict(os.environ if env is None else env)
    pt = policy.target(target_name)
    unknown = [v for v in skip_variants if v not in policy.variants]
    if unknown:
        raise InputError(
            f"--skip-variant {', '.join(unknown)}: not a variant of {policy.path} ({', '.join(policy.variants)})"
        )
    psha = policy_sha256(policy)
    all_rows = expand(policy)
    if not pt.rehearsal and {r.id for r in rows} != {r.id for r in all_rows}:
        raise CheckFailed(
            f"target {pt.name!r} is not a rehearsal target: it only takes the whole release "
            f"({len(all_rows)} rows), not a selection of {len(rows)}"
        )
    wheels: dict[str, list[Path]] = {}
    missing_wheels: list[str] = []
    for row in rows:
        found = wheels_for_row(dist, row)
        if len(found) > 1:
            raise CheckFailed(
                f"{len(found)} wheels for {row.id} in {dist / row.variant}; remove the stale ones"
            )
        if not found:
            missing_wheels.append(row.id)
        wheels.setdefault(row.variant, []).extend(found)
    if missing_wheels:
        raise CheckFailed(
            "nothing was published: no wheel in dist/ for "
            + ", ".join(missing_wheels)
            + "; build and audit them first"
        )
    every_wheel = [w for r in all_rows for w in wheels_for_row(dist, r)]
    audited = collect_audited_rows(every_wheel, policy_sha256=psha)
    not_audited = [r.id for r in rows if r.id not in audited]
    if not_audited:
        raise CheckFailed(
            "nothing was published: no passing audit record for the current wheel and policy of "
            + ", ".join(not_audited)
            + "; run the audit sessions first"
        )
    smoked = smoked_rows(all_rows, dist)
    # A non-rehearsal target needs the whole matrix, audited and smoke-tested, whatever was selected.
    placeholder = Target(pt.name, pt.rehearsal, dict(pt.indexes))
    completeness = check_release_complete(
        [r.id for r in all_rows], audited.keys(), smoked if not pt.rehearsal else None, placeholder
    )
    if not pt.rehearsal:
        on_gpu = executed_smoke_variants(all_rows, dist)
        cuda_variants = [t.variant for t in policy.trains]
        never_ran = [v for v in cuda_variants if v not in on_gpu]
        if never_ran:
            raise CheckFailed(
                "nothing was published: no wheel of "
                + ", ".join(never_ran)
                + " was smoke-tested on a GPU (every smoke record says execution was skipped); "
                "run the GPU smoke job and bring its records into dist/"
            )
    elif completeness.missing_audit:
        print(
            f"note: rehearsal target {pt.name!r}: {len(completeness.missing_audit)} row(s) of the policy are not "
            "part of this publish (a partial release is allowed only on a rehearsal target)",
            file=sys.stderr,
        )
    dest = destination(policy, target_name, env, fresh=fresh_local_index and mode == "publish")
    prepared = [
        prepare_publish(
            paths,
            dest.target,
            variant=variant,
            policy_sha256=psha,
            expected_files=[p.name for p in paths],  # exactly one wheel per selected row (checked above)
            env=dest.env,
        )
        for variant, paths in sorted(wheels.items())
    ]
    if mode != "publish":
        missing = [f"{p.variant}: {w.filename}" for p in prepared for w in p.plan.to_upload]
        if mode == "verify" and missing:
            raise CheckFailed("not on the index yet: " + ", ".join(missing))
        what = (
            "every audited file is on its index"
            if mode == "verify"
            else f"{sum(len(p.plan.to_upload) for p in prepared)} file(s) to upload"
        )
        print(f"ok: {len(rows)} row(s) pass every guard for target {pt.name!r}; {what}; nothing uploaded")
        return []
    reports: list[PublishReport] = []
    for p in prepared:
        if p.variant in skip_variants:
            continue
        try:
            reports.append(execute_publish(p))
        except WheelwrightError as exc:
            done = ", ".join(r.variant for r in reports) or "none"
            raise StepFailed(
                f"{exc}\nvariants already published completely: {done}. Run the same publish again to "
                "complete it: files already on an index are skipped, nothing is uploaded twice."
            ) from exc
    return reports


def install_line(project: str, simple_url: str, *, cuda: bool) -> str:
    """What a user types. A CUDA wheel's runtime packages come from the default index, so the
    CUDA index is the --index-url (it wins for the package) and the default index is extra."""
    from release.publish.index_client import resolve_simple_url

    default = resolve_simple_url("pypi")
    if not cuda:
        return f"pip install {project} --index-url {simple_url}"
    return f"pip install {project} --index-url {simple_url} --extra-index-url {default}"
