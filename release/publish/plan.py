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
through a :class:`~release.publish.index_client.Redactor`.

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

from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    parse_sdist_filename,
    parse_wheel_filename,
)

from release.core.errors import CheckFailed, InputError
from release.policy.targets import IndexTarget, Target
from release.publish.index_client import split_userinfo

STOP_AFTER_ENV = "WHEELWRIGHT_TEST_STOP_AFTER_UPLOADS"
AUDIT_SUFFIX = ".audit.json"
AUDIT_VERSION = 1
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
