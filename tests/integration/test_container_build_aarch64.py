"""The container backend for an aarch64 row on this x86_64 machine: cibuildwheel builds the
cu130-py313-aarch64 row of tinyaxpy inside the arm64 stand-in builder image
(``scripts/make_builder_image.py --arch aarch64``), every program in it (Python, pip, g++, nvcc,
auditwheel) running under qemu-user through binfmt_misc, as cibuildwheel builds aarch64 wheels on
x86_64 runners. The stand-in replaces the row's aarch64 builder image in a copy of rows.toml and
nothing else; the wheel is audited against the row of the real rows.toml and held to the host
backend's cross build of the same row: the same files, device code, declared packages, RUNPATHs
and NEEDED entries. A native aarch64 machine runs the same row without emulation.

Where no container engine works here, the module is skipped saying why (``.ci/run`` installs podman,
so CI runs it); where aarch64 programs cannot run (no qemu-aarch64 in binfmt_misc), it fails naming
the commands that enable it. Cost with the image present: measured in docs/building.md.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import make_builder_image as mbi
import pytest
from helpers.container import CACHE, ENV, POLICY, PROJECT, skip_without_engine
from helpers.elf import facts
from helpers.policy import link_examples
from helpers.rows import rows_by_id

from builder.recipe import standin_policy_text
from release.binary.elf import read_elf
from release.emulate import binfmt
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.resources.cpus import host_arch
from release.wheelbuild.environment import cibuildwheel_config
from release.wheelbuild.run import build_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,
    pytest.mark.skipif(host_arch() != "x86_64", reason="emulates aarch64 on x86_64 (native runs natively)"),
]

skip_without_engine("the aarch64 cross build still runs (tests/integration/test_build_aarch64.py)")
ROWS = rows_by_id(POLICY)
# Debian's arm64 archive has 3.13 only in trixie: the stand-in carries it unpacked with its own loader
# and C library beside bookworm's 3.11, so this row proves both the container build and that Python
# (test_idioms_container.py builds a 3.11 row in the same image)
ROW_ID = "cu130-py313-aarch64"
KERNELS = "tinyaxpy/lib/libtinyaxpy_kernels.so"
EM_AARCH64 = 183


@pytest.fixture(scope="module")
def image() -> mbi.Image:
    binfmt.require("aarch64")  # fails naming the commands that register qemu-aarch64
    return mbi.ensure_image("13.0", env=ENV, arch="aarch64")


def _standin_policy(folder: Path, image: mbi.Image) -> Path:
    real = ROWS[ROW_ID].builder_image
    path = folder / "rows.toml"
    path.write_text(standin_policy_text(POLICY.read_text(encoding="utf-8"), real, image.tag, "rows.toml"))
    link_examples(folder)
    return path


def _row(policy: Path, row_id: str = ROW_ID) -> Row:
    return next(r for r in expand(load_policy(policy)) if r.id == row_id)


def test_the_image_is_arm64_with_the_builder_layout(image: mbi.Image) -> None:
    probe = (
        "uname -m; /opt/python/cp311-cp311/bin/python -c 'import sys, build; print(sys.version.split()[0])'; "
        "/usr/local/cuda/bin/nvcc --version | tail -2; auditwheel --version; echo $AUDITWHEEL_PLAT; "
        # trixie's 3.13 beside bookworm's 3.11, on its own C library; the image's own stays bookworm's
        "/opt/python/cp313-cp313/bin/python -c 'import sys, ssl, sqlite3, build; print(sys.version.split()[0])'; "
        "ldd --version | head -1"
    )
    out = subprocess.run(
        [image.engine, "run", "--rm", "--platform", "linux/arm64", image.tag, "bash", "-c", probe],
        capture_output=True,
        text=True,
        env=ENV,
        check=True,
        timeout=600,
    ).stdout.splitlines()
    assert out[0] == "aarch64"
    assert out[1].startswith("3.11.")
    assert "release 13.0, V13.0.88" in out[2] + out[3]
    assert "auditwheel 6.8.2" in "\n".join(out[4:-3])
    assert out[-3] == "manylinux_2_28_aarch64"
    assert out[-2].startswith("3.13.")
    assert out[-1].endswith(" 2.36"), out[-1]  # bookworm's glibc: what every wheel of the image links


def test_cibuildwheel_builds_the_aarch64_row_under_emulation_as_the_cross_build_does(
    tmp_path: Path, image: mbi.Image
) -> None:
    policy = _standin_policy(tmp_path, image)
    row = _row(policy)
    config = cibuildwheel_config(row, project_name="tinyaxpy")
    assert config["CIBW_ARCHS"] == "aarch64" and config["CIBW_MANYLINUX_AARCH64_IMAGE"] == image.tag
    (built,) = build_row(
        row,
        policy_path=policy,
        dist_dir=tmp_path / "dist-container",
        backend="container",
        cache_dir=CACHE,
        project_dir=PROJECT,
        env=ENV,
    )
    wheel = built.wheel
    # compiled and repaired with bookworm's compiler and glibc like a 3.11 wheel: the same manylinux tag
    assert wheel.name == "tinyaxpy-0.3.0+cu130-cp313-cp313-manylinux_2_28_aarch64.whl"
    record = json.loads(built.record.read_text(encoding="utf-8"))
    assert record["backend"] == "container" and record["row"] == ROW_ID
    assert record["toolchain"]["image"] == image.tag

    # the audit, against the row of the real rows.toml, with aarch64 tools
    audit = subprocess.run(
        [sys.executable, "-m", "release", "audit", str(wheel), "--row", ROW_ID, "--policy", str(POLICY)],
        capture_output=True,
        text=True,
        check=False,
        env=ENV,
        timeout=900,
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "device code covers every claimed GPU architecture" in audit.stdout

    (cross,) = build_row(
        ROWS[ROW_ID],
        policy_path=POLICY,
        dist_dir=tmp_path / "dist-host",
        backend="host",
        kernel_cache=tmp_path / "kernels",
        cache_dir=CACHE,
        project_dir=PROJECT,
        env=ENV,
    )
    assert cross.wheel.name == wheel.name
    c, h = facts(wheel, tmp_path / "c"), facts(cross.wheel, tmp_path / "h")
    assert c.names == h.names
    assert c.requires == h.requires == ["nvidia-cuda-runtime==13.0.*"]
    # the seed's aarch64 CUDA 13 list, 9.0;10.0;11.0+PTX: nothing more, nothing less, in both
    assert c.device_code == h.device_code == {KERNELS: {"sm_90", "sm_100", "sm_110", "compute_110"}}
    assert c.runpath == h.runpath and c.needed == h.needed and c.rpath == h.rpath
    assert c.runpath[KERNELS] == ("$ORIGIN/../../nvidia/cu13/lib",)
    for name in c.needed:
        assert read_elf(tmp_path / "c" / name).machine == EM_AARCH64, name
