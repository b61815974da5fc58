"""The fast auditwheel analysis gives auditwheel's own answer.

release.audit.abi runs ``analyze_wheel_abi`` on the tree the audit extracted, with
each symbol table read once and big ones read early. These tests compare it with
``auditwheel show --json`` (auditwheel unzipping the wheel itself) on real wheels.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Literal

import pytest

from release.audit.abi import AbiRunner
from release.audit.inspect import inspect_libraries
from release.audit.model import AbiReport
from release.audit.wheel import open_wheel
from release.core import proc

pytestmark = pytest.mark.integration

WHEELS = Path(__file__).resolve().parents[1] / "fixtures" / "wheels"
CASES = ["fx_good_cu130", "fx_glibc_too_new", "fx_grafted", "fx_good_cpu", "fx_union"]


def wheel_of(case_id: str) -> Path:
    manifest = json.loads((WHEELS / "manifest.json").read_text())
    name: str = next(c["wheel"] for c in manifest["cases"] if c["id"] == case_id)
    return WHEELS / name


def analyse(
    path: Path,
    *,
    plain: bool = False,
    min_dynsym: int = 256 << 10,
    policies: Literal["claimed", "all"] = "all",
) -> AbiReport:
    with tempfile.TemporaryDirectory() as scratch:
        runner = AbiRunner(Path(scratch), wheel=path, policies=policies, min_dynsym=min_dynsym)
        with runner, open_wheel(path, on_extracted=runner.on_extracted) as w:
            files = [lib.path for lib in inspect_libraries(w) if lib.elf is not None]
            return runner.analyze(w, files, exclude=(), plain=plain).result()


def show(path: Path) -> dict[str, object]:
    result = proc.run([sys.executable, "-m", "auditwheel", "show", "--json", path])
    data: dict[str, object] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize("case_id", CASES)
def test_same_answer_as_auditwheel_show(case_id: str) -> None:
    path = wheel_of(case_id)
    ours = analyse(path)
    theirs = show(path)
    assert ours.mode == "extracted-tree"
    assert ours.overall_tag == theirs["overall_tag"]
    assert ours.sym_tag == theirs["sym_tag"]
    assert ours.external_libs == theirs["external_libs"]


@pytest.mark.parametrize("case_id", ["fx_good_cu130", "fx_glibc_too_new"])
def test_seeded_and_plain_runs_agree(case_id: str) -> None:
    path = wheel_of(case_id)
    fast = analyse(path, min_dynsym=0)  # every library pre-read in a child, results reused
    plain = analyse(path, plain=True)  # auditwheel unzips the wheel itself
    assert plain.mode == "wheel"
    assert (fast.overall_tag, fast.sym_tag, fast.tags, fast.files) == (
        plain.overall_tag,
        plain.sym_tag,
        plain.tags,
        plain.files,
    )


def test_too_new_glibc_is_explained() -> None:
    report = analyse(wheel_of("fx_glibc_too_new"))
    tag = report.tags["manylinux_2_28_x86_64"]
    assert tag["honest"] is False and "symbol versions" in tag["limited_by"]
    (entry,) = report.files.values()
    assert "GLIBC_2.34" in entry["beyond_claimed"]


@pytest.mark.parametrize("case_id", CASES)
def test_grading_from_the_claimed_tag_gives_the_same_verdict(case_id: str) -> None:
    """The audit grades only the claimed tag and newer ones: the verdict is the full one's."""
    path = wheel_of(case_id)
    full = analyse(path)
    claimed = analyse(path, policies="claimed", min_dynsym=0)
    assert {t: v["honest"] for t, v in claimed.tags.items()} == {t: v["honest"] for t, v in full.tags.items()}
    if not all(v["honest"] for v in full.tags.values()):
        assert claimed.overall_tag == full.overall_tag, "a dishonest tag's best tag is newer: still exact"
