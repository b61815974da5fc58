"""``python -m release build``: build each selected row's wheel exactly as its row says, into
dist/<variant>/ (:func:`release.wheelbuild.run.build_row`), a build record beside each wheel;
``--dry-run`` prints the build plan and builds nothing."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

from release.commands.options import add_backend, add_dist, row_command, rows_from_args

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``build`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p = row_command(
        subparsers,
        "build",
        run,
        help="build the selected rows' wheels into dist/<variant>/",
        description="Build each selected row exactly as its row says: the row's Python, a CUDA toolchain of "
        "the row's exact version, TORCH_CUDA_ARCH_LIST and CMAKE_CUDA_ARCHITECTURES from the row, then "
        "auditwheel repair excluding every CUDA library. --backend container runs cibuildwheel in the row's "
        "manylinux CUDA image (CI); host builds here with the same environment and repair. A failed build "
        "leaves nothing in dist/.",
    )
    add_dist(p, "where wheels go")
    from release.commands.coverage import add_coverage_options

    add_coverage_options(p)  # --wheelhouse: where a gpu_coverage = "take" dependency's wheel is
    add_backend(p, "auto: a container engine if one works, else the host")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="print the build plan (environment, commands) and build nothing",
    )
    return p


def run(args: argparse.Namespace) -> int:
    from release.core.machine import default_cache_dir
    from release.coverage.take import take_lists
    from release.wheelbuild.run import build_row

    policy, rows = rows_from_args(args)
    rows = take_lists(policy, rows, env=os.environ, wheelhouses=args.wheelhouse)  # before anything is built
    built = 0
    for row in rows:
        records = build_row(
            row,
            policy=policy,
            dist_dir=Path(args.dist),
            cache_dir=default_cache_dir(os.environ),
            backend=args.backend,
            dry_run=args.dry_run,
        )
        for record in records:
            print(f"built {row.id}: {record.wheel}")
            built += 1
    if not args.dry_run:
        print(f"{built} wheel(s) built; records beside them (<wheel>.build.json)")
    return 0
