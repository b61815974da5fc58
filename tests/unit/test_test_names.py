"""pytest imports test modules by basename (no packages under tests/): two test files of one name
stop the whole collection, and mypy refuses them as duplicate modules. Must fail on such a pair."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def duplicate_names(root: Path) -> list[str]:
    counts = Counter(p.name for p in root.rglob("test_*.py"))
    return sorted(name for name, n in counts.items() if n > 1)


def test_every_test_module_name_is_unique() -> None:
    assert duplicate_names(TESTS) == []


def test_the_guard_sees_a_duplicate(tmp_path: Path) -> None:
    for folder in ("unit", "integration"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_same.py").write_text("", encoding="utf-8")
    assert duplicate_names(tmp_path) == ["test_same.py"]
