"""One check registry (release/audit/registry.py): each check module declares its name, title and function
(``SPEC``), the registry lists them once, and the runner, the reports and the ``--checks`` parser read it.
The guard fails when a second table of check names appears in release/ (with a must-fail case: the three
tables there were before)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

from release.audit import registry
from release.audit.claim import NO_CLAIM_CHECKS, parse_checks
from release.audit.model import Check

ROOT = Path(__file__).resolve().parents[2]
NAMES = {*registry.CHECKS, *registry.OPTIONAL_CHECKS}


def test_each_check_module_declares_itself() -> None:
    for check in (*registry.REGISTERED, *registry.OPTIONAL):
        module = importlib.import_module(check.function.__module__)
        assert module.SPEC is check and check.name == module.CHECK, module.__name__
        assert isinstance(check, Check) and check.title and callable(check.function)
    assert len(NAMES) == len(registry.REGISTERED) + len(registry.OPTIONAL), "names are unique"
    # every module of release/audit/checks/ that holds a check function is registered
    for path in sorted((ROOT / "release" / "audit" / "checks").glob("*.py")):
        module = importlib.import_module(f"release.audit.checks.{path.stem}")
        if hasattr(module, "SPEC"):
            assert module.SPEC in (*registry.REGISTERED, *registry.OPTIONAL), path.name


def test_the_readers_read_the_registry() -> None:
    assert registry.CHECKS == (
        "libraries", "device_code", "gpus", "packages", "loader", "hygiene", "cpp_consumer",
    )  # fmt: skip
    assert registry.OPTIONAL_CHECKS == ("cross_check",)
    assert NO_CLAIM_CHECKS == ("packages", "loader", "hygiene", "cpp_consumer")
    assert registry.title("loader") == "loader (RPATH/RUNPATH)" and registry.title("other") == "other"
    assert parse_checks("gpus,cross_check") == ("gpus", "cross_check")


def check_tables(source: str, names: set[str] = NAMES) -> list[str]:
    """Literal tuples, lists, sets and dicts (by key) naming two or more checks."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        hits = [e.value for e in items if isinstance(e, ast.Constant) and e.value in names]
        if len(hits) >= 2:
            found.append(f"line {node.lineno}: {hits}")
    return found


def test_no_second_check_table_in_release() -> None:
    offenders = {}
    for path in sorted((ROOT / "release").rglob("*.py")):
        found = check_tables(path.read_text(encoding="utf-8"))
        if found:
            offenders[path.relative_to(ROOT).as_posix()] = found
    assert offenders == {}, f"list checks in release/audit/registry.py only (each module's SPEC): {offenders}"


def test_the_guard_catches_the_old_tables() -> None:
    old_model = (
        'CHECKS = ("libraries", "device_code", "gpus", "packages", "loader", "hygiene", "cpp_consumer")'
    )
    old_run = 'CHECK_FUNCTIONS = {"libraries": libraries.check, "device_code": device_code.check}'
    old_report = 'TITLES = {"libraries": "libraries", "cross_check": "cuobjdump cross-check"}'
    old_claim = 'NO_CLAIM_CHECKS = ("packages", "loader", "hygiene", "cpp_consumer")'
    for source in (old_model, old_run, old_report, old_claim):
        assert check_tables(source), source
    assert not check_tables('ELF = ("libraries", "headers")')
