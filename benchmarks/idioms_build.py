"""Benchmark: the six idiom projects' aarch64 cross builds against their x86_64 builds.

For each project under tests/fixtures/idioms/ (enable_language(CUDA); CUDA::cudart; CUDA::cublas;
CMAKE_CUDA_RUNTIME_LIBRARY Shared; setuptools calling nvcc; nanobind), the host backend builds
``cu130-py311-x86_64`` (native, 7.5 ... 12.0+PTX: 7 SASS + PTX) and ``cu130-py311-aarch64``
(cross-compiled with aarch64-linux-gnu-g++ and wheelwright's CMake toolchain, 9.0;10.0;11.0+PTX),
each with an empty kernel cache. A first untimed round makes the build environments and downloads
(the aarch64 CUDA runtime, cuBLAS for both CPUs) so the timed rounds measure the build alone.
Target: each project's aarch64 build within 3x its x86_64 build.

    .venv/bin/python benchmarks/idioms_build.py [--repeat 1] [--project cublas_target ...]

Writes benchmarks/results/idioms_build.json (version 1, sorted keys).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release.core.machine import default_cache_dir  # noqa: E402
from release.policy.load import load_policy  # noqa: E402
from release.policy.matrix import expand  # noqa: E402
from release.wheelbuild.run import build_row  # noqa: E402

IDIOMS = ROOT / "tests" / "fixtures" / "idioms"
PROJECTS = (
    "language_only",
    "cudart_target",
    "cublas_target",
    "runtime_shared",
    "setuptools_nvcc",
    "nanobind_skbuild",
)
ROWS = ("cu130-py311-x86_64", "cu130-py311-aarch64")
TARGET_RATIO = 3.0


def _build(project: str, row_id: str, work: Path, tag: str, env: dict[str, str], cache: Path) -> float:
    policy = IDIOMS / project / "rows.toml"
    row = next(r for r in expand(load_policy(policy)) if r.id == row_id)
    start = time.perf_counter()
    build_row(
        row,
        policy_path=policy,
        dist_dir=work / f"dist-{tag}-{project}",
        cache_dir=cache,
        backend="host",
        env=env,
        kernel_cache=work / f"kernels-{tag}-{project}-{row_id}",
    )
    return round(time.perf_counter() - start, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--project", action="append", choices=PROJECTS)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "idioms_build.json"))
    args = parser.parse_args(argv)
    projects = tuple(args.project or PROJECTS)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}
    cache = default_cache_dir(env)

    repeats: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wheelwright-bench-") as tmp:
        work = Path(tmp)
        for project in projects:  # untimed: build environments, downloads, the cross CUDA_HOME
            for row_id in ROWS:
                _build(project, row_id, work, "warm", env, cache)
        for i in range(args.repeat):
            seconds: dict[str, dict[str, float]] = {}
            for project in projects:
                seconds[project] = {
                    row_id: _build(project, row_id, work, str(i), env, cache) for row_id in ROWS
                }
                x86, arm = (seconds[project][r] for r in ROWS)
                print(f"repeat {i + 1} {project}: x86_64 {x86:.1f} s, aarch64 {arm:.1f} s", file=sys.stderr)
            repeats.append(seconds)

    per_project: dict[str, dict[str, float]] = {}
    for project in projects:
        x86 = statistics.median(r[project][ROWS[0]] for r in repeats)
        arm = statistics.median(r[project][ROWS[1]] for r in repeats)
        per_project[project] = {"x86_64_s": x86, "aarch64_s": arm, "ratio": round(arm / x86, 3)}
    worst = max(p["ratio"] for p in per_project.values())
    result = {
        "version": 1,
        "benchmark": "idioms_build",
        "rows": list(ROWS),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "repeats": repeats,
        "projects": per_project,
        "worst_ratio": worst,
        "target_ratio": TARGET_RATIO,
        "met": worst <= TARGET_RATIO,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp_out.replace(out)
    print(json.dumps({"projects": per_project, "worst_ratio": worst, "met": result["met"]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
