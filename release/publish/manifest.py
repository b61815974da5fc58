"""The release manifest: one JSON per release, naming every file it publishes and why it may.

::

    {"version": 1, "project": "tinyaxpy", "release": "0.3.0",
     "policy_sha256": "<sha256 of rows.toml>", "source_commit": "<git commit>" | null,
     "files": [{"filename": "...whl", "variant": "cu130", "row": "cu130-py312-x86_64",
                "sha256": "<hex>", "size": 123, "audit_digest": "<sha256 of the findings>",
                "smoke": {"executed": true, "at": "...Z", "gpu_name": "NVIDIA H200",
                          "driver_version": "580.159.04", "evidence_digest": "<hex>"} | null}]}

``audit_digest`` is the digest of the findings of the audit publish ran again on the bytes it
sent; ``smoke`` summarises the smoke record's evidence (null without one). No timestamp of its
own: a rerun of the same release writes the same bytes.

Where it goes (:func:`place`): into ``dist/<project>-<release>.release.json``; on the local index,
beside each variant's packages (``<root>/releases/<variant>/``, served at
``<upload url>+release/<name>``); on a static (``file://``) index, into the variant's folder next
to ``index.html``. A generic index takes only packages: publish the manifest beside it yourself
(a release asset, the bucket the index lives in); CI attaches ``dist/*.release.json`` to the run.
``python -m release verify`` checks an index against it (:mod:`release.publish.verify`).

Every copy is signed: :func:`write` puts ``<name>.sig`` beside it (Ed25519 over its exact bytes,
:mod:`release.publish.signing`), and ``verify`` checks that signature before it trusts a digest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from urllib.request import url2pathname

from packaging.utils import canonicalize_name, parse_wheel_filename

from release import records
from release.core import proc
from release.core.errors import InputError, StepFailed, ToolError
from release.core.files import write_atomic
from release.core.log import info
from release.policy.targets import IndexTarget
from release.publish import signing
from release.publish.guards.reverify import GPU_KEYS, Reaudited

VERSION = 1
SUFFIX = ".release.json"
FILE_KEYS = ("audit_digest", "filename", "row", "sha256", "size", "smoke", "variant")
KEYS = ("files", "policy_sha256", "project", "release", "source_commit", "version")


@dataclass(frozen=True)
class ManifestFile:
    filename: str
    variant: str
    row: str
    sha256: str
    size: int
    audit_digest: str
    smoke: Mapping[str, Any] | None


@dataclass(frozen=True)
class Manifest:
    project: str  # normalized
    release: str  # the public version every file shares
    policy_sha256: str
    source_commit: str | None
    files: tuple[ManifestFile, ...]

    @property
    def name(self) -> str:
        return f"{self.project}-{self.release}{SUFFIX}"

    @property
    def variants(self) -> tuple[str, ...]:
        return tuple(sorted({f.variant for f in self.files}))

    def for_variant(self, variant: str) -> tuple[ManifestFile, ...]:
        return tuple(f for f in self.files if f.variant == variant)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["files"] = [asdict(f) for f in self.files]
        return {"version": VERSION, **data}

    def text(self) -> str:
        return json.dumps(self.to_json(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def smoke_summary(smoke: records.SmokeRecord | None) -> dict[str, Any] | None:
    """What the manifest says about a wheel's smoke run (pure)."""
    if smoke is None:
        return None
    probe = smoke.evidence["probe"] if smoke.evidence else {}
    return {
        "executed": smoke.executed,
        "at": smoke.at,
        "gpu_name": probe.get(GPU_KEYS[1]),
        "driver_version": probe.get(GPU_KEYS[2]),
        "evidence_digest": smoke.evidence["digest"] if smoke.evidence else None,
    }


def build_manifest(
    verified: Sequence[tuple[str, Reaudited]],
    smokes: Mapping[str, records.SmokeRecord],
    *,
    policy_sha256: str,
    source_commit: str | None,
) -> Manifest:
    """The manifest of ``(variant, re-audited wheel)`` pairs; ``smokes`` by filename. InputError
    when the files are not one release (one project, one public version). Pure."""
    identities = {
        (canonicalize_name(n), v.public)
        for n, v, _b, _t in (parse_wheel_filename(w.wheel.filename) for _, w in verified)
    }
    if len(identities) != 1:
        shown = ", ".join(f"{p} {v}" for p, v in sorted(identities)) or "none"
        raise InputError(f"a release manifest is for one project and version; these wheels are: {shown}")
    ((project, release),) = identities
    files = tuple(
        ManifestFile(
            w.wheel.filename,
            variant,
            w.wheel.row,
            w.wheel.sha256,
            w.wheel.size,
            w.audit_digest,
            smoke_summary(smokes.get(w.wheel.filename)),
        )
        for variant, w in sorted(verified, key=lambda vw: (vw[0], vw[1].wheel.filename))
    )
    return Manifest(str(project), release, policy_sha256, source_commit, files)


def from_json(data: object, where: str) -> Manifest:
    """Validate a manifest's JSON; InputError naming ``where`` and what is wrong."""

    def bad(why: str) -> InputError:
        return InputError(f"{where}: not a release manifest ({why})")

    if not isinstance(data, dict) or data.get("version") != VERSION:
        raise bad(f"version {data.get('version') if isinstance(data, dict) else None!r}, not {VERSION}")
    if sorted(data) != sorted(KEYS):
        raise bad(f"keys {sorted(data)}, expected {list(KEYS)}")
    files = []
    for i, item in enumerate(data["files"] if isinstance(data["files"], list) else [None]):
        if not isinstance(item, dict) or sorted(item) != sorted(FILE_KEYS):
            raise bad(f"files[{i}] is not an object with keys {list(FILE_KEYS)}")
        texts = ("filename", "variant", "row", "sha256", "audit_digest")
        if not all(isinstance(item[k], str) for k in texts) or not isinstance(item["size"], int):
            raise bad(f"files[{i}] has a wrong type")
        smoke = item["smoke"]
        if smoke is not None and not isinstance(smoke, dict):
            raise bad(f"files[{i}].smoke is not an object")
        files.append(ManifestFile(**{k: item[k] for k in FILE_KEYS}))
    for key in ("project", "release", "policy_sha256"):
        if not isinstance(data[key], str):
            raise bad(f"{key!r} is not a string")
    commit = data["source_commit"]
    if commit is not None and not isinstance(commit, str):
        raise bad("'source_commit' is not a string")
    return Manifest(data["project"], data["release"], data["policy_sha256"], commit, tuple(files))


def parse(text: str | bytes, where: str) -> Manifest:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{where}: not valid JSON ({exc})") from None
    return from_json(data, where)


def read(path: Path) -> Manifest:
    try:
        return parse(path.read_bytes(), str(path))
    except OSError as exc:
        raise InputError(f"{path}: cannot read the release manifest: {exc.strerror}") from None


def read_trusted(
    path: Path, *, public_key: str | None, allow_unsigned: bool, env: Mapping[str, str]
) -> tuple[Manifest, str]:
    """The manifest at ``path`` once its signature is checked (:func:`release.publish.signing.check_manifest`),
    and the line saying what was checked. The bytes checked are the bytes parsed."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{path}: cannot read the release manifest: {exc.strerror}") from None
    trusted = None if allow_unsigned else signing.trusted_key(public_key, env)
    said = signing.check_manifest(path, data, trusted, allow_unsigned=allow_unsigned)
    return parse(data, str(path)), said


def write(manifest: Manifest, folder: Path, *, env: Mapping[str, str] | None = None) -> Path:
    """Write ``folder/<name>`` and its signature ``<name>.sig`` (:mod:`release.publish.signing`,
    with the release signing key of ``env``, made on first use) atomically; StepFailed when the
    folder is not writable, InputError when the key is unusable."""
    env = os.environ if env is None else env
    key, key_path, made = signing.signing_key(env)
    if made:
        info(
            f"made the release signing key {key_path} (Ed25519, key id {signing.key_id(key.public_key())}); "
            f"give verifiers its public half, {key_path.with_suffix('.pub')}"
        )
    text = manifest.text()
    path = write_atomic(folder / manifest.name, text, what="the release manifest", mode=0o644, parents=True)
    sig = signing.sign(text, manifest.name, key)
    write_atomic(signing.signature_path(path), sig, what="the release manifest's signature", mode=0o644)
    return path


def source_commit(folder: Path, env: Mapping[str, str]) -> str | None:
    """The git commit of ``folder``'s checkout (``git rev-parse HEAD``), else ``GITHUB_SHA``, else None."""
    try:
        result = proc.run(["git", "-C", str(folder), "rev-parse", "HEAD"], check=False, timeout=30)
    except (ToolError, StepFailed):
        result = None
    if result is not None and result.returncode == 0 and result.stdout.strip():
        return result.stdout.strip()
    return env.get("GITHUB_SHA") or None


def folder_on_index(index: IndexTarget, local_releases: Path | None) -> Path | None:
    """Where the manifest lives beside ``index``'s files, when wheelwright can put it there:
    the local index's releases folder, or a static index's folder; None for any other index."""
    if local_releases is not None:
        return local_releases
    if index.upload_url.startswith("file://"):
        return Path(url2pathname(urlsplit(index.upload_url).path))
    return None


def place(manifest: Manifest, index: IndexTarget, local_releases: Path | None) -> Path | None:
    """Put the manifest beside ``index``'s files (:func:`folder_on_index`); where, or None."""
    folder = folder_on_index(index, local_releases)
    return None if folder is None else write(manifest, folder)
