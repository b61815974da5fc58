"""Build environment, cibuildwheel options and build plans: pure functions over the seed policy.

The cibuildwheel options are read back through cibuildwheel itself (its options API and
`cibuildwheel --print-build-identifiers`, which needs no container engine), so a key
cibuildwheel does not understand, a CIBW_ENVIRONMENT it cannot parse or an identifier
it does not offer fails here, not in CI.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cibuildwheel.options import BuildOptions, CommandLineArguments, compute_options

from release.build.environment import (
    CUDA_ENV_VARS,
    BuildEnv,
    build_env_changes,
    build_environment,
    cibuildwheel_config,
    container_env_changes,
    env_prefix,
)
from release.build.plan import (
    BUILD_VENV_PINS,
    build_plan,
    unmet_build_requires,
)
from release.build.repair import CUDA_LIBRARY_EXCLUDES, repair_argv, repair_excludes
from release.build.toolchain import Toolchain
from release.policy.load import load_policy
from release.policy.matrix import CPU_IMAGE, Row, expand

ROOT = Path(__file__).resolve().parents[2]
ROWS: tuple[Row, ...] = expand(load_policy(ROOT / "rows.toml"))
BY_ID = {r.id: r for r in ROWS}
CUDA_ROWS = tuple(r for r in ROWS if r.is_cuda)
CPU_ROWS = tuple(r for r in ROWS if not r.is_cuda)
PROJECT = ROOT / "examples" / "tinyaxpy"

# The seed's arch lists, written out (not computed) so a policy or archs.py change shows here.
EXPECTED_ARCHS = {
    ("12.6", "x86_64"): ("7.5;8.0;8.6;8.9;9.0+PTX", "75-real;80-real;86-real;89-real;90-real;90-virtual"),
    ("12.6", "aarch64"): ("8.0;9.0+PTX", "80-real;90-real;90-virtual"),
    ("13.0", "x86_64"): (
        "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX",
        "75-real;80-real;86-real;89-real;90-real;100-real;120-real;120-virtual",
    ),
    ("13.0", "aarch64"): ("9.0;10.0;11.0+PTX", "90-real;100-real;110-real;110-virtual"),
    ("13.2", "x86_64"): (
        "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX",
        "75-real;80-real;86-real;89-real;90-real;100-real;120-real;120-virtual",
    ),
    ("13.2", "aarch64"): ("9.0;10.0;11.0+PTX", "90-real;100-real;110-real;110-virtual"),
}

HOSTILE_BASE = {
    "PATH": "/usr/local/bin:/usr/bin",
    "HOME": "/root",
    "CUDA_HOME": "/usr/local/cuda-13.0",
    "CUDA_PATH": "/usr/local/cuda",
    "CUDACXX": "/usr/local/cuda/bin/nvcc",
    "TORCH_CUDA_ARCH_LIST": "8.0",
    "CMAKE_CUDA_ARCHITECTURES": "native",
    "NVCC_APPEND_FLAGS": "-gencode=arch=compute_52,code=sm_52",
    "NVCC_PREPEND_FLAGS": "-arch=native",
    "TINYAXPY_VARIANT": "cu130",
    "TINYAXPY_EXTRA_NVCC_FLAGS": "-arch=sm_52",
    "WHEELWRIGHT_VARIANT": "cu126",
}


def toolchain_for(row: Row, home: str = "/opt/cuda") -> Toolchain:
    """A resolved toolchain as a value (what resolve_toolchain returns), for a row's train."""
    assert row.train is not None
    h = Path(home) / row.train
    return Toolchain(
        version=row.train,
        full_version=f"{row.train}.99",
        cuda_home=h,
        nvcc=h / "bin" / "nvcc",
        source="cuda_home",
        lib_dir=h / "lib64",
    )


# --------------------------------------------------------------------------- environment


def test_env_prefix() -> None:
    assert env_prefix("tinyaxpy") == "TINYAXPY"
    assert env_prefix("my-pkg.ext") == "MY_PKG_EXT"


@pytest.mark.parametrize("row", [r for r in CUDA_ROWS if r.python == "3.12"], ids=lambda r: r.id)
def test_cuda_row_environment(row: Row) -> None:
    tc = toolchain_for(row)
    env = build_environment(
        row, tc, kernel_cache=Path("/cache/kernels"), project_name="tinyaxpy", base=HOSTILE_BASE
    )
    arch_list, cmake = EXPECTED_ARCHS[(row.train or "", row.platform)]
    assert env["TORCH_CUDA_ARCH_LIST"] == arch_list
    assert env["CMAKE_CUDA_ARCHITECTURES"] == cmake
    assert env["TINYAXPY_VARIANT"] == env["WHEELWRIGHT_VARIANT"] == row.variant
    assert env["CUDA_HOME"] == str(tc.cuda_home)
    assert env["CUDACXX"] == str(tc.nvcc)
    assert env["PATH"] == f"{tc.bin_dir}:/usr/local/bin:/usr/bin"
    assert env["TINYAXPY_KERNEL_CACHE"] == env["WHEELWRIGHT_KERNEL_CACHE"] == "/cache/kernels"
    assert env["WHEELWRIGHT_ROW"] == row.id
    # the shell's CUDA choices are gone: only the row decides what is compiled
    for name in ("CUDA_PATH", "NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS", "TINYAXPY_EXTRA_NVCC_FLAGS"):
        assert name not in env
    assert env["HOME"] == "/root"


@pytest.mark.parametrize("row", CPU_ROWS, ids=lambda r: r.id)
def test_cpu_row_has_no_cuda_variable(row: Row) -> None:
    env = build_environment(
        row, None, kernel_cache=Path("/cache/kernels"), project_name="tinyaxpy", base=HOSTILE_BASE
    )
    assert env["TINYAXPY_VARIANT"] == env["WHEELWRIGHT_VARIANT"] == "cpu"
    for name in CUDA_ENV_VARS:
        assert name not in env, name
    assert "TINYAXPY_EXTRA_NVCC_FLAGS" not in env
    assert env["PATH"] == HOSTILE_BASE["PATH"]  # nothing of a toolkit is put first


def test_cpu_row_ignores_a_toolchain_passed_by_mistake() -> None:
    cpu = BY_ID["cpu-py312-x86_64"]
    tc = toolchain_for(BY_ID["cu130-py312-x86_64"])
    env = build_environment(cpu, tc, kernel_cache=None, base=HOSTILE_BASE)
    assert "CUDA_HOME" not in env and env["WHEELWRIGHT_VARIANT"] == "cpu"


def test_environment_without_base_holds_only_what_the_row_sets() -> None:
    row = BY_ID["cu130-py312-x86_64"]
    env = build_environment(row, toolchain_for(row), kernel_cache=None)
    assert set(env) == {
        "CMAKE_CUDA_ARCHITECTURES",
        "CUDACXX",
        "CUDA_HOME",
        "PATH",
        "TORCH_CUDA_ARCH_LIST",
        "WHEELWRIGHT_ROW",
        "WHEELWRIGHT_VARIANT",
    }


def test_cuda_row_needs_the_trains_toolchain() -> None:
    row = BY_ID["cu132-py312-x86_64"]
    with pytest.raises(ValueError, match=re.escape("needs CUDA 13.2, not the 13.0 toolchain")):
        build_environment(row, toolchain_for(BY_ID["cu130-py312-x86_64"]), kernel_cache=None)
    with pytest.raises(ValueError, match="needs a toolchain"):
        build_environment(row, None, kernel_cache=None)


def test_path_prepend_is_not_repeated() -> None:
    changes = BuildEnv(set={}, unset=(), unset_prefixes=(), path_prepend=("/t/bin",))
    assert changes.apply({"PATH": "/a:/t/bin:/b"})["PATH"] == "/t/bin:/a:/b"
    assert changes.apply({})["PATH"] == "/t/bin"


def test_container_environment_points_at_the_images_toolkit() -> None:
    changes = container_env_changes(BY_ID["cu126-py310-aarch64"], project_name="tinyaxpy")
    assert changes.set["CUDA_HOME"] == "/usr/local/cuda"
    assert changes.set["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"
    assert changes.path_prepend == ("/usr/local/cuda/bin",)
    cpu = container_env_changes(BY_ID["cpu-py310-aarch64"], project_name="tinyaxpy")
    assert "CUDA_HOME" not in cpu.set and not cpu.path_prepend


# --------------------------------------------------------------------------- repair


CUDA_SONAMES = (
    "libcuda.so.1",
    "libcudart.so.12",
    "libcudart.so.13",
    "libcublas.so.13",
    "libcublasLt.so.12",
    "libnvrtc.so.13",
    "libnvrtc-builtins.so.13.0",
    "libcudnn.so.9",
    "libcudnn_graph.so.9",
    "libnccl.so.2",
    "libnvJitLink.so.13",
    "libcusparseLt.so.0",
    "libcufft.so.12",
    "libcurand.so.10",
    "libcusolver.so.12",
    "libnvshmem_host.so.3",
    "libcupti.so.13",
    "libnvToolsExt.so.1",
    "libnvidia-ml.so.1",
    "libnppc.so.13",
)
NOT_CUDA = ("libc.so.6", "libstdc++.so.6", "libgomp.so.1", "libtinyaxpy_kernels.so", "libpython3.12.so.1.0")


def test_excludes_cover_every_cuda_library_and_nothing_else() -> None:
    for row in CUDA_ROWS:
        patterns = repair_excludes(row)
        for soname in (*CUDA_SONAMES, *(lib for p in row.cuda_packages for lib in p.libraries)):
            assert any(fnmatch.fnmatch(soname, p) for p in patterns), (row.id, soname)
        for soname in NOT_CUDA:
            assert not any(fnmatch.fnmatch(soname, p) for p in patterns), (row.id, soname)


def test_repair_argv_is_one_command_for_both_backends() -> None:
    row = BY_ID["cu130-py312-x86_64"]
    argv = repair_argv(row)
    assert argv[:5] == ("auditwheel", "repair", "--only-plat", "--plat", "manylinux_2_28_x86_64")
    assert argv[-3:] == ("-w", "{dest_dir}", "{wheel}")
    excludes = [argv[i + 1] for i, a in enumerate(argv) if a == "--exclude"]
    assert excludes == [*CUDA_LIBRARY_EXCLUDES, "libcudart.so.13"]
    config = cibuildwheel_config(row)
    assert shlex.split(config["CIBW_REPAIR_WHEEL_COMMAND_LINUX"]) == list(argv)


# --------------------------------------------------------------------------- cibuildwheel


def _cibw_options(config: dict[str, str], identifier: str) -> BuildOptions:
    args = dataclasses.replace(CommandLineArguments.defaults(), platform="linux", package_dir=PROJECT)
    return compute_options("linux", args, env=config).build_options(identifier)


@pytest.mark.parametrize("row", CUDA_ROWS, ids=lambda r: r.id)
def test_cibuildwheel_config_for_every_cuda_row(row: Row) -> None:
    config = cibuildwheel_config(row, project_name="tinyaxpy")
    assert config["CIBW_BUILD"] == row.cibw_identifier
    assert config["CIBW_ARCHS_LINUX"] == config["CIBW_ARCHS"] == row.platform
    assert config[f"CIBW_MANYLINUX_{row.platform.upper()}_IMAGE"] == row.builder_image
    assert config["CIBW_TEST_SKIP"] == "*"
    assert f"'release {row.train},'" in config["CIBW_BEFORE_ALL_LINUX"]

    # read back by cibuildwheel itself
    opts = _cibw_options(config, row.cibw_identifier)
    assert opts.manylinux_images is not None
    assert opts.manylinux_images[row.platform] == row.builder_image
    assert opts.build_selector(row.cibw_identifier)
    assert opts.test_selector.skip_config == "*"
    env = opts.environment.as_dictionary({"PATH": "/usr/bin"})
    arch_list, cmake = EXPECTED_ARCHS[(row.train or "", row.platform)]
    assert env == {
        "PATH": "/usr/local/cuda/bin:/usr/bin",
        "CUDA_HOME": "/usr/local/cuda",
        "CUDACXX": "/usr/local/cuda/bin/nvcc",
        "TORCH_CUDA_ARCH_LIST": arch_list,
        "CMAKE_CUDA_ARCHITECTURES": cmake,
        "TINYAXPY_VARIANT": row.variant,
        "WHEELWRIGHT_VARIANT": row.variant,
        "WHEELWRIGHT_ROW": row.id,
        "TINYAXPY_KERNEL_CACHE": "/tmp/wheelwright-kernels",
        "WHEELWRIGHT_KERNEL_CACHE": "/tmp/wheelwright-kernels",
    }
    repair = shlex.split(opts.repair_command)
    assert repair == list(repair_argv(row))
    for lib in ("libcudart.so.*", "libcuda.so.*", "libnvrtc.so.*", "libcublas.so.*"):
        assert lib in repair


@pytest.mark.parametrize("row", CPU_ROWS, ids=lambda r: r.id)
def test_cibuildwheel_config_cpu_row_keeps_the_default_image(row: Row) -> None:
    config = cibuildwheel_config(row, project_name="tinyaxpy")
    assert row.builder_image == CPU_IMAGE
    assert not any(k.startswith("CIBW_MANYLINUX_") for k in config)
    assert "CIBW_BEFORE_ALL_LINUX" not in config
    opts = _cibw_options(config, row.cibw_identifier)
    assert opts.manylinux_images is not None
    image = opts.manylinux_images[row.platform]
    assert f"{row.manylinux}_{row.platform}" in image  # cibuildwheel's pinned default fits the tag
    env = opts.environment.as_dictionary({"PATH": "/usr/bin"})
    assert env["TINYAXPY_VARIANT"] == "cpu"
    assert not set(env) & set(CUDA_ENV_VARS)


def _print_identifiers(config: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    env.update(config)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cibuildwheel",
            "--print-build-identifiers",
            "--platform",
            "linux",
            str(PROJECT),
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split()


def test_identifiers_match_cibuildwheels_own_listing() -> None:
    """A row's full config selects exactly its identifier in the real cibuildwheel CLI.

    One CLI run per distinct identifier (8 for the seed; rows of other trains differ
    only in image and environment, which cibuildwheel's own options reader checks above).
    """
    first: dict[str, Row] = {}
    for row in sorted(ROWS, key=lambda r: not r.is_cuda):
        first.setdefault(row.cibw_identifier, row)
    rows = list(first.values())
    assert {r.cibw_identifier for r in rows} == {r.cibw_identifier for r in ROWS}
    configs = [cibuildwheel_config(r, project_name="tinyaxpy") for r in rows]
    with ThreadPoolExecutor(max_workers=4) as pool:
        listed = list(pool.map(_print_identifiers, configs))
    for row, ids in zip(rows, listed, strict=True):
        assert ids == [row.cibw_identifier], row.id


# --------------------------------------------------------------------------- plans


def test_host_plan_builds_without_isolation_then_runs_the_shared_repair() -> None:
    row = BY_ID["cu130-py312-x86_64"]
    tc = toolchain_for(row)
    work = Path("/w")
    plan = build_plan(
        row,
        backend="host",
        toolchain=tc,
        project_dir=PROJECT,
        dist_dir=Path("/d"),
        work_dir=work,
        kernel_cache=Path("/k"),
        project_name="tinyaxpy",
        python="CPython 3.12.1",
        venv_python=Path("/v/bin/python"),
        auditwheel=("/x/python", "-m", "auditwheel"),
    )
    compile_cmd, repair_cmd = plan.commands
    assert compile_cmd.env == "build" and repair_cmd.env == "tools"
    assert compile_cmd.argv == (
        "/v/bin/python",
        "-m",
        "build",
        "--wheel",
        "--no-isolation",
        "--skip-dependency-check",
        "--outdir",
        "/w/built",
        "/w/src",
    )
    expected = [
        "/w/repaired" if a == "{dest_dir}" else "/w/built/{wheel}" if a == "{wheel}" else a
        for a in repair_argv(row, auditwheel=("/x/python", "-m", "auditwheel"))
    ]
    assert list(repair_cmd.argv) == expected
    assert plan.env == build_env_changes(row, tc, kernel_cache=Path("/k"), project_name="tinyaxpy")
    text = plan.render()
    assert "backend: host" in text and "TORCH_CUDA_ARCH_LIST='7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX'" in text
    assert "/d/cu130" in text
    json.dumps(plan.to_json())


def test_container_plan_is_cibuildwheel_with_the_rows_options() -> None:
    row = BY_ID["cu126-py311-x86_64"]
    plan = build_plan(
        row,
        backend="container",
        toolchain=None,
        project_dir=PROJECT,
        dist_dir=Path("/d"),
        work_dir=Path("/w"),
        kernel_cache=None,
        project_name="tinyaxpy",
        cibuildwheel=("cibuildwheel",),
        engine="podman",
    )
    (cmd,) = plan.commands
    assert cmd.argv == ("cibuildwheel", "--platform", "linux", "--output-dir", "/w/wheelhouse", str(PROJECT))
    assert plan.cibuildwheel["CIBW_CONTAINER_ENGINE"] == "podman"
    assert plan.cibuildwheel["CIBW_MANYLINUX_X86_64_IMAGE"] == "pytorch/manylinux2_28-builder:cuda12.6"
    assert "CUDA 12.6 from the image" in plan.toolchain
    assert "CIBW_BUILD=cp311-manylinux_x86_64" in plan.render()
    assert json.loads(json.dumps(plan.to_json()))["backend"] == "container"


def test_host_plan_needs_the_venv_python() -> None:
    with pytest.raises(ValueError, match="venv"):
        build_plan(
            BY_ID["cpu-py312-x86_64"],
            backend="host",
            toolchain=None,
            project_dir=PROJECT,
            dist_dir=Path("/d"),
            work_dir=Path("/w"),
            kernel_cache=None,
        )


# --------------------------------------------------------------------------- build venv


def test_build_venv_pins_are_exact() -> None:
    for pin in BUILD_VENV_PINS:
        name_version = pin.split(";")[0]
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", name_version.strip()), pin


def test_the_examples_build_requires_are_met_by_the_venv() -> None:
    requires = tomllib.loads((PROJECT / "pyproject.toml").read_text())["build-system"]["requires"]
    for version in ("3.10.13", "3.13.0"):
        assert unmet_build_requires(requires, pins=BUILD_VENV_PINS, python_version=version) == ()


@pytest.mark.parametrize(
    ("requires", "unmet"),
    [
        (["setuptools>=64", "wheel"], ()),
        (["setuptools<70"], ("setuptools<70",)),
        (["scikit-build-core>=0.10"], ("scikit-build-core>=0.10",)),
        (["Setuptools==84.2.1"], ()),
        (['cmake>=3.26; python_version < "3.0"'], ()),
        (["not a requirement !!"], ("not a requirement !!",)),
    ],
)
def test_unmet_build_requires(requires: list[str], unmet: tuple[str, ...]) -> None:
    assert unmet_build_requires(requires, pins=BUILD_VENV_PINS, python_version="3.12.1") == unmet


def test_tomli_is_pinned_only_where_needed() -> None:
    assert unmet_build_requires(["tomli>=2"], pins=BUILD_VENV_PINS, python_version="3.10.13") == ()
    assert unmet_build_requires(["tomli>=2"], pins=BUILD_VENV_PINS, python_version="3.12.1") == ("tomli>=2",)
