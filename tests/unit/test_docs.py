"""docs/rows-toml.md documents exactly the keys the validator accepts."""

from __future__ import annotations

import re
from pathlib import Path

from release.policy.model import SCHEMA

DOC = Path(__file__).resolve().parents[2] / "docs" / "rows-toml.md"


def _documented() -> dict[str, set[str]]:
    sections: dict[str, set[str]] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = set()
        elif current and (m := re.match(r"^\| `([a-z_]+)` \|", line)):
            sections[current].add(m[1])
    return sections


def test_every_schema_key_documented_and_nothing_else() -> None:
    documented = _documented()
    for table, (required, optional) in SCHEMA.items():
        assert table in documented, f"docs/rows-toml.md has no '## {table}' section"
        assert documented[table] == set(required) | set(optional), table
