"""upload: split out of its former module."""

from __future__ import annotations

import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit
from urllib.request import url2pathname

from packaging.utils import (
    parse_wheel_filename,
)

from release.core import proc
from release.core.errors import CheckFailed, InputError, StepFailed
from release.core.hashing import sha256_file
from release.policy.targets import IndexTarget, Target
from release.publish.index_client import Auth, Redactor, remote_hashes
from release.publish.local import collect_wheels, load_audited_wheels
from release.publish.plan import (
    MIB,
    STOP_AFTER_ENV,
    Credentials,
    Hook,
    LocalWheel,
    Log,
    PublishPlan,
    PublishReport,
    check_local_set,
    check_sizes,
    check_target_urls,
    credential_env_names,
    plan_publish,
    resolve_credentials,
    twine_command,
    twine_env,
    verify_published,
)
from release.publish.static_index import add_wheels, write_static_index

# ---------------------------------------------------------------------------
# Effects: the index


def _stderr_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _stage(wheel: LocalWheel, folder: Path) -> Path:
    """Copy the wheel to a private folder and check the copy is the audited bytes.

    twine uploads the copy, so nothing can change the file between this check and the upload.
    """
    staged = folder / wheel.filename
    try:
        shutil.copyfile(wheel.path, staged)
    except OSError as exc:
        raise StepFailed(f"{wheel.filename}: cannot stage for upload: {exc.strerror}") from None
    sha = sha256_file(staged)
    if sha != wheel.sha256:
        raise CheckFailed(
            f"{wheel.filename}: changed while publishing (sha256 now {sha[:16]}..., audited "
            f"{wheel.sha256[:16]}...); nothing more was uploaded"
        )
    return staged


@dataclass
class _Index:
    """Reads one index's view of this release's projects."""

    index: IndexTarget
    projects: tuple[str, ...]
    auth: Auth | None
    redactor: Redactor
    timeout: tuple[float, float]

    def read(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for project in self.projects:
            out.update(
                remote_hashes(
                    self.index.simple_url,
                    project,
                    auth=self.auth,
                    timeout=self.timeout,
                    redactor=self.redactor,
                )
            )
        return out


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urlsplit(a), urlsplit(b)
    return (pa.scheme, pa.hostname, pa.port) == (pb.scheme, pb.hostname, pb.port)


def _refuse(header: str, problems: Sequence[str]) -> CheckFailed:
    return CheckFailed(header + "\n" + "\n".join(f"  - {p}" for p in problems) + "\nnothing was uploaded")


@dataclass
class PreparedPublish:
    """Everything checked, the index read and the plan made; nothing uploaded yet.

    Made by :func:`prepare_publish`, run by :func:`execute_publish`. A release
    prepares every variant first, so any refusal comes before the first upload
    to any index. Holds credentials: repr shows none.
    """

    target: Target
    variant: str
    index: IndexTarget
    local: tuple[LocalWheel, ...]
    plan: PublishPlan
    creds: Credentials | None = field(repr=False)
    environ: Mapping[str, str] = field(repr=False)
    redactor: Redactor = field(repr=False)
    remote: _Index = field(repr=False)


def prepare_publish(
    wheels: Path | Sequence[Path],
    target: Target,
    *,
    variant: str,
    policy_sha256: str,
    expected_files: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: tuple[float, float] = (10.0, 60.0),
) -> PreparedPublish:
    """Check everything and read the index; upload nothing.

    ``wheels``: a folder (its ``*.whl`` of that variant) or a list of files.
    ``expected_files``: the filenames this release must publish to this index
    (None: the audited wheels given are the set). ``env``: where credentials and
    the test hook are read, and the environment twine runs in (default
    ``os.environ``). Raises CheckFailed naming every refused file (audit record
    missing, failed, for another policy, or bytes changed since the audit; a
    file missing from or foreign to the expected set; a file over the index's
    size limit; a different file under the same name on the index; a file of
    this version on the index that is not audited), or InputError/StepFailed.
    """
    environ = os.environ if env is None else env
    red = Redactor()
    index = target.index_for(variant)
    check_target_urls(target, index)
    creds = resolve_credentials(variant, environ)
    if creds is not None:
        red.add_auth((creds.username, creds.password))
    _stop_after(environ)  # a bad test-hook value fails here, before anything else

    paths, problems = collect_wheels(wheels, variant)
    local, audit_problems = load_audited_wheels(paths, policy_sha256=policy_sha256, variant=variant)
    problems += audit_problems
    problems += check_local_set((p.name for p in paths), expected_files)
    problems += check_sizes(local, index.max_wheel_mib)
    if problems:
        raise _refuse(f"refusing to publish to {target.name!r} ({variant}):", problems)
    if not local:
        raise InputError(f"no {variant} wheels to publish to {target.name!r}")

    read_auth: Auth | None = None
    if (
        creds is not None
        and not index.is_repository_name
        and _same_origin(index.upload_url, index.simple_url)
    ):
        read_auth = (creds.username, creds.password)
    projects = tuple(sorted({parse_wheel_filename(w.filename)[0] for w in local}))
    remote = _Index(index, projects, read_auth, red, timeout)
    plan = plan_publish(local, remote.read())
    if not plan.ok:
        raise _refuse(
            f"refusing to publish to {target.name!r} ({variant}): the index disagrees:", plan.problems()
        )
    return PreparedPublish(target, variant, index, tuple(local), plan, creds, environ, red, remote)


def execute_publish(
    prepared: PreparedPublish,
    *,
    log: Log | None = None,
    hook: Hook | None = None,
    upload_timeout: float = 900.0,
    verify_wait_s: float = 60.0,
) -> PublishReport:
    """Upload what the plan says, one file per twine call, then read the index back.

    ``hook(event, filename)`` is called with ``before-upload`` and ``uploaded``.
    The read-back waits up to ``verify_wait_s`` for files still missing (a CDN
    in front of an index may lag), never for a wrong or unexpected file.
    Raises StepFailed when an upload or the index fails (rerunning resumes), or
    CheckFailed when the index refused a file or does not hold exactly the audited set.
    """
    p = prepared
    red, plan, target, variant, index = p.redactor, p.plan, p.target, p.variant, p.index
    emit = log or _stderr_log

    def say(line: str) -> None:
        emit(red(line))

    say(f"publish: {len(p.local)} audited {variant} wheel(s) -> {target.name} ({index.simple_url})")
    for w in plan.skip_same:
        say(f"  = {w.filename} already on the index with the same sha256; skipped")
    stop_after = _stop_after(p.environ)
    uploaded: list[str] = []
    if plan.to_upload:
        with tempfile.TemporaryDirectory(prefix="wheelwright-publish-") as tmp:
            for n, wheel in enumerate(plan.to_upload, start=1):
                say(
                    f"  + [{n}/{len(plan.to_upload)}] uploading {wheel.filename} ({wheel.size / MIB:.1f} MiB)"
                )
                staged = _stage(wheel, Path(tmp))
                if hook:
                    hook("before-upload", wheel.filename)
                _upload_one(staged, wheel, p, upload_timeout, len(uploaded), len(plan.to_upload))
                staged.unlink()
                uploaded.append(wheel.filename)
                if hook:
                    hook("uploaded", wheel.filename)
                if stop_after is not None and len(uploaded) >= stop_after:
                    say(f"  ! {STOP_AFTER_ENV}={stop_after}: test hook, killing this process now")
                    os.kill(os.getpid(), signal.SIGKILL)
    else:
        say("  nothing to upload: every audited wheel is already on the index")

    deadline = time.monotonic() + verify_wait_s
    while True:
        problems = verify_published(p.local, p.remote.read())
        missing_only = all(x.endswith("not on the index after uploading") for x in problems)
        if not problems or not missing_only or time.monotonic() >= deadline:
            break
        time.sleep(2.0)
    if problems:
        raise CheckFailed(
            f"after publishing to {target.name!r} ({variant}) the index does not hold exactly "
            "the audited set:\n" + "\n".join(f"  - {red(x)}" for x in problems)
        )
    say(
        f"publish: verified {len(p.local)} file(s) on {target.name} ({variant}): "
        f"{len(uploaded)} uploaded, {len(plan.skip_same)} already there"
    )
    return PublishReport(
        target.name,
        variant,
        red(index.simple_url),
        tuple(uploaded),
        tuple(w.filename for w in plan.skip_same),
        tuple(sorted(w.filename for w in p.local)),
    )


def publish(
    wheels: Path | Sequence[Path],
    target: Target,
    *,
    variant: str,
    policy_sha256: str,
    expected_files: Collection[str] | None = None,
    env: Mapping[str, str] | None = None,
    log: Log | None = None,
    hook: Hook | None = None,
    timeout: tuple[float, float] = (10.0, 60.0),
    upload_timeout: float = 900.0,
    verify_wait_s: float = 60.0,
) -> PublishReport:
    """Publish the audited ``variant`` wheels to ``target``'s index for that variant:
    :func:`prepare_publish` then :func:`execute_publish` (see both). Idempotent:
    rerunning after any interruption uploads only what is missing."""
    prepared = prepare_publish(
        wheels,
        target,
        variant=variant,
        policy_sha256=policy_sha256,
        expected_files=expected_files,
        env=env,
        timeout=timeout,
    )
    return execute_publish(
        prepared, log=log, hook=hook, upload_timeout=upload_timeout, verify_wait_s=verify_wait_s
    )


def _add_to_static(staged: Path, index: IndexTarget) -> None:
    """A ``file://`` upload URL is a static index folder: add the file, rewrite the pages."""
    root = Path(url2pathname(urlsplit(index.upload_url).path))
    add_wheels(root, [staged])
    write_static_index(root)


def _stop_after(env: Mapping[str, str]) -> int | None:
    raw = env.get(STOP_AFTER_ENV)
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise InputError(f"{STOP_AFTER_ENV}={raw!r}: a positive whole number (test-only hook)")
    return int(raw)


def _upload_one(
    staged: Path,
    wheel: LocalWheel,
    p: PreparedPublish,
    upload_timeout: float,
    done: int,
    total: int,
) -> None:
    index, creds, red, remote = p.index, p.creds, p.redactor, p.remote
    if index.upload_url.startswith("file://"):
        _add_to_static(staged, index)
        return
    try:
        result = proc.run(
            twine_command(index, staged),
            env=twine_env(p.environ, creds),
            check=False,
            timeout=upload_timeout,
        )
        ok, output = result.returncode == 0, (result.stdout + "\n" + result.stderr)
    except StepFailed as exc:  # timed out; proc's message holds the command line, no secret
        ok, output = False, str(exc)
    if ok:
        return
    resume = (
        f"this run uploaded {done} of its {total} file(s) before this one; rerun the same command "
        "to resume (files already on the index with the same sha256 are skipped)"
    )
    tail = "\n".join(red(output).strip().splitlines()[-15:])
    if re.search(r"\b(401|403)\b", output):
        source = creds.source if creds else "twine's keyring (no credential variable is set)"
        user_var, pass_var = credential_env_names(index.variant)
        resume = (
            f"the index refused the upload credentials from {source}; set {user_var}/{pass_var} "
            f"(or TWINE_USERNAME/TWINE_PASSWORD) to an account allowed to upload\n{resume}"
        )
    try:
        now = remote.read()
    except StepFailed as exc:
        raise StepFailed(
            f"uploading {wheel.filename} failed, and the index could not be read back ({exc}):\n"
            f"{tail}\n{resume}"
        ) from None
    plan = plan_publish([wheel], now)
    if plan.skip_same:
        return  # the index has exactly this file: twine failed after the server stored it
    if plan.conflicts:
        raise CheckFailed(
            f"the index refused {wheel.filename}: {plan.conflicts[0].describe()}\n{tail}\n{resume}"
        )
    raise StepFailed(f"uploading {wheel.filename} failed:\n{tail}\n{resume}")
