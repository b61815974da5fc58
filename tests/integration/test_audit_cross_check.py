"""--cross-check: cuobjdump lists the same device code as the fatbin reader."""

from __future__ import annotations

import pytest
from test_audit_fixtures import CASES, FIXTURES, WHEELS, run_cli

pytestmark = [pytest.mark.integration, pytest.mark.network]


@pytest.mark.parametrize("case_id", ["fx_good_cu130", "fx_union", "fx_tu_ptx_only"])
def test_cross_check_agrees(case_id: str) -> None:
    case = next(c for c in CASES if c["id"] == case_id)
    _code, out, err = run_cli(
        [
            str(WHEELS / case["wheel"]),
            "--policy",
            str(FIXTURES / "policy.toml"),
            "--no-record",
            "--cross-check",
        ]
    )
    assert "cuobjdump cross-check" in out, err
    section = out.split("cuobjdump cross-check", 1)[1]
    assert "✓" in section and "✗" not in section.split("GPU support")[0]
