"""A stranger's wheel is never judged as one of the project's rows (issue 33, item 1).

``python -m release audit <downloads>/some.whl`` from the repository root (rows.toml here, project
tinyaxpy) gives the same verdict as from an empty folder (the survey's: standalone, the checks that
need no claim) and writes nothing beside the wheel; before, a ``cp312`` wheel of another project was
judged as tinyaxpy's ``cpu-py312-x86_64`` (and its record written into the download folder) and a
``py3`` one got exit 2 ("no row of rows.toml is variant cpu"). The project's own wheel outside the
policy's ``dist/`` is still judged as its row, and gets its record only with ``--record``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from helpers.real_wheels import survey_wheel

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]


def make_wheel(folder: Path, name: str, tags: str) -> Path:
    """A pure-Python wheel of ``name`` 1.0 tagged ``tags`` (``py3-none-any``), its RECORD right."""
    info = f"{name}-1.0.dist-info"
    files = {
        f"{name}/__init__.py": b"",
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tags}\n".encode(),
    }
    digest = {
        n: base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b"=").decode()
        for n, d in files.items()
    }
    record = "".join(f"{n},sha256={digest[n]},{len(d)}\n" for n, d in files.items()) + f"{info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-{tags}.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for member, data in {**files, f"{info}/RECORD": record.encode()}.items():
            zf.writestr(member, data)
    return path


def audit(wheel: Path, *args: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
    """``python -m release audit WHEEL ARGS --json`` in ``cwd``: exit code, the JSON document, stderr."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHEELWRIGHT_POLICY", None)
    proc = subprocess.run(
        [sys.executable, "-m", "release", "audit", str(wheel), *args, "--json"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
        env=env,
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def verdict(doc: dict[str, Any]) -> tuple[list[str], list[str], list[str]]:
    """What a verdict is: the errors, the failed checks and the checks that ran (per result)."""
    errors = [e["error"] for e in doc["errors"]]
    failed = [c for r in doc["results"] for c in sorted(r["failed_checks"])]
    ran = [f"{r['row']}:{r['variant']}:{sorted(r['checks_run'])}" for r in doc["results"]]
    return errors, failed, ran


def same_as_from_an_empty_folder(wheel: Path, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    before = sorted(p.name for p in wheel.parent.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    code, doc, err = audit(wheel, *args, cwd=ROOT)
    code_empty, doc_empty, _ = audit(wheel, *args, cwd=empty)
    assert (code, verdict(doc)) == (code_empty, verdict(doc_empty)), err
    assert code in (0, 1), err
    assert [r["standalone"] for r in doc["results"]] == [True]
    assert sorted(p.name for p in wheel.parent.iterdir()) == before  # nothing written beside it
    assert sorted(p.name for p in empty.iterdir()) == []
    return code, doc, err


@pytest.mark.parametrize("tags", ["py3-none-any", "cp312-cp312-manylinux_2_28_x86_64"])
def test_a_strangers_small_wheel_from_the_repo_root_is_audited_standalone(tags: str, tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "downloads", "strangerpkg", tags)
    code, doc, err = same_as_from_an_empty_folder(wheel, tmp_path)
    assert code == 0, doc
    assert "is not tinyaxpy's" in err and "audited standalone" in err, err
    assert "cpu-py312-x86_64" not in json.dumps(doc)


def test_a_strangers_wheel_with_a_claim_is_not_held_to_this_folders_policy(tmp_path: Path) -> None:
    """--variant cu130 under tinyaxpy's rows.toml held another project's wheel to tinyaxpy's cu130
    packages (standalone false); the claim alone, as from an empty folder, is what it is held to."""
    wheel = make_wheel(tmp_path / "downloads", "strangerpkg", "cp312-cp312-manylinux_2_28_x86_64")
    code, _doc, _err = same_as_from_an_empty_folder(
        wheel, tmp_path, "--variant", "cu130", "--gpu-archs", "8.0"
    )
    assert code == 1  # a CUDA claim on a wheel without device code


def test_the_projects_own_wheel_outside_dist_gets_its_row_but_no_record_unless_asked(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path / "downloads", "tinyaxpy", "cp312-cp312-manylinux_2_28_x86_64")
    _code, doc, err = audit(wheel, cwd=ROOT)
    assert [r["row"] for r in doc["results"]] == ["cpu-py312-x86_64"], err
    assert sorted(p.name for p in wheel.parent.iterdir()) == [wheel.name]
    audit(wheel, "--record", cwd=ROOT)
    assert sorted(p.name for p in wheel.parent.iterdir()) == sorted(
        [wheel.name, f"{wheel.name}.audit.json", f"{wheel.name}.audit.html"]
    )


@pytest.mark.slow
@pytest.mark.network
@pytest.mark.parametrize("key", ["jax_cuda13_plugin", "cupy_cuda13x"])
def test_a_real_strangers_wheel_from_the_repo_root_gets_the_surveys_verdict(key: str, tmp_path: Path) -> None:
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    wheel = downloads / survey_wheel(key).name
    wheel.symlink_to(survey_wheel(key))
    same_as_from_an_empty_folder(wheel, tmp_path)
