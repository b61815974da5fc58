"""Benchmark: one aarch64 CUDA row built cold on this x86_64 machine (the cross build).

cold   an empty cross cache (the aarch64 sysconfig and CUDA_HOME made again, the aarch64 CUDA
       runtime downloaded) and an empty kernel cache (device code compiled); the row's x86_64
       toolkit and the build venv already made, as "image ready" means for the container
warm   the same row again with both caches filled

Target (issue 22): cold at most 300 s on 2 cores.

    .venv/bin/python benchmarks/aarch64_build.py [--row cu130-py312-aarch64] [--repeat 3]

Writes benchmarks/results/aarch64_build.json (version 1, sorted keys).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release.core.machine import default_cache_dir  # noqa: E402
from release.policy.load import load_policy  # noqa: E402
from release.policy.matrix import expand  # noqa: E402
from release.wheelbuild.run import build_row  # noqa: E402

TARGET_S = 300.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", default="cu130-py312-aarch64")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "aarch64_build.json"))
    args = ap.parse_args(argv)
    policy = ROOT / "rows.toml"
    row = next(r for r in expand(load_policy(policy)) if r.id == args.row)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    cache = default_cache_dir(env)
    build_row(
        row, policy_path=policy, dist_dir=Path(tempfile.mkdtemp()), cache_dir=cache, backend="host", env=env
    )
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(args.repeat):
        shutil.rmtree(cache / "cross" / row.platform, ignore_errors=True)
        kernels = Path(tempfile.mkdtemp(prefix="ww-bench-kernels-"))
        for into in (cold, warm):
            dist = Path(tempfile.mkdtemp(prefix="ww-bench-dist-"))
            start = time.perf_counter()
            build_row(
                row,
                policy_path=policy,
                dist_dir=dist,
                cache_dir=cache,
                backend="host",
                env=env,
                kernel_cache=kernels,
            )
            into.append(round(time.perf_counter() - start, 3))
            shutil.rmtree(dist, ignore_errors=True)
        shutil.rmtree(kernels, ignore_errors=True)
    result = {
        "benchmark": "aarch64_build",
        "version": 1,
        "row": row.id,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "cold_s": cold,
        "warm_s": warm,
        "cold_median_s": statistics.median(cold),
        "warm_median_s": statistics.median(warm),
        "target_cold_s": TARGET_S,
        "met": statistics.median(cold) <= TARGET_S,
    }
    Path(args.out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
