"""Publish audited wheels to their per-variant index, exactly once.

Layers, as elsewhere in wheelwright:

- data: :class:`LocalWheel`, :class:`PublishPlan`;
- decisions (pure, no files, no network): :func:`check_audit_record`,
  :func:`check_local_set`, :func:`plan_publish`, :func:`resolve_credentials`,
  :func:`twine_command`;
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
through a :class:`~release.publish.index.client.Redactor`.

``WHEELWRIGHT_TEST_STOP_AFTER_UPLOADS=N`` is for tests only: the publishing
process kills itself (SIGKILL) right after its N-th upload, to prove resumption.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from release import records
from release.core.errors import InputError
from release.policy.targets import IndexTarget, Target
from release.publish.index.client import split_userinfo
from release.records import AuditRecord

STOP_AFTER_ENV = "WHEELWRIGHT_TEST_STOP_AFTER_UPLOADS"
TOKEN_USERNAME = "__token__"  # noqa: S105 (the API-token username convention)
MIB = 1024 * 1024

Log = Callable[[str], None]
Hook = Callable[[str, str], None]  # (event, filename): "before-upload", "uploaded"

# Every refusal names the rule it enforces, by these names (docs/publishing.md lists them).
RULES: dict[str, str] = {
    "record-chain": "a wheel needs a passing audit and smoke record of its bytes, its row and this rows.toml",
    "re-audit": "publish audits the exact bytes it sends again, against this rows.toml; a record is no permission",
    "sealed-bytes": "the bytes uploaded are the bytes audited again: hashed after the audit, before and after each upload",
    "gpu-evidence": "a non-rehearsal release needs, per CUDA variant, a GPU smoke run with its probe's evidence",
    "expected-set": "a variant's index receives exactly the release's files for that variant",
    "size-limit": "no file over the index's per-file limit",
    "one-name-one-file": "an index never holds two different files under one name",
    "release-set": "the index holds nothing of this release's version that the release does not",
    "one-index": "each variant has an index of its own: no other variant's file of this release on it, no storage shared",
    "read-back": "after uploading, the index holds exactly the audited files, each with its sha256",
    "deadline": "every index request and every upload ends at its deadline",
    "one-run": "one run at a time per dist/ and per local index",
    "signed-manifest": "verify trusts a release manifest's digests only when the release key signed its exact bytes",
    "reproducible": "verify --rebuild ROW: this checkout rebuilds the row's wheel to the manifest's name and sha256",
}


def ruled(rule: str, text: str) -> str:
    """``text`` naming the rule it enforces: ``... [rule: re-audit]``."""
    assert rule in RULES, rule  # a programming error, not an input
    return f"{text} [rule: {rule}]"


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
        return ruled(
            "one-name-one-file",
            f"{self.filename}: the index already holds {self.remote_filename} with sha256 "
            f"{self.remote_sha256}, but the audited wheel has {self.local_sha256}; an index never "
            "holds two files under one name: if that file was never released, remove it from the "
            "index; if it was, bump the build number (or the version) and rebuild",
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

    def problems(self, *, where: str | None = None, local_folder: Path | None = None) -> list[str]:
        """Each conflict and each unexpected file, said with the fix; ``where``: the index's URL,
        ``local_folder``: the folder of a local index's files (both named when given)."""
        out = [c.describe() for c in self.conflicts]
        out += [unexpected_problem(name, where=where, local_folder=local_folder) for name in self.unexpected]
        return out


def unexpected_problem(name: str, *, where: str | None = None, local_folder: Path | None = None) -> str:
    """The ``release-set`` refusal of ``name``, a file of this release's version on the index that is
    not among the audited wheels: which index, which file, and the three ways out (pure)."""
    try:
        index = f"the {records.wheel_variant(name)} index"
    except InputError:  # an sdist, or no wheel name: no variant to name
        index = "the index"
    if local_folder is not None:
        remove = (
            f"this is the local rehearsal index: remove {local_folder / name} (the folder it serves; a whole "
            "release --rehearsal empties it first)"
        )
    else:
        remove = f"remove {name} from {index} (a local rehearsal index serves it from its packages/ folder)"
    return ruled(
        "release-set",
        f"{name}: on the index for this release's version but not in the audited set ({index}"
        f"{f', {where}' if where else ''}: an index holds exactly the release's files); {remove}; or publish "
        "its row too; or, if that file was released, bump the version and rebuild",
    )


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
    uploaded: tuple[str, ...]  # this run's own uploads, and nothing else
    skipped: tuple[str, ...]  # on the index with the audited sha256 before this run
    verified: tuple[str, ...]  # every audited file, present with its sha256
    raced: tuple[str, ...] = ()  # uploaded by someone else while this run ran (same sha256)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": 2,
            "target": self.target,
            "variant": self.variant,
            "index": self.index,
            "uploaded": list(self.uploaded),
            "skipped": list(self.skipped),
            "raced": list(self.raced),
            "verified": list(self.verified),
        }


# ---------------------------------------------------------------------------
# Pure decisions


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


def release_of(filename: str) -> tuple[str, str] | None:
    """(normalized project, public version) of a wheel or sdist filename; None for anything else."""
    ident = _file_identity(filename)
    return (ident[0], ident[1]) if ident else None


def check_audit_record(
    filename: str,
    current_sha256: str,
    record: object,
    *,
    policy_sha256: str,
    variant: str | None = None,
    row_id: str | None = None,
    rerun: str | None = None,
) -> str | None:
    """Why ``record`` does not let ``filename`` be published, or None when it does (pure).

    ``record``: an :class:`~release.records.AuditRecord`, its JSON (validated by the one
    reader), or None. The chain's rule (:func:`release.records.chain_problem`: this file, these
    bytes, this policy, this row when ``row_id`` is given, passed), plus what publishing needs:
    a row, and the index's variant. Passing here is necessary, never enough: publish audits the
    bytes again (:mod:`release.publish.guards.reverify`). ``rerun``: the audit command to name, with
    the user's own options (:func:`release.hints.rerun_hint`); None: ``python -m release audit ROW``,
    ROW a placeholder.
    """
    if record is not None and not isinstance(record, AuditRecord):
        try:
            record = records.from_json(record, AuditRecord, f"{filename}.audit.json")
        except InputError as exc:
            return ruled("record-chain", str(exc))
    problem = records.chain_problem(
        record,
        AuditRecord,
        filename=filename,
        sha256=current_sha256,
        step="publish",
        row_id=row_id,
        policy_sha256=policy_sha256,
        rerun=rerun,
    )
    if problem is not None or record is None:
        return ruled("record-chain", str(problem))
    if not record.row:
        return ruled(
            "record-chain",
            f"{filename}: audited against a variant, not a row (--variant); audit it as its row "
            f"({rerun or 'python -m release audit ROW'}) to publish it",
        )
    if variant is not None and record.variant != variant:
        return ruled(
            "record-chain",
            f"{filename}: audited as variant {record.variant!r}, this publish is for {variant!r}",
        )
    return None


def check_local_set(local: Iterable[str], expected_files: Collection[str] | None) -> list[str]:
    """Problems when the audited files are not exactly the files this release expects."""
    if expected_files is None:
        return []
    have, want = set(local), set(expected_files)
    problems = [
        ruled("expected-set", f"{name}: expected by this release but not among the wheels given")
        for name in sorted(want - have)
    ]
    problems += [
        ruled("expected-set", f"{name}: given but not expected by this release (another row or version?)")
        for name in sorted(have - want)
    ]
    return problems


def check_sizes(local: Iterable[LocalWheel], max_wheel_mib: int | None) -> list[str]:
    if max_wheel_mib is None:
        return []
    return [
        ruled(
            "size-limit",
            f"{w.filename}: {w.size / MIB:.1f} MiB is over the index's {max_wheel_mib} MiB limit per "
            "file; ask the index for a larger limit or make the wheel smaller",
        )
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
    problems = [ruled("read-back", f"{w.filename}: not on the index after uploading") for w in plan.to_upload]
    problems += plan.problems()
    return problems


def read_auth(index: IndexTarget, creds: Credentials | None) -> tuple[str, str] | None:
    """The credentials to read ``index`` with: the upload credentials only when the simple URL is
    on the upload URL's own server (never sent to another host, say a CDN in front of it)."""
    if creds is None or index.is_repository_name:
        return None
    up, read = urlsplit(index.upload_url), urlsplit(index.simple_url)
    if (up.scheme, up.hostname, up.port) != (read.scheme, read.hostname, read.port):
        return None
    return (creds.username, creds.password)


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
