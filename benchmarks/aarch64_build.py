"""Benchmark: one aarch64 CUDA row built cold on this x86_64 machine, by either backend.

--backend host (the cross build):
cold   an empty cross cache (the aarch64 sysconfig and CUDA_HOME made again, the aarch64 CUDA
       runtime downloaded) and an empty kernel cache (device code compiled); the row's x86_64
       toolkit and the build venv already made, as "image ready" means for the container
warm   the same row again with both caches filled

--backend container (cibuildwheel in the arm64 stand-in builder image, every program in it under
qemu-user emulation; the image made beforehand, "image ready"): every build is cold (a fresh
container: the build requirements installed, the device code compiled, the repair run, all
emulated), so only cold times are taken. The row must be one the image has a Python for
(cu130-py311-aarch64: Debian bookworm's arm64 Python is 3.11).

Target (issue 22): cold at most 300 s on 2 cores.

    .venv/bin/python benchmarks/aarch64_build.py [--row cu130-py312-aarch64] [--repeat 3]
    .venv/bin/python benchmarks/aarch64_build.py --backend container --row cu130-py311-aarch64 --repeat 2

Writes benchmarks/results/aarch64_build.json (aarch64_build_container.json for the container;
version 1, sorted keys).
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
from typing import Literal

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from builder.recipe import standin_policy_text  # noqa: E402
from release.core.machine import default_cache_dir  # noqa: E402
from release.policy.load import load_policy  # noqa: E402
from release.policy.matrix import Row, expand  # noqa: E402
from release.wheelbuild.run import build_row  # noqa: E402

TARGET_S = 300.0


def _container(row_id: str, repeat: int, env: dict[str, str]) -> list[float]:
    """Cold builds of the row in the arm64 stand-in (made first if missing: not timed)."""
    import make_builder_image as mbi

    env = mbi.engine_env(env)
    image = mbi.ensure_image("13.0", env=env, arch="aarch64")
    work = Path(tempfile.mkdtemp(prefix="ww-bench-policy-"))
    real = ROOT / "rows.toml"
    row = next(r for r in expand(load_policy(real)) if r.id == row_id)
    policy = work / "rows.toml"
    policy.write_text(
        standin_policy_text(real.read_text(encoding="utf-8"), row.builder_image, image.tag, "rows.toml")
    )
    (work / "examples").symlink_to(ROOT / "examples")
    row = next(r for r in expand(load_policy(policy)) if r.id == row_id)
    cold = [_timed_build(row, policy, "container", env) for _ in range(repeat)]
    shutil.rmtree(work, ignore_errors=True)
    return cold


def _timed_build(
    row: Row,
    policy: Path,
    backend: Literal["host", "container"],
    env: dict[str, str],
    kernels: Path | None = None,
) -> float:
    """Seconds one build of the row takes, into a fresh dist/ (removed after)."""
    dist = Path(tempfile.mkdtemp(prefix="ww-bench-dist-"))
    start = time.perf_counter()
    build_row(
        row,
        policy_path=policy,
        dist_dir=dist,
        cache_dir=default_cache_dir(env),
        backend=backend,
        env=env,
        kernel_cache=kernels,
    )
    seconds = round(time.perf_counter() - start, 3)
    shutil.rmtree(dist, ignore_errors=True)
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--row", default="cu130-py312-aarch64")
    ap.add_argument("--backend", choices=("host", "container"), default="host")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", help="default: benchmarks/results/aarch64_build[_container].json")
    args = ap.parse_args(argv)
    out = args.out or str(
        ROOT
        / "benchmarks"
        / "results"
        / f"aarch64_build{'_container' if args.backend == 'container' else ''}.json"
    )
    policy = ROOT / "rows.toml"
    row = next(r for r in expand(load_policy(policy)) if r.id == args.row)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    cache = default_cache_dir(env)
    cold: list[float] = []
    warm: list[float] = []
    if args.backend == "container":
        cold = _container(args.row, args.repeat, env)
    else:
        build_row(
            row,
            policy_path=policy,
            dist_dir=Path(tempfile.mkdtemp()),
            cache_dir=cache,
            backend="host",
            env=env,
        )
    for _ in range(args.repeat if args.backend == "host" else 0):
        shutil.rmtree(cache / "cross" / row.platform, ignore_errors=True)
        kernels = Path(tempfile.mkdtemp(prefix="ww-bench-kernels-"))
        for into in (cold, warm):
            into.append(_timed_build(row, policy, "host", env, kernels))
        shutil.rmtree(kernels, ignore_errors=True)
    result = {
        "benchmark": "aarch64_build",
        "version": 1,
        "row": row.id,
        "backend": args.backend,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "cold_s": cold,
        "warm_s": warm,
        "cold_median_s": statistics.median(cold),
        "warm_median_s": statistics.median(warm) if warm else None,
        "target_cold_s": TARGET_S,
        "met": statistics.median(cold) <= TARGET_S,
    }
    Path(out).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
