"""Publish audited wheels to their per-variant index, exactly once.

Layers, as elsewhere in wheelwright:

- data: :class:`LocalWheel`, :class:`PublishPlan`, :class:`Completeness`;
- decisions (pure, no files, no network): :func:`check_audit_record`,
  :func:`check_local_set`, :func:`plan_publish`, :func:`check_release_complete`,
  :func:`resolve_credentials`, :func:`twine_command`;
- effects: :func:`load_audited_wheels` (reads files), :func:`prepare_publish`
  (checks everything, reads the index, plans; uploads nothing),
  :func:`execute_publish` (runs twine, reads the index back), and
  :func:`publish`, the two in a row. A release prepares every variant before
  executing any, so a refusal anywhere comes before the first upload anywhere.

What publish trusts is the audit record beside each wheel
(``<wheel filename>.audit.json``, written by the audit step) and nothing else:
a wheel with no record, a failed record, a record for another policy or a wheel
whose bytes changed since the audit is refused, and every wheel is checked
before the first upload. The index is compared with the local set first: a file
already there with the same sha256 is skipped, a different file under the same
name stops the release (an index never holds two files under one name), so a
rerun after an interruption completes without duplicates. After uploading, the
index is read back: every audited file with its sha256, and nothing else for
this release's version.

Credentials come from the environment (``WHEELWRIGHT_<VARIANT>_USERNAME`` /
``_PASSWORD``, else ``TWINE_USERNAME`` / ``TWINE_PASSWORD``) or twine's keyring,
never from rows.toml, never on a command line, and every line shown is passed
through a :class:`~release.index_client.Redactor`.

``WHEELWRIGHT_TEST_STOP_AFTER_UPLOADS=N`` is for tests only: the publishing
process kills itself (SIGKILL) right after its N-th upload, to prove resumption.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from release import proc
from release.errors import CheckFailed, InputError, StepFailed
from release.hashing import sha256_file
from release.index_client import Auth, Redactor, remote_hashes, split_userinfo
from release.static_index import add_wheels, write_static_index
from release.targets import IndexTarget, Target

AUDIT_SUFFIX = ".audit.json"
AUDIT_VERSION = 1
STOP_AFTER_ENV = "WHEELWRIGHT_TEST_STOP_AFTER_UPLOADS"
TOKEN_USERNAME = "__token__"  # noqa: S105 (the API-token username convention)
MIB = 1024 * 1024

Log = Callable[[str], None]
Hook = Callable[[str, str], None]  # (event, filename): "before-upload", "uploaded"


# ---------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class LocalWheel:
    """An audited wheel, as publish sees it: its bytes' sha256 matched its audit record."""

    path: Path
    filename: str
    sha256: str
    row: str
    size: int


@dataclass(frozen=True)
class Conflict:
    """The index holds a different file under a name this release uses."""

    filename: str
    local_sha256: str
    remote_filename: str
    remote_sha256: str

    def describe(self) -> str:
        return (
            f"{self.filename}: the index already holds {self.remote_filename} with sha256 "
            f"{self.remote_sha256[:16]}..., but the audited wheel has {self.local_sha256[:16]}...; "
            "an index never holds two files under one name: bump the version (or build "
            "number) and rebuild, or remove the file from the index if it was never released"
        )


@dataclass(frozen=True)
class PublishPlan:
    """What publishing would do; nothing has run."""

    to_upload: tuple[LocalWheel, ...]
    skip_same: tuple[LocalWheel, ...]
    conflicts: tuple[Conflict, ...]
    unexpected: tuple[str, ...]  # index files of this release's version(s) that are not audited

    @property
    def ok(self) -> bool:
        return not self.conflicts and not self.unexpected

    def problems(self) -> list[str]:
        out = [c.describe() for c in self.conflicts]
        out += [
            f"{name}: on the index for this release's version but not in the audited set; "
            "remove it from the index or add its row to the release"
            for name in self.unexpected
        ]
        return out


@dataclass(frozen=True)
class Completeness:
    """Which expected rows lack an audit (or a smoke test)."""

    expected: tuple[str, ...]
    missing_audit: tuple[str, ...]
    missing_smoke: tuple[str, ...]

    @property
    def complete(self) -> bool:
        return not self.missing_audit and not self.missing_smoke


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)
    source: str  # which variables they came from (names, never values)

    def __repr__(self) -> str:
        return f"Credentials(username=***, password=***, source={self.source!r})"


@dataclass(frozen=True)
class PublishReport:
    target: str
    variant: str
    index: str  # simple URL, credentials removed
    uploaded: tuple[str, ...]
    skipped: tuple[str, ...]
    verified: tuple[str, ...]  # every audited file, present with its sha256

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 1,
            "target": self.target,
            "variant": self.variant,
            "index": self.index,
            "uploaded": list(self.uploaded),
            "skipped": list(self.skipped),
            "verified": list(self.verified),
        }


# ---------------------------------------------------------------------------
# Pure decisions


def wheel_variant(filename: str) -> str:
    """The variant a wheel's local version label names (``+cu130`` -> cu130); ``cpu`` without one."""
    _, version, _, _ = parse_wheel_filename(filename)
    return version.local or "cpu"


def _file_identity(filename: str) -> tuple[str, str, str] | None:
    """(project, public version, key) of a wheel or sdist filename; None for anything else.

    The key is the normalized identity: two spellings of one wheel's name
    (``TinyAxpy-1.5.0-...`` and ``tinyaxpy-1.5.0-...``) are the same file to an index.
    """
    try:
        name, version, build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        pass
    else:
        build_part = "".join(str(b) for b in build) if build else ""
        tag_part = ".".join(sorted(str(t) for t in tags))
        return name, version.public, f"{name}-{version}-{build_part}-{tag_part}.whl"
    try:
        sname, sversion = parse_sdist_filename(filename)
    except InvalidSdistFilename:
        return None
    return sname, sversion.public, f"{sname}-{sversion}.sdist"


def file_key(filename: str) -> str:
    ident = _file_identity(filename)
    return ident[2] if ident else filename


def check_audit_record(
    filename: str,
    current_sha256: str,
    record: object,
    *,
    policy_sha256: str,
    variant: str | None = None,
) -> str | None:
    """Why ``record`` does not let ``filename`` be published, or None when it does."""
    if record is None:
        return (
            f"{filename}: no audit record ({filename}{AUDIT_SUFFIX}); audit it first "
            "(python -m release audit), publish trusts nothing else"
        )
    if not isinstance(record, dict):
        return f"{filename}{AUDIT_SUFFIX}: not a JSON object"
    if record.get("version") != AUDIT_VERSION:
        return f"{filename}{AUDIT_SUFFIX}: audit record version {record.get('version')!r}, expected {AUDIT_VERSION}"
    if record.get("wheel") != filename:
        return f"{filename}{AUDIT_SUFFIX}: the record is for {record.get('wheel')!r}, not this wheel"
    if record.get("passed") is not True:
        findings = record.get("findings")
        n = len(findings) if isinstance(findings, list) else 0
        return f"{filename}: its audit failed ({n} finding(s)); fix the build and audit again"
    if record.get("policy_sha256") != policy_sha256:
        return (
            f"{filename}: audited against another rows.toml (policy sha256 "
            f"{str(record.get('policy_sha256'))[:12]}..., this release's is {policy_sha256[:12]}...); "
            "audit it again under this policy"
        )
    if not isinstance(record.get("row"), str) or not record["row"]:
        return f"{filename}{AUDIT_SUFFIX}: the record names no row"
    if variant is not None and record.get("variant") != variant:
        return f"{filename}: audited as variant {record.get('variant')!r}, this publish is for {variant!r}"
    recorded = record.get("sha256")
    if not isinstance(recorded, str) or recorded.lower() != current_sha256:
        return (
            f"{filename}: changed since it was audited (sha256 now {current_sha256[:16]}..., "
            f"audited {str(recorded)[:16]}...); audit the wheel you mean to publish"
        )
    return None


def check_local_set(local: Iterable[str], expected_files: Collection[str] | None) -> list[str]:
    """Problems when the audited files are not exactly the files this release expects."""
    if expected_files is None:
        return []
    have, want = set(local), set(expected_files)
    problems = [
        f"{name}: expected by this release but not among the wheels given" for name in sorted(want - have)
    ]
    problems += [
        f"{name}: given but not expected by this release (another row or version?)"
        for name in sorted(have - want)
    ]
    return problems


def check_sizes(local: Iterable[LocalWheel], max_wheel_mib: int | None) -> list[str]:
    if max_wheel_mib is None:
        return []
    return [
        f"{w.filename}: {w.size / MIB:.1f} MiB is over the index's {max_wheel_mib} MiB limit per file; "
        "ask the index for a larger limit or make the wheel smaller"
        for w in local
        if w.size > max_wheel_mib * MIB
    ]


def plan_publish(local: Sequence[LocalWheel], remote: Mapping[str, str]) -> PublishPlan:
    """Compare the audited wheels with what the index holds (``filename -> sha256``).

    Same name and sha256: skip. Same name, other sha256: conflict. Index files of
    this release's project and version(s) that are not audited: unexpected.
    Names are compared by wheel identity (normalized project name, version, tags).
    """
    remote_by_key: dict[str, tuple[str, str]] = {}
    for name, sha in remote.items():
        remote_by_key[file_key(name)] = (name, sha.lower())
    release: set[tuple[str, str]] = set()
    local_keys: set[str] = set()
    to_upload: list[LocalWheel] = []
    skip: list[LocalWheel] = []
    conflicts: list[Conflict] = []
    for wheel in sorted(local, key=lambda w: w.filename):
        ident = _file_identity(wheel.filename)
        key = ident[2] if ident else wheel.filename
        if ident:
            release.add((ident[0], ident[1]))
        local_keys.add(key)
        hit = remote_by_key.get(key)
        if hit is None:
            to_upload.append(wheel)
        elif hit[1] == wheel.sha256.lower():
            skip.append(wheel)
        else:
            conflicts.append(Conflict(wheel.filename, wheel.sha256, hit[0], hit[1]))
    unexpected = sorted(
        name
        for name in remote
        if (ident := _file_identity(name)) is not None
        and (ident[0], ident[1]) in release
        and ident[2] not in local_keys
    )
    return PublishPlan(tuple(to_upload), tuple(skip), tuple(conflicts), tuple(unexpected))


def verify_published(local: Sequence[LocalWheel], remote: Mapping[str, str]) -> list[str]:
    """Problems after uploading: a file missing or different, or an unexpected one."""
    plan = plan_publish(local, remote)
    problems = [f"{w.filename}: not on the index after uploading" for w in plan.to_upload]
    problems += plan.problems()
    return problems


def check_release_complete(
    expected_row_ids: Iterable[str],
    audited_row_ids: Iterable[str],
    smoked_row_ids: Iterable[str] | None,
    target: Target,
) -> Completeness:
    """All or nothing: a non-rehearsal target needs every expected row audited (and
    smoke-tested, when ``smoked_row_ids`` is given). A rehearsal target accepts a
    partial release; the returned value says what is missing.
    """
    expected = tuple(sorted(set(expected_row_ids)))
    audited, smoked = set(audited_row_ids), None if smoked_row_ids is None else set(smoked_row_ids)
    unknown = sorted((audited | (smoked or set())) - set(expected))
    if unknown:
        raise CheckFailed(
            f"rows {', '.join(unknown)} are not in this release's rows; the audit records come "
            "from another policy or selection"
        )
    if not audited:
        raise CheckFailed(f"nothing to publish to {target.name!r}: no row has passed its audit")
    result = Completeness(
        expected,
        tuple(r for r in expected if r not in audited),
        () if smoked is None else tuple(r for r in expected if r not in smoked),
    )
    if result.complete or target.rehearsal:
        return result
    lines = []
    if result.missing_audit:
        lines.append(f"not audited ({len(result.missing_audit)}): {', '.join(result.missing_audit)}")
    if result.missing_smoke:
        lines.append(f"not smoke-tested ({len(result.missing_smoke)}): {', '.join(result.missing_smoke)}")
    raise CheckFailed(
        f"target {target.name!r} receives whole releases only, and {len(expected)} rows are expected:\n  "
        + "\n  ".join(lines)
        + "\nfinish those rows, or publish the partial selection to a rehearsal target"
    )


def credential_env_names(variant: str) -> tuple[str, str]:
    """``WHEELWRIGHT_CU130_USERNAME``, ``WHEELWRIGHT_CU130_PASSWORD`` for variant cu130."""
    stem = re.sub(r"[^A-Z0-9]", "_", variant.upper())
    return f"WHEELWRIGHT_{stem}_USERNAME", f"WHEELWRIGHT_{stem}_PASSWORD"


def resolve_credentials(variant: str, env: Mapping[str, str]) -> Credentials | None:
    """Upload credentials for ``variant``: the variant's own variables first, then twine's.

    None means none are set: twine then asks its keyring. A password without a
    username is an API token (username ``__token__``). Messages name variables,
    never values.
    """
    for user_var, pass_var in (credential_env_names(variant), ("TWINE_USERNAME", "TWINE_PASSWORD")):
        user, password = env.get(user_var, ""), env.get(pass_var, "")
        if password:
            return Credentials(user or TOKEN_USERNAME, password, f"{user_var}/{pass_var}")
        if user:
            raise InputError(
                f"{user_var} is set but {pass_var} is not; set both (or neither, to use a keyring)"
            )
    return None


def _repository_args(index: IndexTarget) -> list[str]:
    if index.is_repository_name:
        return ["--repository", index.upload_url]
    return ["--repository-url", index.upload_url]


def twine_command(index: IndexTarget, wheel: Path, *, python: str = sys.executable) -> list[str]:
    """The twine command line for one file. Credentials travel in the environment only."""
    return [
        python,
        "-m",
        "twine",
        "--no-color",
        "upload",
        "--non-interactive",
        "--disable-progress-bar",
        *_repository_args(index),
        str(wheel),
    ]


def twine_env(base: Mapping[str, str], creds: Credentials | None) -> dict[str, str]:
    """The environment for twine: ours without any credential variable, plus TWINE_* when given."""
    env = {
        k: v
        for k, v in base.items()
        if not (k.startswith("WHEELWRIGHT_") and k.endswith(("_USERNAME", "_PASSWORD")))
        and k not in ("TWINE_USERNAME", "TWINE_PASSWORD", STOP_AFTER_ENV)
    }
    env["TWINE_NON_INTERACTIVE"] = "1"
    if creds is not None:
        env["TWINE_USERNAME"] = creds.username
        env["TWINE_PASSWORD"] = creds.password
    return env


def check_target_urls(target: Target, index: IndexTarget) -> None:
    """rows.toml never holds credentials: refuse a target URL with a user:password part."""
    for what, url in (("upload_url", index.upload_url), ("simple_url", index.simple_url)):
        if "://" in url and split_userinfo(url)[1] is not None:
            user_var, pass_var = credential_env_names(index.variant)
            raise InputError(
                f"target {target.name!r}, variant {index.variant!r}: {what} carries credentials in "
                f"the URL; rows.toml must not hold them. Remove them there and set {user_var} and "
                f"{pass_var} (or TWINE_USERNAME/TWINE_PASSWORD) in the environment"
            )


# ---------------------------------------------------------------------------
# Effects: local files


def audit_record_path(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + AUDIT_SUFFIX)


def _read_record(wheel: Path) -> tuple[object, str | None]:
    path = audit_record_path(wheel)
    if not path.exists():
        return None, None
    try:
        return json.loads(path.read_text(encoding="utf-8")), None
    except (OSError, ValueError) as exc:
        return None, f"{path.name}: cannot read the audit record: {exc}"


def collect_wheels(source: Path | Sequence[Path], variant: str) -> tuple[list[Path], list[str]]:
    """The wheel files to publish for ``variant``, and problems with them.

    A folder gives its ``*.whl`` files whose local version label is ``variant``
    (``cpu``: no label); listed files must all be of ``variant``.
    """
    problems: list[str] = []
    if isinstance(source, Path):
        if not source.is_dir():
            raise InputError(f"{source}: not a folder of wheels")
        paths = []
        for path in sorted(source.glob("*.whl")):
            try:
                if wheel_variant(path.name) == variant:
                    paths.append(path)
            except InvalidWheelFilename as exc:
                problems.append(f"{path.name}: not a wheel filename: {exc}")
        if not paths and not problems:
            raise InputError(
                f"{source}: no {variant} wheels (*.whl with local version +{variant}) to publish"
            )
        return paths, problems
    paths = []
    for path in source:
        if not path.is_file():
            problems.append(f"{path}: no such file")
            continue
        try:
            got = wheel_variant(path.name)
        except InvalidWheelFilename as exc:
            problems.append(f"{path.name}: not a wheel filename: {exc}")
            continue
        if got != variant:
            problems.append(f"{path.name}: a {got} wheel; this publish is for {variant}")
            continue
        paths.append(path)
    return paths, problems


def load_audited_wheels(
    paths: Sequence[Path], *, policy_sha256: str, variant: str | None
) -> tuple[list[LocalWheel], list[str]]:
    """Hash every wheel and check it against its audit record. Returns wheels and problems."""
    wheels: list[LocalWheel] = []
    problems: list[str] = []
    for path in paths:
        record, error = _read_record(path)
        if error:
            problems.append(error)
            continue
        try:
            sha = sha256_file(path)
            size = path.stat().st_size
        except OSError as exc:
            problems.append(f"{path.name}: cannot read: {exc.strerror}")
            continue
        problem = check_audit_record(path.name, sha, record, policy_sha256=policy_sha256, variant=variant)
        if problem or not isinstance(record, dict):
            problems.append(problem or f"{path.name}{AUDIT_SUFFIX}: not a JSON object")
            continue
        wheels.append(LocalWheel(path, path.name, sha, str(record["row"]), size))
    return wheels, problems


def collect_audited_rows(paths: Iterable[Path], *, policy_sha256: str) -> dict[str, str]:
    """``row id -> wheel filename`` for every wheel whose audit record passed under this policy
    and whose bytes still match it (input to :func:`check_release_complete`)."""
    wheels, _ = load_audited_wheels(list(paths), policy_sha256=policy_sha256, variant=None)
    return {w.row: w.filename for w in wheels}


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
