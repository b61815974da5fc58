"""Moving a built wheel into dist/: the row's previous wheel goes with every record and page of it.

A real wheel (a zip with a dist-info) is moved into a dist/ that holds what earlier runs left:
an older wheel of the row with its records, the audit's HTML page of a wheel of the same name,
and another row's wheel with its own page and records, which must all stay.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release import records
from release.wheelbuild.output import move_into_dist, record_data

ROWS = rows_by_id()
ROW = ROWS["cu130-py312-x86_64"]
NEW = "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
OLDER = "tinyaxpy-0.2.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
OTHER = "tinyaxpy-0.3.0+cu130-cp313-cp313-manylinux_2_28_x86_64.whl"  # the py313 row's


def _wheel(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("tinyaxpy/__init__.py", body)
        zf.writestr("tinyaxpy-0.3.0+cu130.dist-info/METADATA", "Metadata-Version: 2.1\nName: tinyaxpy\n")
    return path


def _leave(dist: Path, wheel: str, *suffixes: str) -> list[Path]:
    made = [dist / "cu130" / f"{wheel}{s}" for s in suffixes]
    for p in made:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("from an earlier run")
    return made


def test_a_rebuild_removes_every_record_and_page_of_the_old_wheels(tmp_path: Path) -> None:
    dist = tmp_path / "dist"
    stale = [
        *_leave(dist, NEW, "", ".build.json", ".audit.json", ".audit.html", ".smoke.json"),
        *_leave(dist, OLDER, "", ".build.json", ".audit.json", ".audit.html"),
    ]
    kept = [
        *_leave(dist, OTHER, "", ".build.json", ".audit.json", ".audit.html"),
        dist / "audit.html",  # the release-wide page is the release's, not a wheel's
    ]
    kept[-1].write_text("release page")
    built = _wheel(tmp_path / "work" / NEW, "new = True\n")
    data = record_data(
        ROW,
        wheel=built,
        backend="host",
        toolchain=None,
        python="3.12.9",
        policy_path=Path("rows.toml"),
        kernel_cache=None,
        policy_sha256="0" * 64,
    )
    moved = move_into_dist(built, dist / "cu130", data, ROW)
    assert moved.wheel.read_bytes() == built.read_bytes()
    assert records.read(moved.wheel, records.BuildRecord) == data
    now = {p for p in dist.rglob("*") if p.is_file()}
    assert now == {moved.wheel, moved.record, *kept}
    assert not any(p.exists() for p in stale if p not in (moved.wheel, moved.record))


@pytest.mark.parametrize("suffix", [".audit.html", ".audit.json", ".smoke.json"])
def test_companions_are_the_files_that_speak_of_the_wheel(tmp_path: Path, suffix: str) -> None:
    mine = _leave(tmp_path, NEW, suffix)
    others = _leave(tmp_path, OTHER, suffix) + _leave(tmp_path, NEW, ".txt", ".html")
    wheel = tmp_path / "cu130" / NEW
    assert records.companions(wheel) == mine
    assert not set(others) & set(records.companions(wheel))
