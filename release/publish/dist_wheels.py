"""The wheels publish reads from disk: a variant's wheels, each checked against its audit record."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from release import records
from release.core.errors import InputError
from release.core.hashing import sha256_file
from release.hints import rerun_hint
from release.policy.matrix import Row
from release.publish.guards.plan import LocalWheel, check_audit_record, ruled


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
                if records.wheel_variant(path.name) == variant:
                    paths.append(path)
            except InputError as exc:
                problems.append(str(exc))
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
            got = records.wheel_variant(path.name)
        except InputError as exc:
            problems.append(str(exc))
            continue
        if got != variant:
            problems.append(f"{path.name}: a {got} wheel; this publish is for {variant}")
            continue
        paths.append(path)
    return paths, problems


class Loaded(NamedTuple):
    """The wheels whose audit record lets publish go on, every problem, and those of the problems
    that are bad input (a record the one reader refuses: edited, malformed; exit 2)."""

    wheels: list[LocalWheel]
    problems: list[str]
    malformed: list[str]


def load_audited_wheels(
    paths: Sequence[Path],
    *,
    policy_sha256: str,
    variant: str | None,
    rows: Sequence[Row] | None = None,
    policy_path: str = "rows.toml",
) -> Loaded:
    """Hash every wheel and check it against its audit record. Returns wheels and problems.

    With ``rows``, each wheel must be the wheel of the row its file name claims
    (:func:`release.records.row_for_wheel`) and its record must be of that row.
    """
    wheels: list[LocalWheel] = []
    problems: list[str] = []
    malformed: list[str] = []
    for path in paths:
        try:
            record = records.read(path, records.AuditRecord)
        except InputError as exc:
            unread = ruled("record-chain", str(exc))
            problems.append(unread)
            malformed.append(unread)
            continue
        try:
            sha = sha256_file(path)
            size = path.stat().st_size
            row_id = (
                None if rows is None else records.row_for_wheel(path.name, rows, policy_path=policy_path).id
            )
        except InputError as exc:
            problems.append(ruled("record-chain", str(exc)))
            continue
        except OSError as exc:
            problems.append(f"{path.name}: cannot read: {exc.strerror}")
            continue
        rerun = rerun_hint(
            "audit", path, row_id, policy=policy_path, variant=variant or records.wheel_variant(path.name)
        )
        problem = check_audit_record(
            path.name, sha, record, policy_sha256=policy_sha256, variant=variant, row_id=row_id, rerun=rerun
        )
        if problem is not None or record is None or record.row is None:
            problems.append(problem or f"{path.name}: no audit record")
            continue
        wheels.append(LocalWheel(path, path.name, sha, record.row, size))
    return Loaded(wheels, problems, malformed)
