"""The committed fixture wheels still come from the generator, and still fail as they should.

Rebuilds every fixture with the host CUDA toolkit into a temporary folder and audits
each case again: a change to the generator that stops a fixture from failing its
check shows up here, not only after someone regenerates the committed wheels.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_audit_fixtures import FIXTURES, audit_case, verdicts

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CUDA_HOME = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))


@pytest.mark.skipif(not (CUDA_HOME / "bin" / "nvcc").is_file(), reason=f"no nvcc under {CUDA_HOME}")
def test_rebuilt_fixtures_fail_as_committed(tmp_path: Path) -> None:
    out = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            str(FIXTURES / "make_fixtures.py"),
            "--out",
            str(out),
            "--cuda-home",
            str(CUDA_HOME),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    rebuilt = json.loads((out / "manifest.json").read_text())
    committed = json.loads((FIXTURES / "wheels" / "manifest.json").read_text())
    assert rebuilt == committed, "the committed manifest is stale: run tests/fixtures/make_fixtures.py"
    problems = {}
    for case in rebuilt["cases"]:
        code, doc = audit_case(case, wheels=out)
        if wrong := verdicts(case, code, doc):
            problems[case["id"]] = wrong
    assert not problems
