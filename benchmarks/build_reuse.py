"""Benchmark: build the four Python rows of one CUDA train cold, then with kernel reuse.

cold   each row builds with an empty kernel cache: device code is compiled 4 times
reuse  the 4 rows build one after another sharing one kernel cache that starts empty:
       device code is compiled once, the other 3 rows copy the kernels library

Both phases use the host backend, the same toolchain and the same (already made) build
venvs, so the difference is the device compile alone. Target: reuse/cold <= 0.5.

    .venv/bin/python benchmarks/build_reuse.py [--variant cu130] [--repeat 2]

Writes benchmarks/results/build_reuse.json (version 1, sorted keys).
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
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from release.core.machine import default_cache_dir, find_python  # noqa: E402
from release.policy.load import load_policy  # noqa: E402
from release.policy.matrix import Row, expand  # noqa: E402
from release.resources.cpus import host_arch  # noqa: E402
from release.wheelbuild.host.isolated import (  # noqa: E402
    base_constraints,
    ensure_build_env,
    env_spec,
    read_build_system,
    read_constraints,
)
from release.wheelbuild.run import build_row  # noqa: E402
from release.wheelbuild.toolchain import resolve_toolchain  # noqa: E402

TARGET_RATIO = 0.5


def _build(row: Row, *, policy: Path, dist: Path, cache: Path, kernels: Path, env: dict[str, str]) -> float:
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
    return round(time.perf_counter() - start, 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--variant", default="cu130")
    parser.add_argument("--policy", default=str(ROOT / "rows.toml"))
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "build_reuse.json"))
    args = parser.parse_args(argv)

    env = {k: v for k, v in os.environ.items() if k != "WHEELWRIGHT_KEEP_TMP"}
    policy = Path(args.policy)
    rows = [r for r in expand(load_policy(policy)) if r.variant == args.variant and r.platform == host_arch()]
    if len(rows) < 2:
        print(
            f"error: {args.variant} has {len(rows)} rows on {host_arch()}; need several Pythons",
            file=sys.stderr,
        )
        return 2
    cache = default_cache_dir(env)
    toolchain = resolve_toolchain(rows[0], env=env, cache_dir=cache)
    system = read_build_system((policy.resolve().parent / load_policy(policy).project.path).resolve())
    constraints = read_constraints([base_constraints()])
    for row in rows:  # the isolated build environments, made before timing: both phases reuse them
        spec = env_spec(find_python(row.python, env=env), system.requires, constraints, cache)
        ensure_build_env(spec, system, env=env, row_id=row.id)

    repeats: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="wheelwright-bench-") as tmp:
        work = Path(tmp)
        for i in range(args.repeat):
            cold: dict[str, float] = {}
            for row in rows:
                kernels = work / f"cold-{i}-{row.id}"
                cold[row.id] = _build(
                    row, policy=policy, dist=work / "dist", cache=cache, kernels=kernels, env=env
                )
            cold_compiles = sum(len(list((work / f"cold-{i}-{r.id}").glob("*.so"))) for r in rows)
            reuse: dict[str, float] = {}
            kernels = work / f"reuse-{i}"
            for row in rows:
                reuse[row.id] = _build(
                    row, policy=policy, dist=work / "dist", cache=cache, kernels=kernels, env=env
                )
            reuse_compiles = len(list(kernels.glob("*.so")))
            cold_total, reuse_total = sum(cold.values()), sum(reuse.values())
            repeats.append(
                {
                    "cold_s": cold,
                    "reuse_s": reuse,
                    "cold_total_s": round(cold_total, 3),
                    "reuse_total_s": round(reuse_total, 3),
                    "ratio": round(reuse_total / cold_total, 3),
                    "device_compiles": {"cold": cold_compiles, "reuse": reuse_compiles},
                }
            )
            shutil.rmtree(work / "dist", ignore_errors=True)
            print(
                f"repeat {i + 1}: cold {cold_total:.1f} s, reuse {reuse_total:.1f} s, "
                f"ratio {reuse_total / cold_total:.3f}",
                file=sys.stderr,
            )

    ratio = statistics.median(r["ratio"] for r in repeats)
    result = {
        "version": 1,
        "benchmark": "build_reuse",
        "variant": args.variant,
        "rows": [r.id for r in rows],
        "toolchain": None if toolchain is None else toolchain.describe(),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "repeats": repeats,
        "cold_total_s": statistics.median(r["cold_total_s"] for r in repeats),
        "reuse_total_s": statistics.median(r["reuse_total_s"] for r in repeats),
        "ratio": ratio,
        "target_ratio": TARGET_RATIO,
        "met": ratio <= TARGET_RATIO,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp_out = out.with_name(out.name + ".tmp")
    tmp_out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tmp_out.replace(out)
    print(json.dumps({k: result[k] for k in ("cold_total_s", "reuse_total_s", "ratio", "met")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
