"""Issue 31's idiom (b), ``find_package(CUDAToolkit)`` + ``CUDA::cudart``
(tests/fixtures/idioms/cudart_target), built for cu130-py311-aarch64 through the container backend as
a user runs it: ``python -m release build --backend container`` from an empty folder, with the policy
in a third folder whose ``project.path`` climbs to the project. cibuildwheel runs in the arm64
stand-in builder image (``scripts/make_builder_image.py --arch aarch64``), every program in it under
qemu-user. Before the container backend ran cibuildwheel in the project's folder, this stopped with
cibuildwheel's ``package_dir must be inside the working directory``.

The wheel is held to the host backend's cross build of the same row under the fixture's own policy:
the same members, the same NEEDED and RUNPATH per library (release/binary/elf.py), the same device
code (release/binary/fatbin.py: the seed's aarch64 list 9.0;10.0;11.0+PTX in both), and both pass the
audit against the fixture's real rows.toml. Cost with the image present: docs/building.md.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import make_builder_image as mbi
import pytest
from helpers.container import CACHE, ENV, skip_without_engine
from helpers.elf import Facts, facts
from helpers.proc import ROOT, python_m
from helpers.rows import rows_by_id

from builder.recipe import standin_policy_text
from release.binary.elf import read_elf
from release.emulate import binfmt
from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import host_arch
from release.wheelbuild.run import build_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.network,  # the build requirements inside the container, the aarch64 CUDA runtime wheel
    pytest.mark.skipif(host_arch() != "x86_64", reason="emulates aarch64 on x86_64 (native runs natively)"),
]

skip_without_engine("the host cross build of the idioms still runs (tests/integration/test_idioms.py)")
PROJECT = ROOT / "tests" / "fixtures" / "idioms" / "cudart_target"
POLICY = PROJECT / "rows.toml"
ROW_ID = "cu130-py311-aarch64"  # Debian bookworm's arm64 Python is 3.11: the stand-in's first Python
WHEEL = "idiom_cudart-0.1.0+cu130-cp311-cp311-manylinux_2_28_aarch64.whl"
KERNELS = "idiom_cudart/libidiom_cudart_kernels.so"  # the CMake target linking CUDA::cudart
DEVICE_CODE = {"sm_90", "sm_100", "sm_110", "compute_110"}  # 9.0;10.0;11.0+PTX
# a CPython extension module's suffix: .cpython-311-aarch64-linux-gnu.so, or plain .so
EXT_SUFFIX = re.compile(r"\.cpython-\d+-[a-z0-9_]+-linux-gnu\.so$")


def _policy_elsewhere(folder: Path, image: str) -> Path:
    """The fixture's rows.toml in ``folder``: the row's aarch64 builder image replaced by the stand-in
    and ``project.path`` climbing from ``folder`` to the project; nothing else changed."""
    real = rows_by_id(POLICY)[ROW_ID].builder_image
    text = standin_policy_text(POLICY.read_text(encoding="utf-8"), real, image, str(POLICY))
    assert text.count('path = "."') == 1
    folder.mkdir(parents=True)
    path = folder / "rows.toml"
    path.write_text(text.replace('path = "."', f'path = "{os.path.relpath(PROJECT, folder)}"'))
    return path


def _audit(wheel: Path) -> None:
    done = python_m(
        "release", "audit", str(wheel), "--row", ROW_ID, "--policy", str(POLICY), env=ENV, timeout=900
    )
    assert done.returncode == 0, f"{wheel}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
    assert "device code covers every claimed GPU architecture" in done.stdout


@dataclass(frozen=True)
class Pair:
    container: Path  # the container backend's wheel, built with the policy elsewhere
    host: Path  # the host backend's cross build of the same row, under the fixture's own policy
    c: Facts
    h: Facts
    unpacked: Path  # the container wheel's members


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    """Both builds of the row, once for the module: the container one as a user runs it, from a
    folder that is neither the policy's nor the project's."""
    binfmt.require("aarch64")  # fails naming the commands that register qemu-aarch64
    image = mbi.ensure_image("13.0", env=ENV, arch="aarch64")
    tmp = tmp_path_factory.mktemp("idiom-container")
    policy = _policy_elsewhere(tmp / "policies" / "idiom", image.tag)
    cwd = tmp / "somewhere"
    cwd.mkdir()
    dist = tmp / "dist-container"
    done = python_m(
        "release",
        "build",
        ROW_ID,
        "--policy",
        str(policy),
        "--backend",
        "container",
        "--dist",
        str(dist),
        env={**ENV, "PYTHONPATH": str(ROOT)},
        cwd=cwd,
        timeout=1800,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    (wheel,) = (dist / "cu130").glob("*.whl")  # dist/<variant>/
    (cross,) = build_row(
        rows_by_id(POLICY)[ROW_ID],
        policy_path=POLICY,
        dist_dir=tmp / "dist-host",
        cache_dir=CACHE,
        backend="host",
        env=ENV,
    )
    return Pair(wheel, cross.wheel, facts(wheel, tmp / "c"), facts(cross.wheel, tmp / "h"), tmp / "c")


def _by_library(per_member: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """Keyed by member name with an extension module's suffix made plain ``.so`` (the one difference
    :func:`test_the_two_builds_name_the_extension_module_alike` holds to)."""
    return {EXT_SUFFIX.sub(".so", name): value for name, value in per_member.items()}


def test_the_cudart_idiom_builds_in_the_container_with_its_policy_elsewhere_as_the_cross_build_does(
    pair: Pair,
) -> None:
    """The same wheel name, Requires-Dist, NEEDED, RUNPATH and RPATH per library, and device code."""
    assert pair.container.name == pair.host.name == WHEEL
    c, h = pair.c, pair.h
    assert sorted(EXT_SUFFIX.sub(".so", n) for n in c.names) == sorted(
        EXT_SUFFIX.sub(".so", n) for n in h.names
    )
    assert c.requires == h.requires == ["nvidia-cuda-runtime==13.0.*"]
    assert _by_library(c.needed) == _by_library(h.needed)
    assert _by_library(c.runpath) == _by_library(h.runpath)
    assert _by_library(c.rpath) == _by_library(h.rpath)
    # the seed's aarch64 CUDA 13 list, 9.0;10.0;11.0+PTX: nothing more, nothing less, in both
    assert c.device_code == h.device_code == {KERNELS: DEVICE_CODE}
    assert "libcudart.so.13" in c.needed[KERNELS]
    assert c.runpath[KERNELS] == ("$ORIGIN/../nvidia/cu13/lib",)
    target = cpu_arch("aarch64")
    assert target is not None
    for name in c.needed:
        assert read_elf(pair.unpacked / name).machine == target.elf_machine, name


def test_both_wheels_pass_the_audit_against_the_fixtures_policy(pair: Pair) -> None:
    _audit(pair.container)
    _audit(pair.host)


def test_the_two_builds_name_the_extension_module_alike(pair: Pair) -> None:
    """The FindPython ``WITH_SOABI`` module carries the target's SOABI in both: CMake's cross mode
    leaves SOABI empty, and the toolchain file fills in the row's (cmake_toolchain.py); before it the
    host cross build named it plain ``_core.so``."""
    assert pair.c.names == pair.h.names
    assert any(EXT_SUFFIX.search(name) for name in pair.h.names), sorted(pair.h.names)
