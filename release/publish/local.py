"""local: split out of its former module."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from packaging.utils import (
    InvalidWheelFilename,
)

from release.core.errors import InputError
from release.core.hashing import sha256_file
from release.publish.plan import AUDIT_SUFFIX, LocalWheel, check_audit_record, wheel_variant

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
