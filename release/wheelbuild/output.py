"""The build's output: the row's contract applied (:mod:`release.wheelbuild.repair.contract`), the wheel
checked to be the row's, its build record made, both moved into dist/."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from release import records
from release.core.errors import StepFailed
from release.core.hashing import sha256_file
from release.core.log import say
from release.policy.matrix import Row
from release.wheelbuild.backends import Backend
from release.wheelbuild.job import RowJob
from release.wheelbuild.repair.contract import apply_contract


@dataclasses.dataclass(frozen=True)
class BuiltWheel:
    """A wheel in ``dist/<variant>/`` and the build record written beside it."""

    row_id: str
    wheel: Path
    record: Path
    data: records.BuildRecord


# --------------------------------------------------------------------------- checks + records


def check_wheel_name(row: Row, filename: str, project_name: str) -> None:
    """The build's wheel must be the row's (:func:`release.records.row_matches_wheel`) and carry exactly
    the row's one tag and the project's name: what the rest of the release finds it by."""
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
    # the row's own tag; or another tag the release identifies as the row's (abi3, py3-none:
    # records.row_matches_wheel decides), on exactly the row's platform
    other_form = records.row_matches_wheel(row, filename) and all(
        t.platform == row.platform_tag for t in tags
    )
    if got_tags != [want_tag] and not other_form:
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
    policy_sha256: str,
) -> records.BuildRecord:
    """The build record of a wheel just built for ``row`` (not yet in dist/); ``policy_sha256``
    is the loaded policy's (``policy.sha256``)."""
    return records.BuildRecord(
        wheel=wheel.name,
        sha256=sha256_file(wheel),
        policy_sha256=policy_sha256,
        row=row.id,
        variant=row.variant,
        backend=backend,
        python=python,
        platform_tag=row.platform_tag,
        toolchain=None if toolchain is None else dict(toolchain),
        torch_cuda_arch_list=row.torch_cuda_arch_list or None,
        cmake_cuda_architectures=row.cmake_cuda_architectures or None,
        gpu_archs_source=row.gpu_archs_source,
        kernel_cache=kernel_cache,
        policy=str(policy_path),
        built_at=_dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
    )


def move_into_dist(wheel: Path, dest_dir: Path, data: records.BuildRecord, row: Row) -> BuiltWheel:
    """Move a built wheel into ``dest_dir`` (``dist/<variant>/``) with its build record.

    The wheel is copied to a temporary name first, the row's previous wheel goes with every
    record and page beside it (build, audit, smoke records and the audit's HTML page:
    :func:`release.records.companions`; an audit of the old wheel must never stand beside
    the new one), then the copy is renamed into place and the record written atomically.
    On any failure nothing of this build is left in ``dest_dir``.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    target = dest_dir / wheel.name
    record = records.record_path(target, "build")
    tmp_wheel = dest_dir / f".{wheel.name}.{os.getpid()}.tmp"
    try:
        shutil.copyfile(wheel, tmp_wheel)
        for old in {*records.wheels_for_row(dest_dir.parent, row), target}:
            for stale in records.companions(old):
                stale.unlink(missing_ok=True)
            if old != target:
                old.unlink(missing_ok=True)
        tmp_wheel.replace(target)
        records.write(target, data)
    except BaseException:
        for p in (tmp_wheel, target, record):
            p.unlink(missing_ok=True)
        raise
    say(row.id, f"wrote {target} and {record.name}")
    return BuiltWheel(row.id, target, record, data)


def finish_wheel(wheel: Path, job: RowJob, *, work: Path, patchelf: Path, epoch: str | None) -> Path:
    """The row's contract applied to the repaired wheel, then its name checked; the wheel to
    record and move into dist/ (``wheel`` itself when it already satisfied the contract).
    ``epoch``: SOURCE_DATE_EPOCH, for the rewritten wheel's timestamps. Both backends end here."""
    row = job.row
    say(row.id, f"applying the row's contract to {wheel.name}")
    fixed, fix = apply_contract(
        wheel, job.contract, work=work, patchelf=patchelf, epoch=int(epoch) if epoch else None
    )
    for note in fix.notes:
        say(row.id, f"contract: {note}")
    if not fix.needed:
        say(row.id, "contract: the wheel already satisfies it (kept byte for byte)")
    check_wheel_name(row, fixed.name, job.project_name)
    return fixed


def one_wheel(folder: Path, row: Row, what: str) -> Path:
    """The one wheel ``what`` (a build, auditwheel, cibuildwheel) left in ``folder``; StepFailed otherwise."""
    wheels = sorted(folder.glob("*.whl"))
    if len(wheels) != 1:
        raise StepFailed(
            f"row {row.id}: {what} produced {len(wheels)} wheels in {folder} "
            f"({', '.join(w.name for w in wheels) or 'none'}); expected exactly one"
        )
    return wheels[0]
