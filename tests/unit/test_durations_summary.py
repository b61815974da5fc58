"""The per-module time summary tests/conftest.py prints after a run (tests/helpers/durations.py)."""

from __future__ import annotations

from helpers.durations import ModuleTime, add, summary_lines


def test_phases_add_up_per_module_and_only_calls_count_as_tests() -> None:
    totals: dict[str, ModuleTime] = {}
    add(totals, "tests/integration/test_a.py::test_one[x]", "setup", 24.5)
    add(totals, "tests/integration/test_a.py::test_one[x]", "call", 3.0)
    add(totals, "tests/integration/test_a.py::test_one[x]", "teardown", 0.5)
    add(totals, "tests/integration/test_a.py::test_two", "call", 2.0)
    add(totals, "tests/unit/test_b.py::test_three", "setup", 1.0)  # failed in setup: no call phase
    assert totals == {
        "tests/integration/test_a.py": ModuleTime(30.0, 2),
        "tests/unit/test_b.py": ModuleTime(1.0, 0),
    }


def test_the_summary_ranks_modules_then_gives_each_folders_share() -> None:
    totals = {
        "tests/unit/test_b.py": ModuleTime(10.0, 40),
        "tests/integration/test_a.py": ModuleTime(60.0, 3),
        "tests/integration/test_c.py": ModuleTime(30.0, 5),
    }
    assert summary_lines(totals, top=2) == [
        "    60.0 s     3 tests  tests/integration/test_a.py",
        "    30.0 s     5 tests  tests/integration/test_c.py",
        "tests/integration: 90.0 s in 8 tests (90 %)",
        "tests/unit: 10.0 s in 40 tests (10 %)",
    ]


def test_an_empty_run_has_no_modules_and_no_division_by_zero() -> None:
    assert summary_lines({}, top=10) == []
    assert summary_lines({"tests/unit/test_b.py": ModuleTime(0.0, 1)}, top=10)[-1] == (
        "tests/unit: 0.0 s in 1 tests (0 %)"
    )
