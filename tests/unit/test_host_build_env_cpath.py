"""release/wheelbuild/host/backend.py's build environment: ``CPATH`` is the row's (the train's math
libraries' include folder first, then what the build inherits), then the include folders of the CUDA
packages the isolated build environment holds. It once started again from the inherited ``CPATH``
whenever the build environment held ``nvidia/*/include``, dropping the math libraries' headers
(``cublas_v2.h`` for a CUDA::cublas project whose build requirements pull in nvidia-cuda-runtime)."""

from __future__ import annotations

from pathlib import Path

from helpers.rows import rows_by_id

from release.core.machine import PythonInfo
from release.wheelbuild.host.backend import HostJob, build_environment
from release.wheelbuild.host.isolated import BuildSystem, Constraints, EnvSpec
from release.wheelbuild.repair.contract import row_contract
from release.wheelbuild.toolchain import Toolchain

ROOT = Path(__file__).resolve().parents[2]
CUBLAS = rows_by_id(ROOT / "tests" / "fixtures" / "idioms" / "cublas_target" / "rows.toml")


def _job(tmp_path: Path, *, pip_headers: bool) -> tuple[HostJob, Path]:
    """A cuBLAS row's host job whose toolchain brings the math libraries in /m and whose build
    environment holds nvidia/cu13/include (``pip_headers``) or no CUDA package; its site-packages."""
    row = CUBLAS["cu130-py312-x86_64"]
    home = Path("/usr/local/cuda-13.0")
    toolchain = Toolchain(
        "13.0", "13.0.88", home, home / "bin" / "nvcc", "host", home / "lib64", math_libs=Path("/m")
    )
    python = PythonInfo(Path("/usr/bin/python3.12"), "3.12.3")
    spec = EnvSpec(python, ("scikit-build-core",), Constraints((), ()), tmp_path / "env")
    site = spec.folder / "lib" / "python3.12" / "site-packages"
    (site / "nvidia" / ("cu13" if pip_headers else "other") / "include").mkdir(parents=True)
    job = HostJob(
        row=row,
        base={"CPATH": "/mine", "PATH": "/usr/bin"},
        project_name="idiom-cublas",
        project_dir=tmp_path / "project",
        cache_dir=tmp_path / "cache",
        kernel_cache=tmp_path / "kernels",
        contract=row_contract(row),
        toolchain=toolchain,
        python=python,
        system=BuildSystem(
            "pyproject.toml [build-system]", ("scikit-build-core",), "scikit_build_core.build"
        ),
        env=spec,
        src_dir=tmp_path / "src",
        epoch=None,
    )
    return job, site


def test_the_math_libraries_include_stays_first_when_the_build_environment_holds_cuda_headers(
    tmp_path: Path,
) -> None:
    """Must-fail before the fix: CPATH was '/mine:<site>/nvidia/cu13/include', no /m/include."""
    job, site = _job(tmp_path, pip_headers=True)
    env = build_environment(job, tmp_path / "work")
    assert env["CPATH"].split(":") == ["/m/include", "/mine", f"{site}/nvidia/cu13/include"]


def test_without_cuda_headers_in_the_build_environment_cpath_is_the_rows(tmp_path: Path) -> None:
    job, _site = _job(tmp_path, pip_headers=False)
    env = build_environment(job, tmp_path / "work")
    assert env["CPATH"].split(":") == ["/m/include", "/mine"]
