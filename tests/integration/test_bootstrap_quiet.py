"""scripts/bootstrap.sh installs wheelwright without setuptools' editable-install notice (issue 33 item 6).

The notice ("Editable installation. Please be careful with folders in your working directory with the
same name as your package") is printed, through pip 26, for every flat-layout editable install; a
newcomer read it as the bootstrap going wrong. The bootstrap's own install line is run here as it is
written (with this checkout's .venv pip, into a throwaway prefix, no dependencies): quiet; the same
line without its warning filter prints the notice (the must-fail side: the filter is what hides it).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
NOTICE = "Editable installation"


def install_line() -> list[str]:
    (line,) = [
        x.strip()
        for x in (ROOT / "scripts" / "bootstrap.sh").read_text().splitlines()
        if " install -q -e " in x
    ]
    return shlex.split(line)


def run(words: list[str], prefix: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    assigned = [w for w in words if re.fullmatch(r"[A-Z_]+=.*", w)]
    env.update((name, value) for name, _, value in (w.partition("=") for w in assigned))
    argv = [w for w in words if w not in assigned]
    assert argv[:4] == [".venv/bin/python", "-m", "pip", "install"], argv
    argv = [*argv, "--no-deps", "--no-build-isolation", "--prefix", str(prefix)]
    argv = [a if a != ".[dev]" else "." for a in argv]
    proc = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout + proc.stderr


def test_the_bootstraps_install_prints_no_editable_notice(tmp_path: Path) -> None:
    words = install_line()
    assert NOTICE not in run(words, tmp_path / "quiet")
    unfiltered = [w for w in words if not w.startswith("PYTHONWARNINGS=")]
    assert NOTICE in run(unfiltered, tmp_path / "loud")  # the notice is real: the filter hides it
