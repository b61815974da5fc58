"""The record store of dist/: which row a wheel is, typed records, one writer, one reader, the chain.

Layout: ``dist/<variant>/<wheel>`` with ``<wheel>.build.json``, ``<wheel>.audit.json`` and
``<wheel>.smoke.json`` beside it, and the audit's page ``<wheel>.audit.html`` (:func:`companions`);
steps pass artifacts only through here. Every record carries its kind's version, the wheel's
file name and sha256, the policy's sha256 and the row id, plus the stage's own fields
(:class:`BuildRecord`, :class:`AuditRecord`, :class:`SmokeRecord`).

- :func:`row_matches_wheel` is the one answer to "is this wheel the row's?"; :func:`row_for_wheel`,
  :func:`wheels_for_row` and :func:`the_wheel` are built on it.
- :func:`write` writes a record atomically (a temporary file renamed into place);
  :func:`read` is the one validating reader (exact keys, types, version, no self-contradiction).
- :func:`require` is the chain: each step checks the record of the step before it, bound to
  the wheel's current sha256, the row and the policy. Audit requires the build record (for a
  row's wheel from dist/; a wheel file given by path, say a third party's, is audited as it is),
  smoke a passing audit record, publish a passing audit record and a passing smoke record.
- :func:`smoke_evidence`: a smoke run's probe report, wheel sha256 and time, bound by a digest.
  A record is a cache and a report, never a permission: publish audits what it sends again.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any, ClassVar, Literal, TypeVar, get_type_hints

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.core.errors import CheckFailed, InputError
from release.core.files import write_atomic
from release.core.hashing import sha256_file
from release.hints import build_hint, rerun_hint, step_hint
from release.policy.matrix import Row
from release.policy.model import Policy

DIST = Path("dist")
Kind = Literal["build", "audit", "smoke"]
_PAST = {"build": "built", "audit": "audited", "smoke": "smoke-tested"}
_SHA256 = re.compile(r"[0-9a-f]{64}")


# --------------------------------------------------------------------------- identities
def policy_sha256(policy: Policy) -> str:
    """The sha256 of the policy file's bytes, computed once at load: what every record binds to."""
    return policy.sha256


def wheel_variant(filename: str) -> str:
    """The variant a wheel's local version label names (``+cu130`` -> cu130); ``cpu`` without one."""
    try:
        _name, version, _build, _tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise InputError(f"{filename}: not a wheel file name: {exc}") from None
    return version.local or "cpu"


def row_matches_wheel(row: Row, filename: str) -> bool:
    """Is this wheel the row's? The one rule, pure: its local version label is the row's
    variant (none for cpu), and one of its tags is the row's Python on the row's CPU arch in the
    form ``project.wheel_tags`` names (:meth:`Row.serves`: cp312-cp312, cp310-abi3 on a 3.11+
    row, py3-none); another form is not the row's wheel. The manylinux version is not part of the
    identity: a row's wheel with a wrong platform tag is still that row's (the audit says so)."""
    try:
        _name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    if (version.local or None) != row.local_version:
        return False
    return any(row.serves(t.interpreter, t.abi) and t.platform.endswith(f"_{row.platform}") for t in tags)


def row_for_wheel(filename: str, rows: Sequence[Row], *, policy_path: str) -> Row:
    """The row a wheel claims by its file name (:func:`row_matches_wheel`); InputError naming the fix."""
    variant = wheel_variant(filename)
    matches = [r for r in rows if row_matches_wheel(r, filename)]
    if len(matches) == 1:
        return matches[0]
    if matches:  # pragma: no cover - row ids are unique per (variant, python, platform)
        raise InputError(f"{filename}: matches several rows: {', '.join(r.id for r in matches)}; pass --row")
    same_variant = [f"{r.id}: {r.wheel_tag_form}" for r in rows if r.variant == variant]
    if not same_variant:
        known = ", ".join(sorted({r.variant for r in rows}))
        raise InputError(
            f"{filename}: no row of {policy_path} has variant {variant!r} (from the wheel's local version "
            f"label); variants: {known}; pass --row or --variant"
        )
    raise InputError(
        f"{filename}: no row of {policy_path} is variant {variant} for the wheel's Python and CPU arch; rows "
        f"of variant {variant} and their Python tags (project.wheel_tags): {'; '.join(same_variant)} (and the platform tag, "
        "e.g. manylinux_2_28_x86_64); pass --row or --variant"
    )


def wheels_for_row(dist_dir: Path, row: Row) -> list[Path]:
    """Every wheel in ``dist_dir/<variant>/`` that belongs to the row."""
    folder = dist_dir / row.variant
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.whl") if row_matches_wheel(row, p.name))


def one_wheel_problem(
    dist_dir: Path, row: Row, found: Collection[Path], step: str, *, policy_path: str | None = None
) -> str | None:
    """Why ``found`` is not exactly one wheel for the row, or None (pure)."""
    if not found:
        return f"no wheel for {row.id} in {dist_dir / row.variant}; run {build_hint(row, dist_dir, policy_path)} before {step}"
    if len(found) > 1:
        names = ", ".join(sorted(p.name for p in found))
        return (
            f"{len(found)} wheels for {row.id} in {dist_dir / row.variant} ({names}); remove the stale ones"
        )
    return None


def the_wheel(dist_dir: Path, row: Row, step: str, *, policy_path: str | None = None) -> Path:
    """Exactly one wheel for the row, or InputError saying what to run first."""
    found = wheels_for_row(dist_dir, row)
    if problem := one_wheel_problem(dist_dir, row, found, step, policy_path=policy_path):
        raise InputError(problem)
    return found[0]


# --------------------------------------------------------------------------- typed records


@dataclass(frozen=True)
class BuildRecord:
    """``<wheel>.build.json``: how the wheel was built."""

    KIND: ClassVar[Kind] = "build"
    VERSION: ClassVar[int] = 2  # 2: gpu_archs_source
    wheel: str
    sha256: str
    policy_sha256: str
    row: str
    variant: str
    backend: str
    python: str
    platform_tag: str
    toolchain: Mapping[str, Any] | None
    torch_cuda_arch_list: str | None
    cmake_cuda_architectures: str | None
    kernel_cache: str | None
    policy: str  # the policy file's path, as given
    built_at: str
    gpu_archs_source: str | None = None  # a gpu_coverage = "take" row's: the dependency wheel it came from

    @property
    def passed(self) -> bool:
        return True  # a build record exists only for a wheel that was built and checked

    def failure(self) -> str:  # pragma: no cover - never called: passed is always true
        return "the build failed"


@dataclass(frozen=True)
class AuditRecord:
    """``<wheel>.audit.json``: every finding of the audit. ``row`` is None for a wheel audited
    against a variant (``--variant``), ``policy_sha256`` None when no policy file was used."""

    KIND: ClassVar[Kind] = "audit"
    VERSION: ClassVar[int] = 1

    wheel: str
    sha256: str
    policy_sha256: str | None
    row: str | None
    variant: str
    passed: bool
    findings: tuple[Mapping[str, Any], ...]  # {"check", "ok", "message", "library", "details"}

    def failure(self) -> str:
        failed = [f for f in self.findings if f.get("ok") is not True]
        first = f": {failed[0].get('message')}" if failed else ""
        return f"its audit failed ({len(failed)} finding(s){first})"


@dataclass(frozen=True)
class SmokeRecord:
    """``<wheel>.smoke.json``: a fresh-venv install, import and (with a GPU) run. ``evidence``:
    :func:`smoke_evidence` of the run (None in a record of version 2, or from a smoke step that
    kept none; the production GPU gate then refuses it)."""

    KIND: ClassVar[Kind] = "smoke"
    VERSION: ClassVar[int] = 3  # 2: policy_sha256 and variant added; 3: evidence added

    wheel: str
    sha256: str
    policy_sha256: str
    row: str
    variant: str
    passed: bool
    executed: bool
    skipped_reason: str | None
    libcudart: str | None
    lines: tuple[str, ...]
    check: Any  # what the project's check returned (JSON), None when it did not run
    at: str
    evidence: Mapping[str, Any] | None = None  # {"probe", "wheel_sha256", "at", "digest"}

    def failure(self) -> str:
        first = next((line for line in self.lines if line.startswith("✗")), "no line says why")
        return f"its smoke test failed ({first})"


EVIDENCE_KEYS = ("at", "digest", "probe", "wheel_sha256")


def canonical_json(data: object) -> bytes:
    """One byte string per JSON value (sorted keys, no spaces): what digests are taken over."""
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def digest(data: object) -> str:
    return hashlib.sha256(canonical_json(data)).hexdigest()


def smoke_evidence(probe: Mapping[str, Any], *, sha256: str, at: str) -> dict[str, Any]:
    """One smoke run's evidence: the probe's whole report (GPU count, name and driver, loaded
    libraries, the check's result), the wheel's sha256, the time, and the sha256 of the three.
    Anyone who can write the file can still forge it whole (docs/publishing.md: attestation)."""
    body = {"probe": dict(probe), "wheel_sha256": sha256, "at": at}
    return {**body, "digest": digest(body)}


def evidence_problem(record: SmokeRecord) -> str | None:
    """Where a smoke record's verdict contradicts its evidence (pure); None when it does not."""
    ev = record.evidence
    if ev is None:
        return None
    if sorted(ev) != sorted(EVIDENCE_KEYS) or not isinstance(ev.get("probe"), dict):
        return f"'evidence' has keys {sorted(ev)}, not {list(EVIDENCE_KEYS)} with a 'probe' object"
    if ev["digest"] != digest({k: ev[k] for k in ("probe", "wheel_sha256", "at")}):
        return "'evidence' does not match its digest"
    if ev["wheel_sha256"] != record.sha256 or ev["at"] != record.at:
        return "'evidence' is of another wheel or another run ('wheel_sha256'/'at' differ from the record's)"
    if bool(ev["probe"].get("run_check")) != record.executed:
        return "'executed' contradicts the probe's report in 'evidence'"
    return None


AnyRecord = BuildRecord | AuditRecord | SmokeRecord
R = TypeVar("R", BuildRecord, AuditRecord, SmokeRecord)


def to_json(record: AnyRecord) -> dict[str, Any]:
    return {"version": record.VERSION, **dataclasses.asdict(record)}


class _Fields:
    """Typed access to one record's JSON object, failing with the file and the key."""

    def __init__(self, data: object, cls: type[AnyRecord], where: str) -> None:
        self.where, self.kind = where, cls.KIND
        if not isinstance(data, dict):
            raise self.bad("not a JSON object")
        if data.get("version") != cls.VERSION:
            raise self.bad(f"version {data.get('version')!r}; this wheelwright reads version {cls.VERSION}")
        keys = {"version", *(f.name for f in dataclasses.fields(cls))}
        missing, extra = sorted(keys - set(data)), sorted(set(data) - keys)
        if missing or extra:
            raise self.bad(f"missing keys {missing}, unknown keys {extra}")
        self.data: dict[str, Any] = data

    def bad(self, why: str) -> InputError:
        return InputError(
            f"{self.where}: not a valid {self.kind} record ({why}); remove it and run the {self.kind} step again"
        )

    def _typed(self, key: str, types: tuple[type, ...], *, optional: bool = False) -> Any:  # noqa: ANN401
        value = self.data[key]
        if value is None and optional:
            return None
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            raise self.bad(f"{key!r} is {value!r}")
        return value

    def text(self, key: str) -> str:
        return str(self._typed(key, (str,)))

    def opt_text(self, key: str) -> str | None:
        value = self._typed(key, (str,), optional=True)
        return None if value is None else str(value)

    def sha(self, key: str, *, optional: bool = False) -> str | None:
        value = self._typed(key, (str,), optional=optional)
        if value is not None and not _SHA256.fullmatch(value):
            raise self.bad(f"{key!r} is not a sha256 (64 lower-case hex digits)")
        return value if value is None else str(value)

    def raw(self, key: str) -> Any:  # noqa: ANN401 - a project's own JSON
        return self.data[key]

    def flag(self, key: str) -> bool:
        return bool(self._typed(key, (bool,)))

    def mapping(self, key: str) -> Mapping[str, Any] | None:
        value: Mapping[str, Any] | None = self._typed(key, (dict,), optional=True)
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        items = self._typed(key, (list,))
        if not all(isinstance(x, str) for x in items):
            raise self.bad(f"{key!r} holds a non-string")
        return tuple(items)

    def findings(self, key: str) -> tuple[Mapping[str, Any], ...]:
        items = self._typed(key, (list,))
        for i, f in enumerate(items):
            ok = isinstance(f, dict) and isinstance(f.get("check"), str) and isinstance(f.get("message"), str)
            if not ok or not isinstance(f.get("ok"), bool):
                raise self.bad(f"{key}[{i}] is not a finding (check, ok, message)")
        return tuple(items)


Reader = Callable[[_Fields, str], object]
# How each record field is read: by the type its annotation names (typing.get_type_hints: an alias or
# another spelling is that type), a sha256 field by its name; another type fails (test_records.py).
_READERS: dict[object, Reader] = {
    str: _Fields.text,
    str | None: _Fields.opt_text,
    bool: _Fields.flag,
    Mapping[str, Any] | None: _Fields.mapping,
    tuple[str, ...]: _Fields.texts,
    tuple[Mapping[str, Any], ...]: _Fields.findings,
    Any: _Fields.raw,
}
_SHA_FIELDS = frozenset({"sha256", "policy_sha256"})
_SHA_READERS: dict[object, Reader] = {str: _Fields.sha, str | None: partial(_Fields.sha, optional=True)}


def _readers(cls: type) -> tuple[tuple[str, Reader], ...]:
    """Each field of the record dataclass ``cls`` and its reader; TypeError for a type without one."""
    hints = get_type_hints(cls)
    out = []
    for field in dataclasses.fields(cls):
        reader = (_SHA_READERS if field.name in _SHA_FIELDS else _READERS).get(hints[field.name])
        if reader is None:
            raise TypeError(f"{cls.__name__}.{field.name}: no record reader for {hints[field.name]!r}")
        out.append((field.name, reader))
    return tuple(out)


@cache
def _kind_readers(kind: Kind) -> tuple[tuple[str, Reader], ...]:
    """:func:`_readers` of a kind's record class, on its first read (0.2-0.3 ms: not at import)."""
    return _readers({"build": BuildRecord, "audit": AuditRecord, "smoke": SmokeRecord}[kind])


def contradiction(record: AnyRecord) -> str | None:
    """Where a record's verdict contradicts the rest of it (pure); None when nothing does."""
    if isinstance(record, AuditRecord) and record.passed != all(x["ok"] for x in record.findings):
        return "'passed' contradicts its findings"
    if isinstance(record, SmokeRecord):
        if record.passed and any(line.startswith("✗") for line in record.lines):
            return "'passed' contradicts its lines"
        if record.executed == (record.skipped_reason is not None):
            return "'executed' contradicts 'skipped_reason'"
        return evidence_problem(record)
    return None


def from_json(data: object, cls: type[R], where: str) -> R:
    """Validate a record's JSON and build the typed record; InputError naming ``where`` and the key.
    Every field is read by its declared type (:data:`_READERS`). A smoke record of version 2
    reads as version 3 without evidence."""
    if cls is SmokeRecord and isinstance(data, dict) and data.get("version") == 2 and "evidence" not in data:
        data = {**data, "version": 3, "evidence": None}
    f = _Fields(data, cls, where)
    fields: dict[str, Any] = {name: read(f, name) for name, read in _kind_readers(cls.KIND)}
    record = cls(**fields)
    problem = contradiction(record)
    if problem is not None:
        raise f.bad(f"{problem}; the record was edited")
    return record


# --------------------------------------------------------------------------- files


def record_path(wheel: str | os.PathLike[str], kind: Kind) -> Path:
    return Path(wheel).with_name(f"{Path(wheel).name}.{kind}.json")


def companions(wheel: Path) -> list[Path]:
    """Every file beside ``wheel`` that speaks of it: its records (``<wheel>.<kind>.json``) and
    the pages made from them (the audit's ``<wheel>.audit.html``). They go when the wheel does."""
    name = glob.escape(wheel.name)
    return sorted({*wheel.parent.glob(f"{name}.*.json"), *wheel.parent.glob(f"{name}.*.html")})


def write(wheel: Path, record: AnyRecord) -> Path:
    """Write ``<wheel>.<kind>.json`` atomically; StepFailed (exit 4) when the folder is not writable."""
    if record.wheel != wheel.name:  # pragma: no cover - a programming error, not an input
        raise ValueError(f"a record for {record.wheel} cannot be written beside {wheel.name}")
    target = record_path(wheel, record.KIND)
    text = json.dumps(to_json(record), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    return write_atomic(target, text, what=f"the {record.KIND} record")


def read(wheel: Path, cls: type[R]) -> R | None:
    """The validated record of ``wheel`` of this kind; None when there is none."""
    try:
        text = (path := record_path(wheel, cls.KIND)).read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the {cls.KIND} record: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{path}: not valid JSON ({exc}); remove it and run the {cls.KIND} step again"
        ) from None
    return from_json(data, cls, str(path))


def remove(wheel: Path, kind: Kind) -> None:
    """Remove a record before its step runs again: a failed rerun never leaves a stale pass."""
    record_path(wheel, kind).unlink(missing_ok=True)


# --------------------------------------------------------------------------- the chain


def chain_problem(
    record: AnyRecord | None,
    cls: type[AnyRecord],
    *,
    filename: str,
    sha256: str,
    step: str,
    row_id: str | None,
    policy_sha256: str | None,
    rerun: str | None = None,
) -> str | None:
    """Why ``record`` does not let ``step`` use the wheel ``filename`` (now ``sha256``); None when it does.
    Pure. ``row_id`` / ``policy_sha256``: what the record must name (None: not checked). ``rerun``:
    the command to name (:func:`~release.hints.rerun_hint`); None: the step and the row."""
    kind, past = cls.KIND, _PAST[cls.KIND]
    rerun = rerun or step_hint(kind, row_id or filename)
    if record is None:
        return f"{filename}: no {kind} record ({filename}.{kind}.json); {step} needs one: run {rerun} first"
    if record.wheel != filename:
        return f"{filename}.{kind}.json: the record is for {record.wheel!r}, not this wheel; run {rerun}"
    if record.sha256 != sha256:
        return (
            f"{filename}: changed since it was {past}: its bytes are not the ones {past} (sha256 now "
            f"{sha256}, {past} {record.sha256}); run {rerun} again before {step}"
        )
    if row_id is not None and record.row != row_id:
        was = f"as row {record.row!r}" if record.row is not None else "standalone, as no row of a policy"
        return f"{filename}: {past} {was}, not as row {row_id}; run {rerun}"
    if policy_sha256 is not None and record.policy_sha256 != policy_sha256:
        return (
            f"{filename}: {past} against another rows.toml (policy sha256 "
            f"{str(record.policy_sha256)[:12]}..., this {step}'s is {policy_sha256[:12]}...); "
            f"run {rerun} under this policy"
        )
    if not record.passed:
        return f"{filename}: {record.failure()}; fix it and run {rerun} again"
    return None


def require(
    wheel: Path,
    cls: type[R],
    *,
    step: str,
    row_id: str | None,
    policy_sha256: str | None,
    sha256: str | None = None,
    policy_path: str | None = None,
) -> R:
    """The record of the step before ``step``, bound to this wheel, row and policy, and passing;
    CheckFailed (exit 1) naming the file and the fix (``policy_path``, the user's, else the build record's)."""
    record = read(wheel, cls)
    sha = sha256 if sha256 is not None else sha256_file(wheel)
    try:  # the build record names the policy as the user gave it: the rerun's --policy
        built = read(wheel, BuildRecord)
    except InputError:
        built = None
    policy = policy_path or (built.policy if built is not None else None)
    rerun = rerun_hint(cls.KIND, wheel, row_id, policy=policy, variant=wheel_variant(wheel.name))
    problem = chain_problem(
        record, cls, filename=wheel.name, sha256=sha, step=step, row_id=row_id,
        policy_sha256=policy_sha256, rerun=rerun,
    )  # fmt: skip
    if problem is not None or record is None:
        raise CheckFailed(f"{step} refused: {problem}")
    return record
