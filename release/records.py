"""The dist/ folder: where built wheels and their records live, and which wheel is a row's.

Layout: ``dist/<variant>/<wheel>`` plus ``<wheel>.build.json`` (build), ``<wheel>.audit.json``
(audit) and ``<wheel>.smoke.json`` (smoke) beside it. Steps pass artifacts only through here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.core.errors import InputError
from release.policy.matrix import Row

DIST = Path("dist")


def row_matches_wheel(row: Row, filename: str) -> bool:
    """Does this wheel filename belong to the row (local label, python tag, platform)? Pure."""
    try:
        _name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename:
        return False
    if (version.local or None) != row.local_version:
        return False
    return any(t.interpreter == row.python_tag and t.platform.endswith(f"_{row.platform}") for t in tags)


def wheels_for_row(dist_dir: Path, row: Row) -> list[Path]:
    folder = dist_dir / row.variant
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.whl") if row_matches_wheel(row, p.name))


def the_wheel(dist_dir: Path, row: Row, step: str) -> Path:
    """Exactly one wheel for the row, or an error saying what to run first."""
    found = wheels_for_row(dist_dir, row)
    if not found:
        raise InputError(
            f"no wheel for {row.id} in {dist_dir / row.variant}; run `nox -s build-{row.session_suffix}` before {step}"
        )
    if len(found) > 1:
        names = ", ".join(p.name for p in found)
        raise InputError(
            f"{len(found)} wheels for {row.id} in {dist_dir / row.variant} ({names}); remove the stale ones"
        )
    return found[0]


def read_record(wheel: Path, kind: str) -> dict[str, Any] | None:
    path = wheel.with_name(f"{wheel.name}.{kind}.json")
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: unreadable {kind} record: {exc}") from None
    if not isinstance(data, dict):
        raise InputError(f"{path}: {kind} record is not a JSON object")
    return data
