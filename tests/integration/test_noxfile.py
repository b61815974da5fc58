"""The nox sessions are generated from the expansion: same rows, same names, nothing extra.
WHEELWRIGHT_POLICY chooses the policy; a --policy after `--` wins over it."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.policy import link_examples
from helpers.proc import python_m

from release.policy.load import load_policy
from release.policy.matrix import expand
from release.resources.cpus import host_arch

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FIXED = {"plan", "coverage", "matrix", "trains", "release", "tests", "tests-slow", "lint"}


ONE_PYTHON = """schema_version = 1
[project]
name = "tinyaxpy"
path = "examples/tinyaxpy"
import_name = "tinyaxpy"
check = "tinyaxpy:selftest"
[matrix]
platforms = ["{arch}"]
pythons = ["3.12"]
trains = ["13.0"]
cpu_wheel = "enable"
manylinux = "manylinux_2_28"
[train."13.0"]
variant = "cu130"
builder_image = {{ {arch} = "pytorch/manylinux2_28-builder:cuda13.0" }}
gpu_archs.{arch} = ["8.0", "9.0+PTX"]
[[train."13.0".cuda_packages]]
name = "nvidia-cuda-runtime"
libraries = ["libcudart.so.13"]
installs_to = "nvidia/cu13/lib"
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WHEELWRIGHT_POLICY"}
    return {**env, **extra}


def _one_python_policy(tmp_path: Path) -> Path:
    path = tmp_path / "one-python.toml"
    path.write_text(ONE_PYTHON.format(arch=host_arch()), encoding="utf-8")
    link_examples(tmp_path)
    return path


def _sessions(arch: str, **extra: str) -> list[dict[str, object]]:
    proc = python_m("nox", "--list", env=_env(WHEELWRIGHT_ARCH=arch, **extra), check=True, cwd=ROOT)
    # "* plan -> doc" (default) or "- build-cu130-py312 [build,cu130,py312] -> doc"
    out: list[dict[str, object]] = []
    for line in proc.stdout.splitlines():
        m = re.match(r"^[*-] (\S+)(?: \[[^]]*\])? -> (.*)$", line)
        if m:
            out.append({"session": m[1], "description": m[2]})
    return out


def test_sessions_equal_expansion() -> None:
    arch = host_arch()
    sessions = _sessions(arch)
    names = {str(s["session"]) for s in sessions}
    rows = [r for r in expand(load_policy(ROOT / "rows.toml")) if r.platform == arch]
    expected = {f"{step}-{r.session_suffix}" for r in rows for step in ("build", "audit", "smoke", "upload")}
    assert names == expected | FIXED
    assert "build-cu130-py312" in names
    for s in sessions:
        assert s["description"], f"{s['session']} has no docstring"


def test_other_arch_selectable() -> None:
    names = {str(s["session"]) for s in _sessions("aarch64")}
    assert "build-cu126-py310" in names


def test_release_needs_a_target() -> None:
    proc = python_m("release", "release", cwd=ROOT)
    assert proc.returncode == 2
    assert "name the target" in proc.stderr


def test_production_target_refuses_a_selection_before_building() -> None:
    proc = python_m(
        "release", "release", "--target", "production", "--allow-dirty", "cpu-py312-x86_64", cwd=ROOT
    )
    assert proc.returncode == 2
    assert "the whole release (32 rows), not a selection of 1" in proc.stderr
    assert "==> " not in proc.stderr  # nothing was started


def _nox_plan(*posargs: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return python_m("nox", "-s", "plan", "--", *posargs, env=_env(**extra), timeout=120, cwd=ROOT)


def _row_ids(plan_output: str) -> list[str]:
    return [line.split()[0] for line in plan_output.splitlines() if re.match(r"^(cpu|cu\d+)-py\d+-", line)]


def test_plan_posargs_policy_wins(tmp_path: Path) -> None:
    """`nox -s plan -- --policy X` plans X: 2 rows, not rows.toml's 32."""
    one = _one_python_policy(tmp_path)
    arch = host_arch()
    proc = _nox_plan("--policy", str(one))
    assert proc.returncode == 0, proc.stderr
    assert _row_ids(proc.stdout) == [f"cpu-py312-{arch}", f"cu130-py312-{arch}"]
    assert "2 rows: 1 CUDA, 1 CPU" in proc.stdout
    # ... also over WHEELWRIGHT_POLICY
    proc = _nox_plan("--policy", str(one), WHEELWRIGHT_POLICY=str(ROOT / "rows.toml"))
    assert proc.returncode == 0, proc.stderr
    assert _row_ids(proc.stdout) == [f"cpu-py312-{arch}", f"cu130-py312-{arch}"]
    # without posargs the session plans WHEELWRIGHT_POLICY (rows.toml: 32 rows)
    proc = _nox_plan()
    assert proc.returncode == 0, proc.stderr
    assert len(_row_ids(proc.stdout)) == len(expand(load_policy(ROOT / "rows.toml")))


def test_wheelwright_policy_chooses_the_sessions_and_the_plan(tmp_path: Path) -> None:
    one = _one_python_policy(tmp_path)
    names = {str(s["session"]) for s in _sessions(host_arch(), WHEELWRIGHT_POLICY=str(one))}
    steps = ("build", "audit", "smoke", "upload")
    assert names == {f"{step}-{v}-py312" for step in steps for v in ("cpu", "cu130")} | FIXED
    proc = _nox_plan(WHEELWRIGHT_POLICY=str(one))
    assert proc.returncode == 0, proc.stderr
    assert len(_row_ids(proc.stdout)) == 2


def test_a_bad_wheelwright_policy_stops_nox_with_exit_2(tmp_path: Path) -> None:
    bad = ROOT / "tests" / "policies" / "bad" / "badpin.toml"
    proc = python_m("nox", "--list", env=_env(WHEELWRIGHT_POLICY=str(bad)), timeout=120, cwd=ROOT)
    assert proc.returncode == 2
    assert f'error: {bad}: train."13.2".pypi_toolchain[0]: pins nvidia-cuda-nvcc==13.0.88' in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_py3_none_row_has_a_session_for_every_python_it_serves(tmp_path: Path) -> None:
    """One wheel serves 3.11 and 3.12: `build-cu130-py312` names the same row as `build-cu130-py311`,
    and the tags still count each row once (`nox -t build` builds it once)."""
    policy = tmp_path / "py3-none.toml"
    link_examples(tmp_path)
    text = ONE_PYTHON.format(arch=host_arch()).replace('pythons = ["3.12"]', 'pythons = ["3.11", "3.12"]')
    policy.write_text(
        text.replace(
            'check = "tinyaxpy:selftest"\n', 'check = "tinyaxpy:selftest"\nwheel_tags = "py3-none"\n'
        )
    )
    env = _env(WHEELWRIGHT_ARCH=host_arch(), WHEELWRIGHT_POLICY=str(policy))
    sessions = {
        str(s["session"]): str(s["description"])
        for s in _sessions(host_arch(), WHEELWRIGHT_POLICY=str(policy))
    }
    steps = ("build", "audit", "smoke", "upload")
    built = {f"{step}-{v}-py311" for step in steps for v in ("cpu", "cu130")}
    aliases = {f"{step}-{v}-py312" for step in steps for v in ("cpu", "cu130")}
    assert set(sessions) == built | aliases | FIXED
    assert sessions["build-cu130-py312"] == "The same as build-cu130-py311: its wheel serves Python 3.12 too."
    tagged = python_m("nox", "--list", "-t", "build", env=env, check=True, cwd=ROOT).stdout
    chosen = sorted(m[1] for m in re.finditer(r"^\* (\S+)", tagged, re.MULTILINE))
    assert chosen == ["build-cpu-py311", "build-cu130-py311"]


def test_an_upload_session_publishes_to_the_rehearsal_target_unless_told_another(tmp_path: Path) -> None:
    """``publish`` needs --target or --rehearsal (as ``release`` does); an upload session publishes one
    row, which only a rehearsal target takes, so it names --rehearsal unless its arguments name a target."""
    # rows.toml: it has a rehearsal and a production target
    session = "upload-cpu-py312"
    env = _env()
    plain = python_m(
        "nox", "-s", session, "--", "--dist", str(tmp_path / "dist"), env=env, timeout=120, cwd=ROOT
    )
    said = plain.stdout + plain.stderr
    assert plain.returncode == 1, said  # nox says 1 for any failure; the command said 2
    assert f" cpu-py312-{host_arch()} --rehearsal --dist" in said
    assert f"no wheel for cpu-py312-{host_arch()}" in said
    told = python_m(
        "nox", "-s", session, "--", "--target", "production", "--dist", str(tmp_path / "dist"),
        env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    said = told.stdout + told.stderr
    assert told.returncode == 1 and f" cpu-py312-{host_arch()} --target production --dist" in said
    assert "the whole release (32 rows), not a selection of 1" in said, said
