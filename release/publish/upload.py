"""The effects of publishing one variant: check, stage and audit again, read the index, upload, read back.

:func:`prepare_publish` checks every wheel against its audit record, copies each into the
run's staging folder and audits the copy again (:mod:`release.publish.guards.reverify`), then reads
the index and plans; it uploads nothing. :func:`execute_publish` uploads the staged copies
with twine, one file per call, each under its deadline (:mod:`release.publish.twine_upload`, which
says what the index holds when one fails), and reads the index back; :func:`publish` is the two in
a row, in its own :func:`~release.publish.staging.publish_session`. Errors keep their kind: a
refusal or a read-back that finds other than the audited set is CheckFailed (1), a failed or
timed-out upload StepFailed (4); each says what this run did so far and the one thing to do next.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path

from packaging.utils import parse_wheel_filename

from release.audit.claim import row_expectation
from release.audit.model import Expectation
from release.core import log
from release.core.errors import CheckFailed, InputError, StepFailed
from release.coverage.take import take_lists
from release.policy.matrix import expand
from release.policy.model import Policy
from release.policy.targets import IndexTarget, Target
from release.publish.dist_wheels import collect_wheels, load_audited_wheels
from release.publish.guards.conflicts import describe_conflict
from release.publish.guards.deadlines import Clock, Deadlines, deadlines_for
from release.publish.guards.identity import unexpected_problems
from release.publish.guards.plan import (
    MIB,
    STOP_AFTER_ENV,
    Hook,
    LocalWheel,
    Log,
    PublishReport,
    check_local_set,
    check_sizes,
    check_target_urls,
    file_key,
    plan_publish,
    read_auth,
    release_of,
    resolve_credentials,
    ruled,
)
from release.publish.guards.readback import served_problem
from release.publish.guards.reverify import stage_and_reaudit
from release.publish.index.client import (
    Redactor,
    by_name,
)
from release.publish.index.listing import listing_problems
from release.publish.prepared import IndexReader, PreparedPublish
from release.publish.staging import Session, publish_session
from release.publish.twine_upload import done_so_far, upload_one


def _stderr_log(line: str) -> None:
    log.info(line)


def _refuse(header: str, problems: Sequence[str], *, bad_input: bool = False) -> CheckFailed | InputError:
    """The refusal of ``problems``: CheckFailed (1), or InputError (2) when one is bad input (an
    edited or malformed record)."""
    text = header + "\n" + "\n".join(f"  - {p}" for p in problems) + "\nnothing was uploaded"
    return InputError(text) if bad_input else CheckFailed(text)


def _expectations(policy: Policy, index: IndexTarget, env: Mapping[str, str]) -> dict[str, Expectation]:
    """Each row's expectation, made the one way every step makes it (:func:`row_expectation`); a row whose
    dependency says ``gpu_coverage = "take"`` is held to the list taken from that dependency's wheel, as
    its build and audit were (:func:`take_lists`; it fails closed when the wheel cannot be read)."""
    rows = take_lists(policy, expand(policy), env=env)
    return {
        r.id: row_expectation(r, policy_sha256=policy.sha256, max_wheel_mib=index.max_wheel_mib) for r in rows
    }


def prepare_publish(
    wheels: Path | Sequence[Path],
    target: Target,
    *,
    variant: str,
    policy: Policy,
    session: Session,
    expected_files: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    deadlines: Deadlines | None = None,
    local_folder: Path | None = None,
    log: Log | None = None,
) -> PreparedPublish:
    """Check everything, stage and audit again, read the index; upload nothing.

    ``wheels``: a folder (its ``*.whl`` of that variant) or a list of files. ``expected_files``:
    the filenames this release must publish to this index (None: the audited wheels given are
    the set). ``env``: where credentials, deadline overrides and the test hook are read, and the
    environment twine runs in (default ``os.environ``). Raises CheckFailed naming every refused
    file and the rule it breaks (audit record missing, failed, for another policy or row, bytes
    changed since the audit; the audit run again on the staged copy fails; a file missing from
    or foreign to the expected set; over the index's size limit; a different file under the
    same name on the index, a truncated upload told apart; a file of this version on the index
    that is not audited), or InputError/StepFailed.
    """
    environ = os.environ if env is None else env
    say = log or _stderr_log
    red = Redactor()
    index = target.index_for(variant)
    check_target_urls(target, index)
    limits = deadlines_for(variant, environ, deadlines)
    creds = resolve_credentials(variant, environ)
    if creds is not None:
        red.add_auth((creds.username, creds.password))
    _stop_after(environ)  # a bad test-hook value fails here, before anything else
    header = f"refusing to publish to {target.name!r} ({variant}):"

    rows = expand(policy)
    paths, problems = collect_wheels(wheels, variant)
    local, audit_problems, malformed = load_audited_wheels(
        paths, policy_sha256=policy.sha256, variant=variant, rows=rows, policy_path=policy.path
    )
    problems += audit_problems
    problems += check_local_set((p.name for p in paths), expected_files)
    problems += check_sizes(local, index.max_wheel_mib)
    if problems:
        raise _refuse(header, problems, bad_input=bool(malformed))
    if not local:
        raise InputError(f"no {variant} wheels to publish to {target.name!r}")

    expectations = _expectations(policy, index, os.environ if env is None else env)
    verified, problems = stage_and_reaudit(
        local,
        staging=session.staging / variant,
        expectation_for=lambda w: expectations[w.row],
        log=say,
    )
    if problems:
        raise _refuse(header, problems)
    staged = tuple(v.wheel for v in verified)

    auth = read_auth(index, creds)
    projects = tuple(sorted({parse_wheel_filename(w.filename)[0] for w in staged}))
    remote = IndexReader(index, projects, auth, red, limits.timeout)
    try:
        listing = remote.listing()
    except StepFailed as exc:
        raise StepFailed(
            f"publish to {target.name!r} ({variant}): reading the index failed: {exc}"
            "\nnothing was uploaded; rerun when the index answers"
        ) from None
    problems = listing_problems(listing, _releases(staged), local_folder=local_folder)
    if problems:
        raise _refuse(f"{header} the index's listing is wrong:", problems)
    files = by_name(listing)
    plan = plan_publish(staged, {n: str(f.sha256) for n, f in files.items()})
    if not plan.ok:
        by_key = {file_key(n): f for n, f in files.items()}
        paths_by_name = {w.filename: w.path for w in staged}
        problems = [
            describe_conflict(
                c,
                staged=paths_by_name[c.filename],
                remote=by_key.get(file_key(c.remote_filename)),
                index=index,
                local_folder=local_folder,
                auth=auth,
                timeout=limits.timeout,
                redactor=red,
            )
            for c in plan.conflicts
        ]
        problems += unexpected_problems(plan.unexpected, variant=variant, variants=target.indexes,
                                        where=red(index.simple_url), local_folder=local_folder)  # fmt: skip
        raise _refuse(f"{header} the index disagrees:", problems)
    return PreparedPublish(
        target,
        variant,
        index,
        staged,
        tuple(verified),
        plan,
        limits,
        local_folder,
        creds,
        environ,
        red,
        remote,
    )


def execute_publish(
    prepared: PreparedPublish, *, log: Log | None = None, hook: Hook | None = None
) -> PublishReport:
    """Upload what the plan says, one staged file per twine call, then read the index back.

    ``hook(event, filename)`` is called with ``before-upload`` and ``uploaded``; each staged file
    is hashed right after ``before-upload`` and right after its upload (:mod:`release.publish.guards.seal`).
    The read-back (:func:`_read_back`) downloads every file this run uploaded. Raises StepFailed
    when an upload or the index fails or runs past its deadline (rerunning resumes), or CheckFailed
    when a staged file changed, the index refused a file or does not hold and serve exactly the
    audited set.
    """
    p = prepared
    red, plan = p.redactor, p.plan
    emit = log or _stderr_log

    def say(line: str) -> None:
        emit(red(line))

    say(f"publish: {len(p.local)} audited {p.variant} wheel(s) -> {p.target.name} ({p.index.simple_url})")
    for w in plan.skip_same:
        say(f"  = {w.filename} already on the index with the same sha256; skipped")
    stop_after = _stop_after(p.environ)
    uploaded: list[str] = []
    raced: list[str] = []
    for n, wheel in enumerate(plan.to_upload, start=1):
        say(f"  + [{n}/{len(plan.to_upload)}] uploading {wheel.filename} ({wheel.size / MIB:.1f} MiB)")
        if hook:
            hook("before-upload", wheel.filename)
        outcome = upload_one(wheel, p, uploaded, say)
        (uploaded if outcome == "uploaded" else raced).append(wheel.filename)
        if hook:
            hook("uploaded", wheel.filename)
        if stop_after is not None and len(uploaded) >= stop_after:
            say(f"  ! {STOP_AFTER_ENV}={stop_after}: test hook, killing this process now")
            os.kill(os.getpid(), signal.SIGKILL)
    if not plan.to_upload:
        say("  nothing to upload: every audited wheel is already on the index")

    try:
        problems = _read_back(p, uploaded)
    except StepFailed as exc:
        raise StepFailed(
            f"after uploading, reading {p.where} back failed: {exc}"
            f"\n{done_so_far(uploaded, p)}; rerun the same command to check and complete: files "
            "already on the index with the audited sha256 are skipped"
        ) from None
    if problems:
        raise CheckFailed(
            f"after publishing to {p.where} the index does not hold exactly the audited set:\n"
            + "\n".join(f"  - {red(x)}" for x in problems)
            + f"\n{done_so_far(uploaded, p)}"
        )
    extra = f", {len(raced)} uploaded by someone else meanwhile" if raced else ""
    say(
        f"publish: verified {len(p.local)} file(s) on {p.target.name} ({p.variant}): {len(uploaded)} "
        f"uploaded by this run (downloaded back: the audited bytes), {len(plan.skip_same)} already "
        f"there{extra}"
    )
    return PublishReport(
        p.target.name,
        p.variant,
        red(p.index.simple_url),
        tuple(uploaded),
        tuple(w.filename for w in plan.skip_same),
        tuple(sorted(w.filename for w in p.local)),
        tuple(raced),
    )


def _releases(wheels: Sequence[LocalWheel]) -> set[tuple[str, str]]:
    return {r for w in wheels if (r := release_of(w.filename)) is not None}


def _read_back(p: PreparedPublish, uploaded: Sequence[str]) -> list[str]:
    """What is wrong with the index after this run's uploads (StepFailed when it cannot be read).

    Waits up to the deadlines' ``read_back_s`` for files still missing (a CDN in front of an
    index may lag), never for a wrong or unexpected file. Then: every name listed once
    (:mod:`release.publish.index.listing`); every audited file listed with its sha256, nothing else of
    this release's version; a file listed with another sha256 downloaded, to tell a lying listing
    from another file (:mod:`release.publish.guards.readback`); every file this run uploaded downloaded
    and its bytes' sha256 compared with the audited one.
    """
    clock = Clock(p.deadlines.read_back_s)
    while True:
        listing = p.remote.listing()
        files = by_name(listing)
        now = plan_publish(p.local, {n: str(f.sha256) for n, f in files.items()})
        if not now.to_upload or not now.ok or clock.expired:
            break
        time.sleep(min(2.0, clock.left()))
    problems = listing_problems(listing, _releases(p.local), local_folder=p.local_folder)
    problems += [ruled("read-back", f"{w.filename}: not on the index after uploading") for w in now.to_upload]
    by_key = {file_key(n): f for n, f in files.items()}
    audited = {w.filename: w for w in p.local}
    for c in now.conflicts:
        wheel, there = audited[c.filename], by_key[file_key(c.remote_filename)]
        served = p.remote.served(there, wheel.size, p.deadlines)
        problems.append(
            str(served_problem(c.filename, c.local_sha256, c.remote_sha256, served, replaced=c.describe()))
        )
    problems += unexpected_problems(
        now.unexpected,
        variant=p.variant,
        variants=p.target.indexes,
        where=p.where,
        local_folder=p.local_folder,
    )
    if problems:
        return problems
    for name in uploaded:  # verified means downloaded: the bytes this run sent, as the index serves them
        wheel, there = audited[name], by_key[file_key(name)]
        problem = served_problem(
            name,
            wheel.sha256,
            str(there.sha256),
            p.remote.served(there, wheel.size, p.deadlines),
            replaced="the file was replaced",  # listed with the audited sha256 here: never said
        )
        if problem is not None:
            problems.append(problem)
    return problems


def publish(
    wheels: Path | Sequence[Path],
    target: Target,
    *,
    variant: str,
    policy: Policy,
    dist: Path | None = None,
    expected_files: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    log: Log | None = None,
    hook: Hook | None = None,
    deadlines: Deadlines | None = None,
    local_folder: Path | None = None,
) -> PublishReport:
    """Publish the audited ``variant`` wheels to ``target``'s index for that variant, in one
    session on ``dist`` (default: the wheels' folder): :func:`prepare_publish` then
    :func:`execute_publish` (see both). Idempotent: rerunning after any interruption uploads
    only what is missing."""
    folder = dist or (
        wheels if isinstance(wheels, Path) else Path(os.path.commonpath([w.parent for w in wheels]))
    )
    say = log or _stderr_log
    with publish_session(folder, env=os.environ if env is None else env, log=say) as session:
        prepared = prepare_publish(
            wheels,
            target,
            variant=variant,
            policy=policy,
            session=session,
            expected_files=expected_files,
            env=env,
            deadlines=deadlines,
            local_folder=local_folder,
            log=say,
        )
        return execute_publish(prepared, log=log, hook=hook)


def _stop_after(env: Mapping[str, str]) -> int | None:
    raw = env.get(STOP_AFTER_ENV)
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"{STOP_AFTER_ENV}={raw!r}: a positive whole number (test-only hook)")
    return int(raw)
