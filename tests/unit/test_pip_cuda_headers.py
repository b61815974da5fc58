"""Which CUDA pip packages' include folders a host build's compile gets (release/wheelbuild/environment.py:
pip_cuda_include_dirs, pip_cuda_headers; pure). The build itself: tests/integration/test_torch_cuda_headers.py.

Must pass: a CUDA 13 row whose build environment holds torch's CUDA packages gets their include folders in
CPATH, after the inherited entries. Must fail (nothing given): the feature off, a CPU row, an environment
without the packages, and a CUDA 12 package's folder for a CUDA 13 row.
"""

from __future__ import annotations

from helpers.rows import rows_by_id

from release.wheelbuild.environment import pip_cuda_headers, pip_cuda_include_dirs

ROWS = rows_by_id()
CUDA = ROWS["cu130-py312-x86_64"]
CPU = ROWS["cpu-py312-x86_64"]
SITE = "/cache/build-envs/cp312-x/lib/python3.12/site-packages"
# what torch 2.14.1's environment holds (nvidia-cublas, -cusparse, ... in cu13; cuDNN, NCCL, ... beside)
TORCH_ENV = (
    "nvidia/cu13/include",
    "nvidia/cudnn/include",
    "nvidia/cusparselt/include",
    "nvidia/nccl/include",
    "nvidia/nvshmem/include",
)


def test_the_cuda_13_packages_include_folders_are_chosen() -> None:
    assert pip_cuda_include_dirs(13, (*TORCH_ENV, "nvidia/something/include")) == TORCH_ENV
    assert pip_cuda_include_dirs(13, ["nvidia/cublas/include", "nvidia/cusparse/include"]) == ()  # CUDA 12's
    assert pip_cuda_include_dirs(12, ["nvidia/cublas/include", "nvidia/cu13/include"]) == (
        "nvidia/cublas/include",
    )


def test_a_cuda_row_gets_them_after_the_inherited_cpath() -> None:
    dirs = pip_cuda_include_dirs(13, TORCH_ENV)
    env = pip_cuda_headers(CUDA, SITE, dirs, "/opt/mine/include")
    entries = env["CPATH"].split(":")
    assert entries[0] == "/opt/mine/include"
    assert entries[1] == f"{SITE}/nvidia/cu13/include"
    assert len(entries) == 1 + len(TORCH_ENV)
    assert pip_cuda_headers(CUDA, SITE, dirs, None)["CPATH"].startswith(f"{SITE}/nvidia/cu13/include:")


def test_nothing_without_the_feature_the_packages_or_cuda() -> None:
    dirs = pip_cuda_include_dirs(13, TORCH_ENV)
    assert pip_cuda_headers(CUDA, SITE, dirs, None, enabled=False) == {}
    assert pip_cuda_headers(CUDA, SITE, pip_cuda_include_dirs(13, ()), None) == {}
    assert pip_cuda_headers(CPU, SITE, dirs, None) == {}
