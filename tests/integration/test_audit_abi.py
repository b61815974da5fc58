"""The platform-tag analysis gives auditwheel's own answer, without auditwheel's internals.

release.audit.abi.analysis grades the ELF files the audit extracted with auditwheel's policies and
wheelwright's ELF reader. These tests run ``auditwheel show --json`` as a tool on the same
real wheels and compare: tags, symbol versions, external libraries, what each claimed tag
would have to graft. The glibc-too-new wheel must still fail; the good one must pass.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any, Literal

import pytest

from release.audit.abi.analysis import analyze_abi
from release.audit.model import AbiReport
from release.audit.reading.archive import open_wheel
from release.audit.reading.inspector import inspect_libraries
from release.core import proc

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / "tests" / "fixtures" / "wheels"
CASES = ["fx_good_cu130", "fx_glibc_too_new", "fx_grafted", "fx_good_cpu", "fx_union"]


def wheel_of(case_id: str) -> Path:
    manifest = json.loads((WHEELS / "manifest.json").read_text())
    name: str = next(c["wheel"] for c in manifest["cases"] if c["id"] == case_id)
    return WHEELS / name


def analyse(
    path: Path, *, graded: Literal["claimed", "all"] = "all", exclude: tuple[str, ...] = ()
) -> AbiReport:
    with open_wheel(path) as w:
        return analyze_abi(w.root, w.filename, w.platform_tags, inspect_libraries(w), exclude, graded=graded)


def show(path: Path) -> dict[str, Any]:
    result = proc.run([sys.executable, "-m", "auditwheel", "show", "--json", path])
    data: dict[str, Any] = json.loads(result.stdout)
    return data


@pytest.mark.parametrize("case_id", CASES)
def test_same_answer_as_auditwheel_show(case_id: str) -> None:
    path = wheel_of(case_id)
    ours = analyse(path)
    theirs = show(path)
    assert ours.mode == "elf-reader" and ours.error is None
    assert ours.overall_tag == theirs["overall_tag"]
    assert ours.sym_tag == theirs["sym_tag"]
    assert ours.external_libs == theirs["external_libs"]
    assert {k: list(v) for k, v in ours.versioned_symbols.items()} == theirs["versioned_symbols"]
    for tag, info in ours.tags.items():
        upgrade = theirs["policy_upgrades"].get(info["policy"], {})
        assert info["libs_to_eliminate"] == upgrade.get("libs_to_eliminate", []), tag
        assert info["blacklisted_symbols"] == upgrade.get("blacklisted_symbols", {}), tag


def test_too_new_glibc_is_explained() -> None:
    report = analyse(wheel_of("fx_glibc_too_new"))
    tag = report.tags["manylinux_2_28_x86_64"]
    assert tag["honest"] is False and "symbol versions" in tag["limited_by"]
    (entry,) = report.files.values()
    assert "GLIBC_2.34" in entry["beyond_claimed"]


def test_good_wheel_is_honest_once_cuda_is_excluded() -> None:
    """The must-pass side: the runtime comes from its package, so the tag is honest."""
    report = analyse(wheel_of("fx_good_cu130"), graded="claimed", exclude=("libcudart.so*",))
    assert report.tags["manylinux_2_28_x86_64"]["honest"] is True
    assert report.external_libs == {}


@pytest.mark.parametrize("case_id", CASES)
def test_grading_from_the_claimed_tag_gives_the_same_verdict(case_id: str) -> None:
    """The audit grades only the claimed tag and newer ones: the verdict is the full one's."""
    path = wheel_of(case_id)
    full = analyse(path)
    claimed = analyse(path, graded="claimed")
    assert {t: v["honest"] for t, v in claimed.tags.items()} == {t: v["honest"] for t, v in full.tags.items()}
    if not all(v["honest"] for v in full.tags.values()):
        assert claimed.overall_tag == full.overall_tag, "a dishonest tag's best tag is newer: still exact"


def test_a_wheel_without_elf_files_is_pure(tmp_path: Path) -> None:
    import zipfile

    path = tmp_path / "pkg-1.0-py3-none-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pkg/__init__.py", "")
    report = analyse(path)
    assert report.pure is True and report.overall_tag is None


# --------------------------------------------------------------------------- no internals


def _auditwheel_uses(source: Path) -> list[str]:
    """Every ``auditwheel`` name imported, and every attribute assigned on an imported module."""
    tree = ast.parse(source.read_text(encoding="utf-8"))
    modules = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("auditwheel"):
            out += [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Import):
            out += [alias.name for alias in node.names if alias.name.startswith("auditwheel")]
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id in modules
                ):
                    out.append(f"assigns {target.value.id}.{target.attr}")
    return out


def test_release_uses_no_private_internals_and_patches_nothing() -> None:
    """Only public auditwheel names (no underscore; a module's ``__all__`` where it has one), no
    ``_policies``, no attribute of another package's module assigned anywhere in release/."""
    import importlib

    used: dict[str, list[str]] = {}
    for source in sorted((ROOT / "release").rglob("*.py")):
        names = _auditwheel_uses(source)
        text = source.read_text(encoding="utf-8")
        assert "_policies" not in text, f"{source}: names auditwheel's private _policies"
        assert "pip._internal" not in text and "bottle_wrapper" not in text, source
        assert not [n for n in names if n.startswith("assigns ")], (source, names)
        if names:
            used[str(source.relative_to(ROOT))] = names
    assert used, "the analysis reads auditwheel's policies: some module must import them"
    for where, names in used.items():
        for name in names:
            module, _, attr = name.rpartition(".")
            assert not any(part.startswith("_") for part in name.split(".")), (where, name)
            mod = importlib.import_module(module)
            public = getattr(mod, "__all__", None)
            assert public is None or attr in public, f"{where}: {name} is not in {module}.__all__"


def test_the_scan_sees_a_monkeypatch(tmp_path: Path) -> None:
    """Must fail: the scan finds what release/audit/abi/analysis.py did before (a patched module attribute)."""
    old = tmp_path / "old.py"
    old.write_text(
        "import auditwheel.wheel_abi as wa\n"
        "from auditwheel.policy import _POLICY_JSON_MAP\n"
        "wa.InGenericPkgCtx = lambda _wheel: None\n",
        encoding="utf-8",
    )
    uses = _auditwheel_uses(old)
    assert "assigns wa.InGenericPkgCtx" in uses
    assert "auditwheel.policy._POLICY_JSON_MAP" in uses
