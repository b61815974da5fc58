"""The CUDA repair: the one ``auditwheel repair`` argv both backends run, excluding every
CUDA library (they come from the nvidia-* packages the wheel declares, never grafted)."""

from __future__ import annotations

from collections.abc import Sequence

from release.policy.matrix import Row

# CUDA libraries that are never grafted into a wheel by repair: the driver comes with
# the GPU driver, everything else from the nvidia-* packages the wheel declares.
# auditwheel matches these with fnmatch against each DT_NEEDED soname.
CUDA_LIBRARY_EXCLUDES: tuple[str, ...] = (
    # driver and management library (installed with the driver, never shippable)
    "libcuda.so.*",
    "libnvidia-ml.so.*",
    # runtime, JIT and compiler libraries
    "libcudart.so.*",
    "libnvrtc.so.*",
    "libnvrtc-builtins.so.*",
    "libnvJitLink.so.*",
    "libnvfatbin.so.*",
    "libnvvm.so.*",
    # math libraries
    "libcublas.so.*",
    "libcublasLt.so.*",
    "libnvblas.so.*",
    "libcufft.so.*",
    "libcufftw.so.*",
    "libcurand.so.*",
    "libcusolver.so.*",
    "libcusolverMg.so.*",
    "libcusparse.so.*",
    "libcusparseLt.so.*",
    "libnpp*.so.*",
    # deep learning, communication, I/O
    "libcudnn*.so.*",
    "libnccl.so.*",
    "libnvshmem*.so*",
    "libcufile.so.*",
    "libcufile_rdma.so.*",
    "libcudla.so.*",
    # profiling and tools
    "libcupti.so.*",
    "libnvToolsExt.so.*",
    "libnvtx3interop.so.*",
    "libnvperf_host.so",
    "libnvperf_target.so",
    "libcheckpoint.so",
    "libpcsamplingutil.so",
)


def repair_excludes(row: Row) -> tuple[str, ...]:
    """Every CUDA library pattern, plus the libraries the row's CUDA packages provide."""
    out = list(CUDA_LIBRARY_EXCLUDES)
    for package in row.cuda_packages:
        for lib in package.libraries:
            if lib not in out:
                out.append(lib)
    return tuple(out)


def repair_argv(row: Row, *, auditwheel: Sequence[str] = ("auditwheel",)) -> tuple[str, ...]:
    """The repair both backends run, with cibuildwheel's ``{dest_dir}`` and ``{wheel}``."""
    argv = [*auditwheel, "repair", "--only-plat", "--plat", row.platform_tag]
    for pattern in repair_excludes(row):
        argv += ["--exclude", pattern]
    return (*argv, "-w", "{dest_dir}", "{wheel}")
