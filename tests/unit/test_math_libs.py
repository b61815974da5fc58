"""release/wheelbuild/host/math_libs.py (pure parts) and how the build environment and the
toolchain use it: the train's declared CUDA toolkit packages are what a build links, at the
train's pin, and never installed as part of the compiler toolchain."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.core.errors import ToolError
from release.wheelbuild.environment import build_env_changes
from release.wheelbuild.host.math_libs import dev_link_name, math_packages, math_pins, search_paths
from release.wheelbuild.toolchain import Toolchain, compiler_pins

ROOT = Path(__file__).resolve().parents[2]
CUBLAS = rows_by_id(ROOT / "tests" / "fixtures" / "idioms" / "cublas_target" / "rows.toml")
CUDART = rows_by_id(ROOT / "tests" / "fixtures" / "idioms" / "cudart_target" / "rows.toml")


def test_a_train_declaring_cublas_links_it_at_its_pin_per_train() -> None:
    assert [p.name for p in math_packages(CUBLAS["cu130-py311-aarch64"])] == ["nvidia-cublas"]
    assert math_pins(CUBLAS["cu130-py311-aarch64"]) == ("nvidia-cublas==13.1.1.3",)
    assert math_pins(CUBLAS["cu132-py312-x86_64"]) == ("nvidia-cublas==13.4.0.1",)


def test_the_runtime_alone_is_no_math_library() -> None:
    assert math_packages(CUDART["cu130-py311-aarch64"]) == ()
    assert math_pins(CUDART["cu130-py311-aarch64"]) == ()


def test_a_declared_math_library_without_a_pin_stops_the_build_naming_the_key() -> None:
    """Must-fail: nvidia-cublas declared, no nvidia-cublas==X.Y.Z in pypi_toolchain."""
    row = CUBLAS["cu130-py311-aarch64"]
    unpinned = dataclasses.replace(
        row, pypi_toolchain=tuple(p for p in row.pypi_toolchain if "cublas" not in p)
    )
    with pytest.raises(ToolError, match=r'train\."13\.0"\.pypi_toolchain') as caught:
        math_pins(unpinned)
    assert "nvidia-cublas==X.Y.Z" in str(caught.value)


def test_the_math_pin_is_not_installed_as_the_compiler_toolchain() -> None:
    row = CUBLAS["cu130-py311-aarch64"]
    assert "nvidia-cublas==13.1.1.3" in row.pypi_toolchain
    assert "nvidia-cublas==13.1.1.3" not in compiler_pins(row)
    # the same toolchain pins as a policy without cuBLAS: one cache folder for both
    assert compiler_pins(row) == CUDART["cu130-py311-aarch64"].pypi_toolchain


def test_dev_links_and_search_paths() -> None:
    assert dev_link_name("libcublas.so.13") == "libcublas.so"
    assert dev_link_name("libnvrtc-builtins.so.13.0") == "libnvrtc-builtins.so"
    paths = search_paths(Path("/c/m"))
    assert paths["CPATH"] == "/c/m/include" and paths["CMAKE_LIBRARY_PATH"] == "/c/m/lib"


def test_the_build_environment_puts_the_math_libraries_first_and_keeps_what_it_inherits() -> None:
    row = CUBLAS["cu130-py312-x86_64"]
    home = Path("/usr/local/cuda-13.0")
    toolchain = Toolchain(
        "13.0", "13.0.88", home, home / "bin" / "nvcc", "host", home / "lib64", math_libs=Path("/m")
    )
    env = build_env_changes(row, toolchain, kernel_cache=None).apply({"CPATH": "/mine", "PATH": "/usr/bin"})
    assert env["CPATH"] == "/m/include:/mine"
    assert env["LIBRARY_PATH"] == "/m/lib"
    assert env["CMAKE_LIBRARY_PATH"] == "/m/lib"
    plain = build_env_changes(row, dataclasses.replace(toolchain, math_libs=None), kernel_cache=None)
    assert "LIBRARY_PATH" not in plain.apply({"PATH": "/usr/bin"})


def test_every_cuda_13_math_package_of_the_issue_is_a_library_the_build_links() -> None:
    """cuFFT, cuRAND, cuSPARSE, NVRTC, nvJitLink: their sonames are CUDA toolkit libraries in
    release/resources/cuda.toml, so a train declaring them gets them like cuBLAS."""
    row = CUDART["cu130-py311-aarch64"]
    declared = (
        ("nvidia-cufft", "libcufft.so.12"),
        ("nvidia-curand", "libcurand.so.10"),
        ("nvidia-cusparse", "libcusparse.so.12"),
        ("nvidia-cuda-nvrtc", "libnvrtc.so.13"),
        ("nvidia-nvjitlink", "libnvJitLink.so.13"),
    )
    runtime = row.cuda_packages[0]
    packages = tuple(
        dataclasses.replace(runtime, name=name, also_accepted=(), libraries=(soname,))
        for name, soname in declared
    )
    pins = tuple(f"{name}==1.0.0" for name, _ in declared)
    many = dataclasses.replace(
        row, cuda_packages=(runtime, *packages), pypi_toolchain=(*row.pypi_toolchain, *pins)
    )
    assert [p.name for p in math_packages(many)] == [name for name, _ in declared]
    assert math_pins(many) == pins
