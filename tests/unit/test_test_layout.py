"""The layout of tests/: helpers live in one package (tests/helpers/), fixtures in conftest.py, and
no test edits sys.path (pyproject's ``[tool.pytest.ini_options] pythonpath`` puts the repository
root, scripts/ and tests/fixtures/ there). Each guard must fail on a synthetic violation."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# Built from parts, so that this file does not name what it forbids.
PATH_EDITS = ("sys.path." + "insert", "sys.path." + "append")

# Files that may still edit sys.path, each with its reason (paths relative to tests/).
PATH_EDIT_EXCEPTIONS = {
    # the fixture generator, run as a script (python tests/fixtures/make_fixtures.py), outside pytest
    # and its pythonpath: it imports its sibling generator modules by name
    "fixtures/make_fixtures.py": "run as a script; imports device_fixtures and fixture_shared",
    # device_fixtures.cuda124() runs under make_fixtures.py as a script too, and imports
    # scripts/fetch_cuda12_debian.py by name
    "fixtures/device_fixtures.py": "run under make_fixtures.py as a script; imports scripts/",
}

CONFTEST_IMPORT = re.compile(
    r"^\s*(?:from\s+(?P<from>[\w.]+)\s+import\b|import\s+(?P<names>[\w., ]+))", re.MULTILINE
)


def sys_path_edits(files: list[tuple[str, str]]) -> list[str]:
    """Files (path relative to tests/, text) that edit sys.path and are not a listed exception."""
    return sorted(
        path
        for path, text in files
        if path not in PATH_EDIT_EXCEPTIONS and any(edit in text for edit in PATH_EDITS)
    )


def top_level_modules(files: list[tuple[str, str]]) -> list[str]:
    """Python files directly under tests/ other than conftest.py (helpers belong in tests/helpers/)."""
    return sorted(
        path for path, _ in files if "/" not in path and path.endswith(".py") and path != "conftest.py"
    )


def conftest_imports(files: list[tuple[str, str]]) -> list[str]:
    """``path: module`` for every import of a module named ``conftest*`` (a fixture is requested by
    its name, never imported; pytest loads conftest.py itself)."""
    found = []
    for path, text in files:
        for match in CONFTEST_IMPORT.finditer(text):
            modules = [match["from"]] if match["from"] else match["names"].split(",")
            for module in modules:
                name = module.strip().split(" ")[0]
                if any(part.startswith("conftest") for part in name.split(".")):
                    found.append(f"{path}: {name}")
    return sorted(found)


def _tests_files(suffix: str = ".py") -> list[tuple[str, str]]:
    return [
        (p.relative_to(TESTS).as_posix(), p.read_text(encoding="utf-8", errors="replace"))
        for p in sorted(TESTS.rglob(f"*{suffix}"))
        if p.is_file() and "__pycache__" not in p.parts
    ]


def test_no_file_under_tests_edits_sys_path() -> None:
    assert sys_path_edits(_tests_files("")) == []


def test_every_exception_still_edits_sys_path() -> None:
    """An exception whose file no longer edits sys.path (or is gone) is removed from the list."""
    for path in PATH_EDIT_EXCEPTIONS:
        text = (TESTS / path).read_text(encoding="utf-8")
        assert any(edit in text for edit in PATH_EDITS), path


def test_only_conftest_is_a_module_at_the_top_of_tests() -> None:
    assert top_level_modules(_tests_files()) == []


def test_no_module_imports_a_conftest() -> None:
    assert conftest_imports(_tests_files()) == []


def test_the_guards_see_violations() -> None:
    insert, append = PATH_EDITS
    files = [
        ("integration/test_a.py", f"import sys\n{insert}(0, 'scripts')\n"),
        ("unit/test_b.py", f"import sys\n{append}('x')\n"),
        ("fixtures/make_fixtures.py", f"{insert}(0, 'here')\n"),
        ("helpers_policy.py", "X = 1\n"),
        ("real_wheels.py", "X = 1\n"),
        ("conftest.py", "import pytest\n"),
        ("helpers/policy.py", "X = 1\n"),
        ("integration/test_c.py", "from conftest_index import fixture_local_index_server\n"),
        ("integration/test_d.py", "import os, conftest\n"),
        ("unit/test_e.py", "    from helpers.conftest import x\n"),
        ("unit/test_f.py", "from helpers.index import PROJECT\nimport conftest_shared\n"),
    ]
    assert sys_path_edits(files) == ["integration/test_a.py", "unit/test_b.py"]
    assert top_level_modules(files) == ["helpers_policy.py", "real_wheels.py"]
    assert conftest_imports(files) == [
        "integration/test_c.py: conftest_index",
        "integration/test_d.py: conftest",
        "unit/test_e.py: helpers.conftest",
        "unit/test_f.py: conftest_shared",
    ]
