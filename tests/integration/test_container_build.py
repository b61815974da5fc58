"""The container backend, run for real: cibuildwheel builds a cu130 row of tinyaxpy inside the
stand-in builder image (scripts/make_builder_image.py) with the options CI generates.

Where no container engine works here the tests are skipped, saying why (detect_engine's
reasons); .ci/run installs podman and configures it through builder/containers.conf, so CI
runs them. The stand-in replaces the row's builder image in a copy of rows.toml and nothing
else: the cibuildwheel options are otherwise the ones CI generates from rows.toml, and the
test proves it. The wheel is then audited against the row of the real rows.toml and held
to the host build of the same row: the same device code, declared packages and RUNPATHs.

Cost when the image is present: about 15 s for the container build (cibuildwheel starts the
container, installs the build requirements from PyPI with --network=host, compiles, repairs),
7 s for the host build.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import make_builder_image as mbi
import pytest
from helpers.container import CACHE, ENV, POLICY, PROBE, PROJECT, skip_without_engine
from helpers.elf import facts
from helpers.policy import link_examples
from helpers.rows import rows_by_id

from builder.recipe import standin_policy_text
from release.core.errors import StepFailed
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.wheelbuild.environment import cibuildwheel_config
from release.wheelbuild.run import build_row, plan_row

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

skip_without_engine("the host-build tests still run (tests/integration/test_build.py)")
ROWS = rows_by_id(POLICY)
SASS = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}


@pytest.fixture(scope="module")
def image() -> mbi.Image:
    return mbi.ensure_image("13.0", env=ENV)


@pytest.fixture(scope="module")
def python(image: mbi.Image) -> str:
    """The row's Python: 3.12 where the image has it, else the newest it has."""
    have = [".".join(p.version.split(".")[:2]) for p in mbi.gather_inputs("13.0", POLICY, ENV).pythons]
    return "3.12" if "3.12" in have else have[-1]


def standin_policy(folder: Path, image: mbi.Image, train: str = "13.0") -> Path:
    """rows.toml with ``train``'s x86_64 builder image replaced by the stand-in, and nothing else."""
    real = next(r for r in ROWS.values() if r.train == train and r.platform == "x86_64").builder_image
    path = folder / "rows.toml"
    path.write_text(standin_policy_text(POLICY.read_text(encoding="utf-8"), real, image.tag, "rows.toml"))
    link_examples(folder)  # the copy's project.path, examples/tinyaxpy
    return path


def _row(policy: Path, row_id: str) -> Row:
    return next(r for r in expand(load_policy(policy)) if r.id == row_id)


def _tinyaxpy(policy: Path, dist: Path, backend: str = "container") -> dict[str, Any]:
    """build_row's and plan_row's options for tinyaxpy under ``policy`` into ``dist``."""
    return {
        "policy_path": policy,
        "dist_dir": dist,
        "cache_dir": CACHE,
        "project_dir": PROJECT,
        "backend": backend,
        "env": ENV,
    }


def test_the_standin_run_uses_the_options_ci_generates(tmp_path: Path, image: mbi.Image, python: str) -> None:
    row_id = f"cu130-py{python.replace('.', '')}-x86_64"
    real, standin = ROWS[row_id], _row(standin_policy(tmp_path, image), row_id)
    assert real.builder_image == "pytorch/manylinux2_28-builder:cuda13.0"
    ours, ci = (
        cibuildwheel_config(standin, project_name="tinyaxpy"),
        cibuildwheel_config(real, project_name="tinyaxpy"),
    )
    assert ours["CIBW_MANYLINUX_X86_64_IMAGE"] == image.tag
    assert ci["CIBW_MANYLINUX_X86_64_IMAGE"] == real.builder_image
    # the image's name is the only difference (it is also named in the before-all check's message)
    differ = {k for k in ci if ours.get(k) != ci[k]}
    assert differ == {"CIBW_MANYLINUX_X86_64_IMAGE", "CIBW_BEFORE_ALL_LINUX"}
    assert {k: v.replace(image.tag, real.builder_image) for k, v in ours.items()} == ci
    plan = plan_row(standin, **_tinyaxpy(tmp_path / "rows.toml", tmp_path / "dist"))
    assert plan.backend == "container" and plan.cibuildwheel["CIBW_CONTAINER_ENGINE"] == PROBE.engine
    assert plan.cibuildwheel["CIBW_MANYLINUX_X86_64_IMAGE"] == image.tag


def test_cibuildwheel_builds_cu130_in_the_standin_and_it_matches_the_host_build(
    tmp_path: Path, image: mbi.Image, python: str
) -> None:
    row_id = f"cu130-py{python.replace('.', '')}-x86_64"
    policy = standin_policy(tmp_path, image)
    (built,) = build_row(_row(policy, row_id), **_tinyaxpy(policy, tmp_path / "dist-container"))
    wheel = built.wheel
    assert (
        wheel.name
        == f"tinyaxpy-0.3.0+cu130-{ROWS[row_id].python_tag}-{ROWS[row_id].python_tag}-manylinux_2_28_x86_64.whl"
    )
    record = json.loads(built.record.read_text(encoding="utf-8"))
    assert record["backend"] == "container" and record["row"] == row_id
    assert record["toolchain"]["image"] == image.tag and record["toolchain"]["source"] == "image"

    # the audit, against the row of the real rows.toml (the stand-in changed only the image)
    audit = subprocess.run(
        [
            sys.executable,
            "-m",
            "release",
            "audit",
            str(wheel),
            "--row",
            row_id,
            "--policy",
            str(POLICY),
            "--no-record",
        ],
        capture_output=True,
        text=True,
        check=False,
        env=ENV,
        timeout=900,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "device code covers every claimed GPU architecture" in audit.stdout

    (host,) = build_row(
        ROWS[row_id], **_tinyaxpy(POLICY, tmp_path / "dist-host", "host"), kernel_cache=tmp_path / "kernels"
    )
    assert host.wheel.name == wheel.name
    c, h = facts(wheel, tmp_path / "c"), facts(host.wheel, tmp_path / "h")
    assert c.names == h.names
    assert c.requires == h.requires == ["nvidia-cuda-runtime==13.0.*"]
    kernels = "tinyaxpy/lib/libtinyaxpy_kernels.so"
    assert c.device_code == h.device_code == {kernels: SASS | {"compute_120"}}
    assert c.runpath == h.runpath and c.rpath == h.rpath and c.needed == h.needed
    assert c.runpath[kernels] == ("$ORIGIN/../../nvidia/cu13/lib",)


def test_a_row_whose_image_has_another_cuda_stops_before_compiling(
    tmp_path: Path, image: mbi.Image, python: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """The cu132 row pointed at the CUDA 13.0 stand-in: the before-all check refuses it."""
    row_id = f"cu132-py{python.replace('.', '')}-x86_64"
    policy = standin_policy(tmp_path, image, train="13.2")
    with pytest.raises(StepFailed, match=f"row {row_id}: the container build failed"):
        build_row(_row(policy, row_id), **_tinyaxpy(policy, tmp_path / "dist"))
    out = capfd.readouterr()
    assert f"wheelwright: {image.tag} has no CUDA 13.2 nvcc at /usr/local/cuda/bin/nvcc" in out.out + out.err
    assert "Building wheel..." not in out.out + out.err
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").rglob("*"))


def test_the_policys_build_constraints_reach_the_container_build(
    tmp_path: Path, image: mbi.Image, python: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """project.build_constraints reach cibuildwheel's isolated build environment, as they reach the
    host's: a pin that contradicts tinyaxpy's own ``setuptools==84.2.1`` must stop the container
    build at resolving its build requirements (the passing build above is the must-pass side)."""
    row_id = f"cu130-py{python.replace('.', '')}-x86_64"
    policy = standin_policy(tmp_path, image)
    (tmp_path / "pins.txt").write_text("setuptools==80.9.0\n", encoding="utf-8")
    text = policy.read_text(encoding="utf-8")
    policy.write_text(
        text.replace("[matrix]", 'build_constraints = ["pins.txt"]\n\n[matrix]', 1), encoding="utf-8"
    )
    plan = plan_row(_row(policy, row_id), **_tinyaxpy(policy, tmp_path / "dist"))
    assert " setuptools==80.9.0 " in plan.cibuildwheel["CIBW_BEFORE_BUILD_LINUX"]
    assert (
        "PIP_CONSTRAINT=/tmp/wheelwright-build-constraints.txt" in plan.cibuildwheel["CIBW_ENVIRONMENT_LINUX"]
    )
    with pytest.raises(StepFailed, match=f"row {row_id}: the container build failed"):
        build_row(_row(policy, row_id), **_tinyaxpy(policy, tmp_path / "dist"))
    out = capfd.readouterr()
    said = out.out + out.err
    assert "setuptools==84.2.1" in said and "setuptools==80.9.0" in said, said[-3000:]
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").rglob("*.whl"))
