"""``python -m release trains --check`` against the real index pip is configured for (hence ``network``).

Must pass: the command exits 0, names the policy's newest train and either the newer CUDA releases
the index offers (each with the nvcc pin a train would take) or that the policy is current; rows.toml
is byte for byte what it was. Must fail (exit 3, the fix named): the same command with pip pointed at
an index that does not answer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]


def _trains(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "release", "trains", "--check"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_trains_check_against_the_real_index() -> None:
    before = (ROOT / "rows.toml").read_bytes()
    proc = _trains(dict(os.environ))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "rows.toml: CUDA trains 12.6, 13.0, 13.2 (newest 13.2)"
    if lines[1].startswith("✓ current"):
        assert "no CUDA release newer than 13.2" in lines[1]
    else:
        found = re.match(
            r"notice: pip's index offers \d+ newer CUDA release\(s\) than 13.2: ([\d., ]+) ", lines[1]
        )
        assert found, lines[1]
        for label in found[1].split(", "):
            assert f"  CUDA {label}: adds " in proc.stdout
            assert f'"nvidia-cuda-nvcc=={label}.' in proc.stdout
        assert lines[-1] == "rows.toml was not changed; adding a train: docs/adding-a-train.md"
    assert (ROOT / "rows.toml").read_bytes() == before


def test_trains_check_without_an_index_is_exit_3() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_INDEX_URL="http://127.0.0.1:9/simple", PIP_RETRIES="0")
    proc = _trains(env)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "pip found no nvidia-cuda-nvcc on the index it is configured for" in proc.stderr
