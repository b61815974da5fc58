"""output: split out of its former module."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import glob
import json
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from release.build.plan import Backend
from release.core.errors import StepFailed
from release.core.hashing import sha256_file
from release.core.log import say
from release.policy.matrix import Row
from release.records import wheels_for_row

RECORD_VERSION = 1
RECORD_SUFFIX = ".build.json"


@dataclasses.dataclass(frozen=True)
class BuildRecord:
    """A wheel in ``dist/<variant>/`` and the record written beside it."""

    row_id: str
    wheel: Path
    record: Path
    data: Mapping[str, Any]


# --------------------------------------------------------------------------- checks + records


def check_wheel_name(row: Row, filename: str, project_name: str) -> None:
    """The wheel must be the row's: project, version label, and the one tag of the row."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except InvalidWheelFilename as exc:
        raise StepFailed(f"the build produced {filename!r}, which is not a wheel name: {exc}") from None
    problems: list[str] = []
    if name != canonicalize_name(project_name):
        problems.append(f"project {name!r}, expected {project_name!r}")
    if version.local != row.local_version:
        got = f"+{version.local}" if version.local else "no local label"
        want = f"+{row.local_version}" if row.local_version else "no local label"
        problems.append(
            f"version {version} has {got}, the row needs {want} (the variant comes from the row: "
            f"WHEELWRIGHT_VARIANT={row.variant}; the project must build what it is told)"
        )
    want_tag = f"{row.python_tag}-{row.python_tag}-{row.platform_tag}"
    got_tags = sorted(str(t) for t in tags)
    if got_tags != [want_tag]:
        problems.append(f"tags {got_tags}, expected exactly [{want_tag!r}]")
    if problems:
        raise StepFailed(f"{filename} is not a wheel of row {row.id}: " + "; ".join(problems))


def record_data(
    row: Row,
    *,
    wheel: Path,
    backend: Backend,
    toolchain: Mapping[str, Any] | None,
    python: str,
    policy_path: Path,
    kernel_cache: str | None,
) -> dict[str, Any]:
    return {
        "version": RECORD_VERSION,
        "row": row.id,
        "variant": row.variant,
        "wheel": wheel.name,
        "sha256": sha256_file(wheel),
        "toolchain": toolchain,
        "torch_cuda_arch_list": row.torch_cuda_arch_list or None,
        "cmake_cuda_architectures": row.cmake_cuda_architectures or None,
        "platform_tag": row.platform_tag,
        "backend": backend,
        "python": python,
        "kernel_cache": kernel_cache,
        "policy": str(policy_path),
        "policy_sha256": sha256_file(policy_path),
        "built_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    }


def _publish(wheel: Path, dest_dir: Path, data: Mapping[str, Any], row: Row) -> BuildRecord:
    """Move wheel + record into dest_dir atomically (copy to a temp name, then rename)."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / wheel.name
    record = dest_dir / (wheel.name + RECORD_SUFFIX)
    tmp_wheel = dest_dir / f".{wheel.name}.{os.getpid()}.tmp"
    tmp_record = dest_dir / f".{record.name}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(wheel, tmp_wheel)
        tmp_record.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        # The row's previous wheel goes, with every record beside it (build, audit, smoke):
        # an audit of the old wheel must never stand beside the new one.
        for old in {*wheels_for_row(dest_dir.parent, row), target}:
            for stale in dest_dir.glob(f"{glob.escape(old.name)}.*.json"):
                stale.unlink(missing_ok=True)
            if old != target:
                old.unlink(missing_ok=True)
        tmp_wheel.replace(target)
        tmp_record.replace(record)
    except BaseException:
        for p in (tmp_wheel, tmp_record, target, record):
            p.unlink(missing_ok=True)
        raise
    say(row.id, f"wrote {target} and {record.name}")
    return BuildRecord(row.id, target, record, data)
