"""Issue 11's done-when, as a user meets it: a CUDA package written without wheelwright in mind
(examples/lazysaxpy: scikit-build-core + CMake, no arch list, label, CUDA dependency or RUNPATH
of its own, kernels loaded lazily through ctypes, a ``py3-none`` wheel) goes through ``build``,
``audit`` and ``smoke`` for cu130-py312 with the repository's own rows.toml, only its
``[project]`` table changed. Nothing else of the policy is touched: its four Pythons, its three
trains and both platforms stay as they are.

A py3-none wheel serves every Python, so the policy expands to one cu130 row built once (with
the oldest Python, as cibuildwheel does) and smoke-tested on each of the four; ``cu130-py312``
selects it. Real steps throughout: the host build with scikit-build-core from the index, the
audit, a fresh venv and pip install per Python. No GPU in CI: the smoke record says the
computation was skipped, and the CUDA runtime is still proven by loading the kernels library.

Cost on 2 shared cores: one build (about 10 s), four smoke venvs (about 10 s each, the CUDA
runtime wheel from pip's cache after the first).
"""

from __future__ import annotations

import email.parser
import json
import re
import shutil
import subprocess
import tomllib
import zipfile
from pathlib import Path

import pytest
from helpers.proc import python_m, repo_env

from release.binary.elf import read_elf

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
LAZY = ROOT / "examples" / "lazysaxpy"
PROJECT = """[project]
name = "lazysaxpy"
path = "lazysaxpy"
import_name = "lazysaxpy"
check = "lazysaxpy:check"
wheel_tags = "py3-none"
"""


def only_project_changed(folder: Path) -> Path:
    """The repository's rows.toml with its [project] table, and nothing else, replaced, beside a
    copy of the package (as a user keeps their policy beside their package)."""
    shutil.copytree(LAZY, folder / "lazysaxpy", ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"))
    text = (ROOT / "rows.toml").read_text(encoding="utf-8")
    start = text.index("[project]")
    end = text.index("\n[matrix]")
    policy = folder / "rows.toml"
    policy.write_text(text[:start] + PROJECT + text[end:], encoding="utf-8")
    before, after = tomllib.loads(text), tomllib.loads(policy.read_text(encoding="utf-8"))
    assert {k: v for k, v in before.items() if k != "project"} == {
        k: v for k, v in after.items() if k != "project"
    }
    return policy


def step(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return python_m("release", *args, cwd=cwd, env=repo_env(), timeout=1800)


def test_a_py3_none_package_builds_audits_and_smokes_with_only_its_project_table(tmp_path: Path) -> None:
    policy = only_project_changed(tmp_path)
    plan = step(tmp_path, "plan", "--policy", str(policy), "--json", "cu130-py312-x86_64")
    assert plan.returncode == 0, plan.stderr
    rows = json.loads(plan.stdout)["rows"]
    assert [(r["id"], r["smoke_pythons"]) for r in rows] == [
        ("cu130-py310-x86_64", ["3.10", "3.11", "3.12", "3.13"])
    ]

    build = step(tmp_path, "build", "--policy", str(policy), "--backend", "host", "cu130-py312-x86_64")
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = (tmp_path / "dist").rglob("*.whl")
    assert re.fullmatch(r"lazysaxpy-[^-]+\+cu130-py3-none-manylinux_2_28_x86_64\.whl", wheel.name), wheel.name
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        requires = email.parser.Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []
        kernels = Path(zf.extract("lazysaxpy/liblazysaxpy_kernels.so", tmp_path / "x"))
    assert any(r.replace(" ", "").startswith("nvidia-cuda-runtime==13.0") for r in requires), requires
    runpath = read_elf(kernels).runpath
    assert any(p.endswith("nvidia/cu13/lib") for p in runpath), runpath

    audit = step(tmp_path, "audit", "--policy", str(policy), "cu130-py312-x86_64")
    assert audit.returncode == 0, audit.stdout + audit.stderr

    smoke = step(tmp_path, "smoke", "--policy", str(policy), "cu130-py312-x86_64")
    assert smoke.returncode == 0, smoke.stdout + smoke.stderr
    for version in ("3.10", "3.11", "3.12", "3.13"):
        assert f"✓ Python {version}: the smoke run passed" in smoke.stdout, smoke.stdout
    record = json.loads(wheel.with_name(wheel.name + ".smoke.json").read_text(encoding="utf-8"))
    assert record["passed"] is True and record["row"] == "cu130-py310-x86_64"
    ran = record["evidence"]["probe"]["pythons"]
    assert sorted(ran) == ["3.10", "3.11", "3.12", "3.13"]
    assert {v: p["python"] for v, p in ran.items()} == {v: v for v in ran}  # each ran where it says


def test_a_smoke_run_failing_on_one_python_fails_the_row(tmp_path: Path) -> None:
    """The must-fail side: one wheel, four Pythons, and the package's import breaks on one of
    them only; the row fails, naming that Python, and the other three still say they passed."""
    policy = only_project_changed(tmp_path)
    init = tmp_path / "lazysaxpy" / "src" / "lazysaxpy" / "__init__.py"
    future = "from __future__ import annotations\n"
    broken = (
        future + "import sys\nif sys.version_info[:2] == (3, 11):\n    raise ImportError('no 3.11 here')\n"
    )
    text = init.read_text(encoding="utf-8")
    assert future in text
    init.write_text(text.replace(future, broken, 1), encoding="utf-8")
    build = step(tmp_path, "build", "--policy", str(policy), "--backend", "host", "cpu-py312-x86_64")
    assert build.returncode == 0, build.stdout + build.stderr
    assert step(tmp_path, "audit", "--policy", str(policy), "cpu-py312-x86_64").returncode == 0
    smoke = step(tmp_path, "smoke", "--policy", str(policy), "cpu-py312-x86_64")
    assert smoke.returncode == 1, smoke.stdout + smoke.stderr
    assert "✗ Python 3.11: the smoke run FAILED" in smoke.stdout
    assert "no 3.11 here" in smoke.stdout
    for version in ("3.10", "3.12", "3.13"):
        assert f"✓ Python {version}: the smoke run passed" in smoke.stdout
