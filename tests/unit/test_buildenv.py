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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from cibuildwheel.options import BuildOptions, CommandLineArguments, compute_options
from helpers.proc import python_m

from release.core.errors import InputError
from release.core.machine import PythonInfo
from release.policy.archs import nvcc_gencode_flags
from release.policy.load import load_policy
from release.policy.matrix import CPU_IMAGE, Row, expand
from release.resources import cuda
from release.resources.cuda import is_cuda_library
from release.wheelbuild.backends import Backend
from release.wheelbuild.environment import (
    CPU_CMAKE_ARGS,
    CUDA_ENV_VARS,
    BuildEnv,
    PathFacts,
    apply_hidden,
    arch_routes,
    build_env_changes,
    build_environment,
    cibuildwheel_config,
    container_env_changes,
    env_prefix,
    hide_cuda,
)
from release.wheelbuild.host.isolated import (
    DEFAULT_REQUIRES,
    Constraints,
    base_constraints,
    env_key,
    env_spec,
    merge_constraints,
    parse_build_system,
    parse_constraints,
    read_build_system,
    read_constraints,
    unpinned,
    unresolvable_message,
)
from release.wheelbuild.plan import BuildPlan, build_plan
from release.wheelbuild.repair.auditwheel import repair_argv, repair_excludes
from release.wheelbuild.toolchain import Toolchain

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
    assert env["CMAKE_CUDA_ARCHITECTURES"] == env["CUDAARCHS"] == cmake
    assert env["CMAKE_ARGS"] == f"-DCMAKE_CUDA_ARCHITECTURES={cmake} -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared"
    assert shlex.split(env["CMAKE_ARGS"])[0] == f"-DCMAKE_CUDA_ARCHITECTURES={cmake}"  # one shell word
    assert env["CUFLAGS"].split() == list(nvcc_gencode_flags(row.gpu_archs))
    assert env["NVCC_APPEND_FLAGS"] == "-objtemp"
    assert env["TINYAXPY_VARIANT"] == env["WHEELWRIGHT_VARIANT"] == row.variant
    assert env["CUDA_HOME"] == str(tc.cuda_home)
    assert env["CUDACXX"] == str(tc.nvcc)
    assert env["PATH"] == f"{tc.bin_dir}:/usr/local/bin:/usr/bin"
    assert env["TINYAXPY_KERNEL_CACHE"] == env["WHEELWRIGHT_KERNEL_CACHE"] == "/cache/kernels"
    assert env["WHEELWRIGHT_ROW"] == row.id
    # the shell's CUDA choices are gone: only the row decides what is compiled
    for name in (
        "CUDA_PATH",
        "NVCC_PREPEND_FLAGS",
        "TINYAXPY_EXTRA_NVCC_FLAGS",
        "SKBUILD_CMAKE_ARGS",
        "CUDAFLAGS",
    ):
        assert name not in env
    assert env["HOME"] == "/root"


@pytest.mark.parametrize("row", CPU_ROWS, ids=lambda r: r.id)
def test_cpu_row_has_no_cuda_variable(row: Row) -> None:
    env = build_environment(
        row, None, kernel_cache=Path("/cache/kernels"), project_name="tinyaxpy", base=HOSTILE_BASE
    )
    assert env["TINYAXPY_VARIANT"] == env["WHEELWRIGHT_VARIANT"] == "cpu"
    for name in CUDA_ENV_VARS:
        if name != "CMAKE_ARGS":
            assert name not in env, name
    # CMake finds no toolkit either, even at a fixed path like /usr/local/cuda
    assert env["CMAKE_ARGS"] == CPU_CMAKE_ARGS
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
        "CMAKE_ARGS",
        "CMAKE_CUDA_ARCHITECTURES",
        "CUDAARCHS",
        "CUFLAGS",
        "NVCC_APPEND_FLAGS",
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
    # the two former lists disagreed on these (issue 10): one table now answers for both
    "libnvvm.so.4",
    "libnvfatbin.so.13",
    "libnvjpeg.so.13",
    "libnvcuvid.so.1",
    "libnvidia-encode.so.1",
)
NOT_CUDA = ("libc.so.6", "libstdc++.so.6", "libgomp.so.1", "libtinyaxpy_kernels.so", "libpython3.12.so.1.0")


def test_excludes_cover_every_cuda_library_and_nothing_else() -> None:
    for row in CUDA_ROWS:
        patterns = repair_excludes(row)
        for soname in (*CUDA_SONAMES, *(lib for p in row.cuda_packages for lib in p.libraries)):
            assert any(fnmatch.fnmatch(soname, p) for p in patterns), (row.id, soname)
        for soname in NOT_CUDA:
            assert not any(fnmatch.fnmatch(soname, p) for p in patterns), (row.id, soname)


def test_repair_excludes_what_the_audit_calls_cuda() -> None:
    """The repair grafts nothing the audit would call a CUDA library, and excludes nothing else."""
    row = BY_ID["cu130-py312-x86_64"]
    patterns = repair_excludes(row)
    for soname in (*CUDA_SONAMES, *NOT_CUDA):
        excluded = any(fnmatch.fnmatch(soname, p) for p in patterns)
        assert excluded is is_cuda_library(soname), soname


def test_repair_argv_is_one_command_for_both_backends() -> None:
    row = BY_ID["cu130-py312-x86_64"]
    argv = repair_argv(row)
    assert argv[:5] == ("auditwheel", "repair", "--only-plat", "--plat", "manylinux_2_28_x86_64")
    assert argv[-3:] == ("-w", "{dest_dir}", "{wheel}")
    excludes = [argv[i + 1] for i, a in enumerate(argv) if a == "--exclude"]
    assert excludes == [*cuda.repair_excludes(), "libcudart.so.13"]
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
        "CUDAARCHS": cmake,
        "CMAKE_ARGS": f"-DCMAKE_CUDA_ARCHITECTURES={cmake} -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared",
        "CUFLAGS": " ".join(nvcc_gencode_flags(row.gpu_archs)),
        "NVCC_APPEND_FLAGS": "-objtemp",
        "TINYAXPY_VARIANT": row.variant,
        "WHEELWRIGHT_VARIANT": row.variant,
        "WHEELWRIGHT_ROW": row.id,
        "TINYAXPY_KERNEL_CACHE": "/tmp/wheelwright-kernels",
        "WHEELWRIGHT_KERNEL_CACHE": "/tmp/wheelwright-kernels",
    }
    repair = shlex.split(opts.repair_command)
    assert repair == list(repair_argv(row))
    for lib in ("libcudart.so*", "libcuda.so*", "libnvrtc.so*", "libcublas.so*"):
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
    assert not set(env) & (set(CUDA_ENV_VARS) - {"CMAKE_ARGS"})
    assert env["CMAKE_ARGS"] == CPU_CMAKE_ARGS


def _print_identifiers(config: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CIBW_")}
    env.update(config)
    result = python_m(
        "cibuildwheel", "--print-build-identifiers", "--platform", "linux", str(PROJECT), env=env, timeout=120
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


def plan_of(row: Row, backend: Backend, **kwargs: Any) -> BuildPlan:
    """build_plan of this repo's project into /d, working in /w, with no toolchain or kernel
    cache unless ``kwargs`` give them."""
    defaults: dict[str, Any] = {
        "toolchain": None,
        "dist_dir": Path("/d"),
        "work_dir": Path("/w"),
        "kernel_cache": None,
    }
    return build_plan(row, backend=backend, project_dir=PROJECT, **(defaults | kwargs))


def test_host_plan_builds_in_the_isolated_environment_then_runs_the_shared_repair() -> None:
    row = BY_ID["cu130-py312-x86_64"]
    tc = toolchain_for(row)
    plan = plan_of(
        row,
        "host",
        toolchain=tc,
        kernel_cache=Path("/k"),
        project_name="tinyaxpy",
        python="CPython 3.12.1",
        build_python=Path("/e/bin/python"),
        frontend=Path("/r/frontend.py"),
        src_dir=Path("/c/src/tinyaxpy-cu130/src"),
        auditwheel=("/x/python", "-m", "auditwheel"),
        contract=("version label +cu130",),
    )
    compile_cmd, repair_cmd = plan.commands
    assert compile_cmd.env == "build" and repair_cmd.env == "tools"
    assert compile_cmd.argv == (
        "/e/bin/python",
        "/r/frontend.py",
        "--outdir",
        "/w/built",
        "/c/src/tinyaxpy-cu130/src",
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
    # the dry run says how the arch list reaches each build system, and what the contract does
    assert "  arch list reaches:" in text and "CUDAARCHS=75-real;" in text and "CUFLAGS" in text
    assert "not SKBUILD_CMAKE_ARGS" in text
    assert "then the row's contract" in text and "version label +cu130" in text
    data = json.loads(json.dumps(plan.to_json()))
    assert data["archs"] == list(arch_routes(row)) and data["contract"] == ["version label +cu130"]


def test_a_host_plan_hands_the_backend_its_config_settings() -> None:
    """A cross build's meson cross file reaches meson-python as ``-C setup-args=...``, before the source."""
    row = BY_ID["cpu-py312-aarch64"]
    plan = plan_of(
        row,
        "host",
        build_python=Path("/e/bin/python"),
        frontend=Path("/r/frontend.py"),
        src_dir=Path("/c/src/p-cpu/src"),
        config_settings={"setup-args": "--cross-file=/k/cross.ini"},
    )
    assert plan.commands[0].argv == (
        "/e/bin/python",
        "/r/frontend.py",
        "--outdir",
        "/w/built",
        "-Csetup-args=--cross-file=/k/cross.ini",
        "/c/src/p-cpu/src",
    )


def test_container_plan_is_cibuildwheel_with_the_rows_options() -> None:
    row = BY_ID["cu126-py311-x86_64"]
    plan = plan_of(row, "container", project_name="tinyaxpy", cibuildwheel=("cibuildwheel",), engine="podman")
    (cmd,) = plan.commands
    assert cmd.argv == ("cibuildwheel", "--platform", "linux", "--output-dir", "/w/wheelhouse", ".")
    assert cmd.cwd == str(PROJECT)  # cibuildwheel runs in the project: /project in the container
    assert plan.cibuildwheel["CIBW_CONTAINER_ENGINE"] == "podman"
    assert plan.cibuildwheel["CIBW_MANYLINUX_X86_64_IMAGE"] == "pytorch/manylinux2_28-builder:cuda12.6"
    assert "CUDA 12.6 from the image" in plan.toolchain
    assert "CIBW_BUILD=cp311-manylinux_x86_64" in plan.render()
    assert json.loads(json.dumps(plan.to_json()))["backend"] == "container"


def test_container_plan_runs_cibuildwheel_in_the_project_wherever_it_lies(tmp_path: Path) -> None:
    """cibuildwheel refuses a package outside its working directory (``package_dir must be inside the
    working directory``) and copies that directory into the container: the plan runs it in the project's
    folder with ``.`` as the package, and every path it hands over is absolute."""
    row = BY_ID["cu130-py312-x86_64"]
    elsewhere = tmp_path / "elsewhere" / "tinyaxpy"
    plan = build_plan(
        row,
        backend="container",
        toolchain=None,
        project_dir=elsewhere,
        dist_dir=Path("dist"),
        work_dir=Path("relative-work"),
        kernel_cache=None,
    )
    (cmd,) = plan.commands
    assert cmd.cwd == str(elsewhere) and cmd.argv[-1] == "."
    out = Path(cmd.argv[cmd.argv.index("--output-dir") + 1])
    assert out.is_absolute() and out == (Path("relative-work") / "wheelhouse").absolute()
    assert f"cd {elsewhere} && cibuildwheel --platform linux" in plan.render()
    assert plan.to_json()["commands"][0]["cwd"] == str(elsewhere)


def test_host_plan_needs_the_build_environment() -> None:
    with pytest.raises(ValueError, match="build environment"):
        plan_of(BY_ID["cpu-py312-x86_64"], "host")


# --------------------------------------------------------------------------- CPU rows see no CUDA


def test_hide_cuda_drops_toolkit_bins_mirrors_wrappers_and_cuts_include_paths() -> None:
    env = {
        "PATH": "/usr/local/cuda-13.0/bin:/usr/local/bin:/usr/bin:",
        "CPATH": "/usr/local/cuda/include:/opt/mine/include",
        "LD_LIBRARY_PATH": "/usr/local/cuda/lib64",
        "LIBRARY_PATH": "/opt/mine/lib",
    }
    facts = {
        "/usr/local/cuda-13.0/bin": PathFacts(("nvcc", "ptxas"), True, False, False),
        "/usr/local/bin": PathFacts(("nvcc",), False, False, False),  # a wrapper script beside other tools
        "/usr/bin": PathFacts((), False, False, False),
        "/usr/local/cuda/include": PathFacts((), False, True, False),
        "/opt/mine/include": PathFacts((), False, False, False),
        "/usr/local/cuda/lib64": PathFacts((), False, False, True),
        "/opt/mine/lib": PathFacts((), False, False, False),
    }
    hidden = hide_cuda(env, facts, mirror_root="/w/path")
    assert hidden.path == ("/w/path/1", "/usr/bin")
    assert hidden.mirrors == {"/w/path/1": ("/usr/local/bin", ("nvcc",))}
    assert hidden.search == {
        "CPATH": "/opt/mine/include",
        "LD_LIBRARY_PATH": None,
        "LIBRARY_PATH": "/opt/mine/lib",
    }
    out = apply_hidden(env, hidden)
    assert out["PATH"] == "/w/path/1:/usr/bin" and "LD_LIBRARY_PATH" not in out
    assert any("a CUDA toolkit's bin" in d for d in hidden.dropped)
    # nothing of CUDA: nothing changes
    clean = hide_cuda(
        {"PATH": "/usr/bin"}, {"/usr/bin": PathFacts((), False, False, False)}, mirror_root="/m"
    )
    assert clean.path == ("/usr/bin",) and not clean.mirrors and not clean.dropped


def test_arch_routes_name_every_build_system() -> None:
    routes = "\n".join(arch_routes(BY_ID["cu130-py312-x86_64"]))
    for needle in ("TORCH_CUDA_ARCH_LIST=", "CUDAARCHS=", "CMAKE_ARGS", "SKBUILD_CMAKE_ARGS", "CUFLAGS"):
        assert needle in routes
    assert "CPU row names no architecture" in arch_routes(BY_ID["cpu-py312-x86_64"])[0]


def test_container_plan_states_the_contract_too() -> None:
    row = BY_ID["cu130-py312-x86_64"]
    plan = plan_of(row, "container", contract=("version label +cu130",))
    assert plan.archs == arch_routes(row) and plan.contract == ("version label +cu130",)
    env = _cibw_options(dict(plan.cibuildwheel), row.cibw_identifier).environment.as_dictionary(
        {"PATH": "/usr/bin"}
    )
    assert (
        env["CUDAARCHS"] == env["CMAKE_CUDA_ARCHITECTURES"]
        and "CMAKE_CUDA_RUNTIME_LIBRARY=Shared" in env["CMAKE_ARGS"]
    )


# --------------------------------------------------------------------------- isolated build environments


def test_build_system_is_read_from_the_project() -> None:
    system = read_build_system(PROJECT)
    assert system.requires == ("setuptools==84.2.1", "wheel==0.48.0")
    assert system.backend_name == "setuptools" and "[build-system]" in system.source
    default = parse_build_system("[project]\nname = 'x'\n", "x/pyproject.toml")
    assert default.requires == DEFAULT_REQUIRES and "PEP 517's default" in default.source
    skb = parse_build_system(
        '[build-system]\nrequires = ["scikit-build-core>=0.10"]\nbuild-backend = "scikit_build_core.build"\n',
        "p",
    )
    assert skb.requires == ("scikit-build-core>=0.10",) and skb.backend_name == "scikit_build_core"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[build-system]\nrequires = 'setuptools'\n", r"requires must be a list of strings"),
        ('[build-system]\nrequires = ["not a req !!"]\n', r"requires\[0\] 'not a req !!' is not a PEP 508"),
        ("[build-system\n", "not valid TOML"),
        ('[build-system]\nrequires = []\nbuild-backend = ""\n', "build-backend must be a non-empty string"),
    ],
)
def test_a_bad_build_system_names_the_file_and_key(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        parse_build_system(text, "proj/pyproject.toml")
    assert str(info.value).startswith("proj/pyproject.toml: ") and info.value.return_code == 2


def test_wheelwrights_constraints_are_exact_pins() -> None:
    constraints = read_constraints([base_constraints()])
    assert constraints.lines, "no pins"
    for c in constraints.lines:
        name_version = c.text.split(";")[0]
        assert re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", name_version.strip()), c
    names = {c.name for c in constraints.lines}
    for tool in (
        "setuptools",
        "scikit-build-core",
        "meson-python",
        "pybind11",
        "nanobind",
        "build",
        "cmake",
        "ninja",
    ):
        assert tool in names
    # the pins wheelwright itself runs with agree with what builds get
    assert constraints.for_name("setuptools")[0].text == "setuptools==84.2.1"


def test_a_later_constraints_file_replaces_the_pins_of_what_it_names() -> None:
    base = parse_constraints(
        'setuptools==84.2.1\ntomli==2.5.0; python_version < "3.11"\nninja==1.13.2\n', "base"
    )
    project = parse_constraints("# ours\nsetuptools==80.9.0  # older on purpose\ntorch==2.14.1\n", "proj.txt")
    merged = merge_constraints([base, project])
    assert [c.text for c in merged] == [
        "ninja==1.13.2",
        "setuptools==80.9.0",
        'tomli==2.5.0; python_version < "3.11"',
        "torch==2.14.1",
    ]
    assert next(c for c in merged if c.name == "setuptools").source == "proj.txt:2"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("-r other.txt\n", "only requirements go in a build constraints file"),
        ("--index-url https://example.invalid/simple\n", "no pip options"),
        ("foo @ https://example.invalid/foo.whl\n", "a URL is not a version pin"),
        ("===\n", "is not a PEP 508 requirement"),
    ],
)
def test_a_bad_constraints_line_names_the_file_and_line(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message) as info:
        parse_constraints("ok==1\n" + text, "c.txt")
    assert str(info.value).startswith("c.txt:2: ")


def test_the_environment_is_named_by_everything_that_decides_it(tmp_path: Path) -> None:
    py = PythonInfo(Path("/py/bin/python3.12"), "3.12.1")
    cons = Constraints((Path("c"),), parse_constraints("setuptools==84.2.1\n", "c"))
    key = env_key(py, ["b", "a"], cons)
    assert key == env_key(py, ["a", "b"], cons)  # order-free
    assert key != env_key(py, ["a"], cons)
    assert key != env_key(PythonInfo(Path("/py/bin/python3.12"), "3.12.2"), ["a", "b"], cons)
    other = Constraints((Path("c"),), parse_constraints("setuptools==80.9.0\n", "c"))
    assert key != env_key(py, ["a", "b"], other)
    spec = env_spec(py, ["a", "b", "a"], cons, tmp_path)
    assert spec.folder == tmp_path / "build-envs" / f"cp312-3.12.1-{key[:16]}" and spec.requires == ("a", "b")
    assert unpinned({"setuptools": "84.2.1", "pathspec": "1.0"}, cons) == ("pathspec==1.0",)


def test_an_unresolvable_requirement_names_it_its_file_and_its_pin(tmp_path: Path) -> None:
    py = PythonInfo(Path("/py/bin/python3.12"), "3.12.1")
    cons = Constraints(
        (Path("release/resources/build-constraints.txt"),),
        parse_constraints("scikit-build-core==1.1.2\n", "base.txt:1"),
    )
    system = parse_build_system(
        '[build-system]\nrequires = ["scikit-build-core>=99"]\n', "proj/pyproject.toml"
    )
    spec = env_spec(py, system.requires, cons, tmp_path)
    pip = (
        "Collecting scikit-build-core>=99\n"
        "ERROR: Cannot install scikit-build-core>=99 because these package versions have conflicting dependencies.\n"
        "ERROR: ResolutionImpossible: for help visit ...\n"
    )
    text = unresolvable_message(spec, system, pip)
    assert "'scikit-build-core>=99' from proj/pyproject.toml [build-system]" in text
    assert "constrained by: scikit-build-core==1.1.2 (base.txt:1:1)" in text
    assert "constraints files: release/resources/build-constraints.txt" in text
    assert "pip: ERROR: Cannot install scikit-build-core>=99" in text
