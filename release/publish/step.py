"""Publish selected rows to a policy target: the guards, then every variant prepared before any upload.

Glue between the policy (rows, targets), dist/ (wheels and their records) and
:mod:`release.publish` (the checks and uploads). A local-server target gets a
pypiserver started under ``.wheelwright/index`` that outlives the command, so a
rehearsal leaves an index to ``pip install`` from.

One run at a time: publishing holds dist/'s lock for the whole run, and a local-server target's
index root's lock while it (re)starts, empties and fills that index (:mod:`release.publish.guards.lock`).
The release manifest (:mod:`release.publish.manifest`) is written into dist/ once every variant
is prepared, and placed beside the wheels on each index wheelwright can write to.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from release import records
from release.core import log
from release.core.errors import CheckFailed, InputError, SelectionError, StepFailed, WheelwrightError
from release.core.hashing import sha256_file
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.policy.targets import Target
from release.publish import manifest as mf
from release.publish.guards import lock
from release.publish.guards.deadlines import Deadlines
from release.publish.guards.identity import recheck_before_upload, shared_storage_problems, storage_of
from release.publish.guards.plan import Log, PublishReport, ruled
from release.publish.guards.reverify import gpu_gate_problems
from release.publish.index import lease as index_lease
from release.publish.index.lease import in_use_problem
from release.publish.index.local import PACKAGES_DIR, RELEASES_DIR, LocalIndex, attach, start_detached, stop
from release.publish.prepared import PreparedPublish
from release.publish.staging import publish_session
from release.publish.upload import execute_publish, prepare_publish
from release.records import policy_sha256

LOCAL_INDEX_DIR = Path(".wheelwright") / "index"


Mode = Literal["publish", "check", "verify"]


@dataclass(frozen=True)
class Destination:
    target: Target
    env: Mapping[str, str]  # credentials for publish (never printed)
    local: LocalIndex | None


def ensure_local_index(
    variants: Sequence[str], root: Path = LOCAL_INDEX_DIR, *, fresh: bool = False
) -> LocalIndex:
    """Attach to the rehearsal index under ``root``, or start one that outlives this process.

    ``fresh``: stop it and empty it first (each ``release --rehearsal`` publishes to a clean index,
    so rehearsing again after a change never meets the last rehearsal's files). Neither stops it
    while another run holds a lease on it (:mod:`release.publish.index.lease`): StepFailed naming
    that run. Call it holding the index root's lock.
    """
    if fresh:
        _not_in_use(root, "stop and empty the local index")
        stop(root)
        shutil.rmtree(root / PACKAGES_DIR, ignore_errors=True)
        shutil.rmtree(root / RELEASES_DIR, ignore_errors=True)
    try:
        index: LocalIndex | None = attach(root)
    except StepFailed:
        index = None
    if index is not None:
        if set(variants) <= set(index.variants):
            return index
        _not_in_use(root, "restart the local index with more variants")
        stop(root)
    log.info(f"==> starting a local index under {root} (stop it: python -m release index stop --root {root})")
    return start_detached(list(variants), root)


def _not_in_use(root: Path, doing: str) -> None:
    problem = in_use_problem(root, doing)
    if problem is not None:
        raise StepFailed(problem)


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


def check_selection(policy: Policy, target_name: str, rows: Sequence[Row]) -> None:
    """A non-rehearsal target takes only the whole release. A selection of part of it is bad
    input (SelectionError, exit 2), for ``release`` and ``publish`` alike."""
    pt = policy.target(target_name)
    every = expand(policy)
    if not pt.rehearsal and {r.id for r in rows} != {r.id for r in every}:
        raise SelectionError(
            f"target {pt.name!r} is not a rehearsal target: it only takes the whole release "
            f"({len(every)} rows), not a selection of {len(rows)}; use a rehearsal target "
            "(--rehearsal) for a part"
        )


@dataclass(frozen=True)
class Ready:
    """A row publish may upload: its one wheel, with a passing audit and smoke record bound to it."""

    row: Row
    wheel: Path
    audit: records.AuditRecord
    smoke: records.SmokeRecord


class Unready(list[str]):
    """The problems of rows that are not ready; ``bad_input``: those that are bad input (exit 2, as in
    audit and smoke): a row with no wheel or several in dist/, a record the one reader refuses
    (edited or malformed)."""

    bad_input: int = 0


def _chained(
    wheel: Path,
    cls: type[records.R],
    *,
    sha256: str,
    row: Row,
    policy_sha256: str,
    problems: Unready,
    policy_path: str | None = None,
) -> records.R | None:
    """The wheel's record of this kind when it lets publish go on; else None, with the problem, whose
    hint repeats the user's ``--policy`` and ``--dist`` (:func:`release.hints.rerun_hint`)."""
    from release.hints import rerun_hint

    try:
        record = records.read(wheel, cls)
    except InputError as exc:
        problems.append(ruled("record-chain", str(exc)))
        problems.bad_input += 1
        return None
    rerun = rerun_hint(cls.KIND, wheel, row.id, policy=policy_path, variant=row.variant)
    why = records.chain_problem(
        record, cls, filename=wheel.name, sha256=sha256, step="publish", row_id=row.id,
        policy_sha256=policy_sha256, rerun=rerun,
    )  # fmt: skip
    if why is not None:
        problems.append(ruled("record-chain", why))
        return None
    return record


def check_ready(
    rows: Sequence[Row], dist: Path, *, policy_sha256: str, policy_path: str | None = None
) -> tuple[list[Ready], Unready]:
    """Each row's wheel and the records of the steps before publish, checked; and every problem."""
    ready: list[Ready] = []
    problems = Unready()
    for row in rows:
        found = records.wheels_for_row(dist, row)
        problem = records.one_wheel_problem(dist, row, found, "publish", policy_path=policy_path)
        if problem is not None:
            problems.append(problem)
            problems.bad_input += 1
            continue
        wheel = found[0]
        sha = sha256_file(wheel)
        audit = _chained(
            wheel, records.AuditRecord, sha256=sha, row=row, policy_sha256=policy_sha256, problems=problems,
            policy_path=policy_path,
        )  # fmt: skip
        smoke = _chained(
            wheel, records.SmokeRecord, sha256=sha, row=row, policy_sha256=policy_sha256, problems=problems,
            policy_path=policy_path,
        )  # fmt: skip
        if audit is not None and smoke is not None:
            ready.append(Ready(row, wheel, audit, smoke))
    return ready, problems


def _built_at(wheel: Path) -> str | None:
    """When the wheel was built, by its build record; None without a readable one."""
    try:
        build = records.read(wheel, records.BuildRecord)
    except InputError:
        return None
    return build.built_at if build is not None and build.sha256 == sha256_file(wheel) else None


def gpu_gate_problem(policy: Policy, ready: Sequence[Ready], *, now: dt.datetime | None = None) -> str | None:
    """A production release needs, for each CUDA variant, one smoke record whose evidence shows a
    passing run on a GPU (:func:`release.publish.guards.reverify.gpu_evidence_problem`)."""
    candidates = [(r.row, r.smoke, _built_at(r.wheel)) for r in ready if r.row.is_cuda]
    problems = gpu_gate_problems(
        [t.variant for t in policy.trains],
        candidates,
        now=now or dt.datetime.now(dt.UTC),
        project=policy.project,
    )
    if not problems:
        return None
    return "nothing was published:\n  - " + "\n  - ".join(problems)


def with_context(exc: WheelwrightError, context: str) -> WheelwrightError:
    """The same error, same kind and exit code, with ``context`` added to its message."""
    exc.message = f"{exc.message}\n{context}"
    exc.args = (exc.message,)
    return exc


@contextlib.contextmanager
def _local_index_lock(local_server: bool, env: Mapping[str, str], log: Log) -> Iterator[None]:
    """The rehearsal index's lock, for a local-server target: one run (re)starts and fills it at a time."""
    if not local_server:
        yield
        return
    with lock.hold(LOCAL_INDEX_DIR, what="the local index", wait_s=lock.wait_from_env(env), log=log):
        yield


def _stderr(line: str) -> None:
    log.info(line)


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
    deadlines: Deadlines | None = None,
    log: Log | None = None,
) -> list[PublishReport]:
    """All guards first (selection, the record chain, GPU evidence, the audit run again on the
    staged bytes, index state for every variant), then uploads.

    Every selected row needs exactly one wheel in ``dist`` with a passing audit record and a
    passing smoke record, both bound to the wheel's sha256, the row and this policy, and a fresh
    audit of the exact bytes to be sent must pass. A non-rehearsal target takes only the whole
    release, and needs each CUDA variant smoke-tested on a GPU, with the run's evidence.
    ``mode``: ``check`` runs every guard and reads every index, uploading nothing; ``verify``
    also requires that every audited file is already on its index (after another tool uploaded
    part of the release). ``skip_variants`` are checked like the others but uploaded by someone
    else (CI uploads the CPU wheel to the default index with trusted publishing). The run holds
    dist/'s lock (and the local index's): a second run waits, then refuses naming the first.
    An error keeps its exit code through this layer (a read-back check failure stays 1).
    """
    env = dict(os.environ if env is None else env)
    say = log or _stderr
    pt = policy.target(target_name)
    unknown = [v for v in skip_variants if v not in policy.variants]
    if unknown:
        raise InputError(
            f"--skip-variant {', '.join(unknown)}: not a variant of {policy.path} ({', '.join(policy.variants)})"
        )
    check_selection(policy, target_name, rows)
    psha = policy_sha256(policy)
    if pt.local_server:  # no other run stops or empties the index from here to the end of this run
        index_lease.claim(LOCAL_INDEX_DIR, log=say)
    with publish_session(dist, env=env, log=say) as session:
        ready, problems = check_ready(rows, dist, policy_sha256=psha, policy_path=policy.path)
        if problems:
            text = (
                f"nothing was published: {len(rows) - len(ready)} of {len(rows)} row(s) are not ready (each "
                "needs one wheel in dist/ with a passing audit record and a passing smoke record, bound to "
                "its sha256, its row and this policy):\n  - " + "\n  - ".join(problems)
            )
            raise InputError(text) if problems.bad_input else CheckFailed(text)
        if not pt.rehearsal:
            gate = gpu_gate_problem(policy, ready)
            if gate:
                raise CheckFailed(gate)
        elif len(rows) < len(expand(policy)):
            say(
                f"note: rehearsal target {pt.name!r}: {len(expand(policy)) - len(rows)} row(s) of the policy "
                "are not part of this publish (a partial release is allowed only on a rehearsal target)"
            )
        wheels: dict[str, list[Path]] = {}
        for r in ready:
            wheels.setdefault(r.row.variant, []).append(r.wheel)
        with _local_index_lock(pt.local_server, env, say):
            dest = destination(policy, target_name, env, fresh=fresh_local_index and mode == "publish")
            prepared = [
                prepare_publish(
                    paths,
                    dest.target,
                    variant=variant,
                    policy=policy,
                    session=session,
                    expected_files=[p.name for p in paths],  # one wheel per selected row (checked above)
                    env=dest.env,
                    deadlines=deadlines,
                    local_folder=dest.local.folder(variant) if dest.local else None,
                    log=say,
                )
                for variant, paths in sorted(wheels.items())
            ]
            shared = shared_storage_problems(
                {p.variant: storage_of(p.index, p.local_folder) for p in prepared}
            )
            if shared:
                raise CheckFailed(
                    "nothing was uploaded: two variants share one index:\n  - " + "\n  - ".join(shared)
                )
            release = mf.build_manifest(
                [(p.variant, v) for p in prepared for v in p.verified],
                {r.wheel.name: r.smoke for r in ready},
                policy_sha256=psha,
                source_commit=mf.source_commit(policy.source.parent, env),
            )
            if mode != "publish":
                missing = [f"{p.variant}: {w.filename}" for p in prepared for w in p.plan.to_upload]
                if mode == "verify" and missing:
                    raise CheckFailed("not on the index yet: " + ", ".join(missing))
                what = (
                    "every audited file is on its index"
                    if mode == "verify"
                    else f"{sum(len(p.plan.to_upload) for p in prepared)} file(s) to upload"
                )
                say(
                    f"ok: {len(rows)} row(s) pass every guard for target {pt.name!r}; {what}; nothing uploaded"
                )
                return []
            written = mf.write(release, dist)
            say(f"release manifest: {written}")
            return _execute(prepared, release, dest, skip_variants, say)
    raise AssertionError("unreachable")  # pragma: no cover


def _execute(
    prepared: Sequence[PreparedPublish],
    release: mf.Manifest,
    dest: Destination,
    skip_variants: Sequence[str],
    say: Log,
) -> list[PublishReport]:
    reports: list[PublishReport] = []
    for p in prepared:
        if p.variant in skip_variants:
            continue
        try:
            if p.plan.to_upload:  # another variant's uploads may have landed here: an alias (issue 25 item 3)
                recheck_before_upload(
                    p.remote.listing, p.local, variant=p.variant, variants=p.target.indexes, where=p.where
                )
            reports.append(execute_publish(p, log=say))
        except WheelwrightError as exc:
            done = ", ".join(r.variant for r in reports) or "none"
            raise with_context(exc, f"variants already published completely: {done}") from None
        placed = mf.place(release, p.index, dest.local.releases(p.variant) if dest.local else None)
        if placed is not None:
            say(f"  release manifest placed beside the {p.variant} wheels: {placed}")
        else:
            say(
                f"  {p.variant}: this index takes packages only; publish {release.name} from dist/ beside it "
                "(CI attaches it to the run)"
            )
    return reports
