"""A row's audit claim is built from the fields a Row and an Expectation share by name: each
name must exist on both and carry the row's value (a renamed field fails here, not in a release)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from release.audit.model import ROW_FIELDS, Expectation
from release.policy.load import load_policy
from release.policy.matrix import Row, expand

ROOT = Path(__file__).resolve().parents[2]


def test_every_shared_field_exists_on_both_and_is_copied() -> None:
    expectation_fields = {f.name for f in dataclasses.fields(Expectation)}
    for name in ROW_FIELDS:
        assert name in expectation_fields, name
        assert hasattr(Row, name) or name in {f.name for f in dataclasses.fields(Row)}, name
    for row in expand(load_policy(ROOT / "rows.toml")):
        exp = Expectation.from_row(row, max_wheel_mib=100)
        assert {n: getattr(exp, n) for n in ROW_FIELDS} == {n: getattr(row, n) for n in ROW_FIELDS}
        assert (exp.row_id, exp.max_wheel_mib, exp.driver) == (row.id, 100, None)
