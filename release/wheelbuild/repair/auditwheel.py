"""The CUDA repair: the one ``auditwheel repair`` argv both backends run, excluding every
CUDA library (they come from the nvidia-* packages the wheel declares, never grafted)."""

from __future__ import annotations

from collections.abc import Sequence

from release.policy.matrix import Row
from release.resources import cuda


def repair_excludes(row: Row) -> tuple[str, ...]:
    """Every CUDA and driver library of :mod:`release.resources.cuda`, plus the row's packages' libraries.

    auditwheel matches each pattern with fnmatch against every DT_NEEDED soname: the
    driver comes with the GPU driver, everything else from the nvidia-* packages the
    wheel declares, so none of them is ever grafted.
    """
    out = list(cuda.repair_excludes())
    for package in row.cuda_packages:
        for lib in package.libraries:
            if lib not in out:
                out.append(lib)
    for lib in row.provided_libraries:  # [[dependency]].libraries: torch's libc10.so, never grafted
        if lib not in out:
            out.append(lib)
    return tuple(out)


def repair_argv(row: Row, *, auditwheel: Sequence[str] = ("auditwheel",)) -> tuple[str, ...]:
    """The repair both backends run, with cibuildwheel's ``{dest_dir}`` and ``{wheel}``."""
    argv = [*auditwheel, "repair", "--only-plat", "--plat", row.platform_tag]
    for pattern in repair_excludes(row):
        argv += ["--exclude", pattern]
    return (*argv, "-w", "{dest_dir}", "{wheel}")
