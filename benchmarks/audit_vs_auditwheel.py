"""Benchmark: the whole audit of each corpus wheel against ``auditwheel show`` on the same wheel.

    python benchmarks/audit_vs_auditwheel.py [--repeat 3] [--only KEY ...] [--out benchmarks/results/audit_vs_auditwheel.json]

The corpus is the audit tests' (``CORPUS`` in tests/real_wheels.py): eight third-party CUDA wheels pinned by
name and sha256 there (fetched into the cache on first use). Per wheel and
round, each in a fresh child process, alternating, after ``sync`` and a 2 s pause:

* ``auditwheel show WHEEL`` (auditwheel 6.8, this environment's): the platform-tag analysis only;
* the audit, standalone as a user runs it on someone else's wheel, through the command itself:
  ``python -m release audit WHEEL --runs-on 8.0 --json --no-record`` from an empty folder (no
  policy): every check (libraries, device code, GPUs, packages, loader, hygiene with the platform
  tag, C++ consumer), the device code inventory and the GPU table, the command's own start-up
  (imports, argument parsing) included. Twice: **cold**, with ``--no-cache`` (the C++ consumer
  compiles and links, as on a wheel never seen here), and **warm**, after one unmeasured run
  kept the C++ consumer's finding in the cache (:mod:`release.audit.cpp.cache`: the same headers,
  libraries, compiler and CUDA headers; as for the rows of one release that ship the same SDK, or
  an audit repeated: publish's re-verification, a CI re-run). Everything else runs both times.

wheelwright's bytecode is compiled first (``compileall``), as pip compiles an installed package's.
Wall-clock seconds, medians over the rounds; peak RSS of the child. Target: the audit takes no
longer than ``auditwheel show`` on every wheel; reported cold and warm.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
_MEASURE = r"""
import json, resource, subprocess, sys, time
start = time.perf_counter()
proc = subprocess.run(sys.argv[1:], capture_output=True, timeout=600)
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": proc.returncode, "wall_s": wall, "maxrss_kib": usage.ru_maxrss,
                  "stdout": proc.stdout.decode(errors="replace")[-200000:], "stderr": proc.stderr.decode(errors="replace")[-2000:]}))
"""


def measure(cmd: list[str], env: dict[str, str], cwd: Path) -> dict[str, Any]:
    os.sync()
    time.sleep(2)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=cwd,
        timeout=900,
    )
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def auditwheel() -> str:
    found = Path(sys.executable).with_name("auditwheel")
    return str(found) if found.is_file() else "auditwheel"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", nargs="*", default=None, help="corpus keys (default: all eight)")
    parser.add_argument(
        "--checks", default=None, help="pass --checks LIST to the audit (default: every check)"
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "audit_vs_auditwheel.json"
    )
    args = parser.parse_args()
    sys.path[:0] = [str(ROOT / "tests")]
    from helpers.real_wheels import BY_KEY, CORPUS, fetch

    from release.binary.inflate import INFLATER

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # as pip installs a package (and auditwheel here): its bytecode compiled, not compiled again at
    # each start (PYTHONDONTWRITEBYTECODE=1 in the environment would otherwise leave it uncached)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "release")], check=True, timeout=600)
    keys = args.only or list(CORPUS)
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bench-empty-") as empty:
        for key in keys:
            wheel = fetch(BY_KEY[key])
            audit = [
                sys.executable, "-m", "release", "audit", str(wheel), "--runs-on", "8.0", "--json", "--no-record",
                *(["--checks", args.checks] if args.checks else []),
            ]  # fmt: skip
            measure(audit, env, Path(empty))  # keeps the C++ consumer's finding for the warm runs
            rounds = []
            for _ in range(args.repeat):
                show = measure([auditwheel(), "show", str(wheel)], env, Path(empty))
                ours = measure([*audit, "--no-cache"], env, Path(empty))
                warm = measure(audit, env, Path(empty))
                for ran in (ours, warm):
                    if ran["rc"] not in (0, 1):
                        print(ran["stderr"], file=sys.stderr)
                        return 4
                result = json.loads(ours["stdout"])["results"][0]
                warm_result = json.loads(warm["stdout"])["results"][0]
                if warm["rc"] != ours["rc"]:
                    print(f"{key}: the warm audit's verdict {warm['rc']} is not the cold one's {ours['rc']}")
                    return 4
                rounds.append(
                    {
                        "auditwheel_show": show,
                        "audit": ours,
                        "warm": warm,
                        "verdict": ours["rc"],
                        "timings": result["timings"],
                        "warm_timings": warm_result["timings"],
                        "warm_cached": [
                            f["details"].get("cached") is True
                            for f in warm_result["findings"]
                            if f["check"] == "cpp_consumer"
                        ],
                    }
                )
            show_s = statistics.median(r["auditwheel_show"]["wall_s"] for r in rounds)
            audit_s = statistics.median(r["audit"]["wall_s"] for r in rounds)
            warm_s = statistics.median(r["warm"]["wall_s"] for r in rounds)
            out[key] = {
                "wheel": wheel.name,
                "wheel_mib": round(wheel.stat().st_size / (1 << 20), 1),
                "auditwheel_show_s": round(show_s, 2),
                "auditwheel_show_exit": rounds[0]["auditwheel_show"]["rc"],
                "audit_s": round(audit_s, 2),
                "ratio": round(audit_s / show_s, 2),
                "audit_verdict": rounds[0]["verdict"],
                "audit_peak_rss_mib": round(max(r["audit"]["maxrss_kib"] for r in rounds) / 1024),
                "auditwheel_peak_rss_mib": round(
                    max(r["auditwheel_show"]["maxrss_kib"] for r in rounds) / 1024
                ),
                "audit_warm_s": round(warm_s, 2),
                "warm_ratio": round(warm_s / show_s, 2),
                "warm_cpp_consumer_read_back": all(all(r["warm_cached"]) for r in rounds),
                "rounds_s": [
                    [
                        round(r["auditwheel_show"]["wall_s"], 2),
                        round(r["audit"]["wall_s"], 2),
                        round(r["warm"]["wall_s"], 2),
                    ]
                    for r in rounds
                ],
                "audit_timings_s": {k: round(v, 3) for k, v in rounds[0]["timings"].items()},
                "warm_timings_s": {k: round(v, 3) for k, v in rounds[0]["warm_timings"].items()},
                "within_target": audit_s <= show_s,
                "within_target_warm": warm_s <= show_s,
            }
            print(
                f"{key}: auditwheel show {show_s:.2f} s, audit cold {audit_s:.2f} s ({audit_s / show_s:.2f}x), "
                f"warm {warm_s:.2f} s ({warm_s / show_s:.2f}x), audit peak RSS "
                f"{out[key]['audit_peak_rss_mib']} MiB",
                flush=True,
            )
    doc = {
        "version": 1,
        "benchmark": "audit vs auditwheel show, per corpus wheel",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "audit_inflater": getattr(INFLATER, "__name__", str(INFLATER)),
        },
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repeat": args.repeat,
        "checks": args.checks or "every check",
        "target": "audit_s <= auditwheel_show_s on every wheel (cold: --no-cache; warm: audit_warm_s)",
        "wheels": out,
        "all_within_target": all(v["within_target"] for v in out.values()),
        "all_within_target_warm": all(v["within_target_warm"] for v in out.values()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(
        f"wrote {args.out}; all within target: cold {doc['all_within_target']}, "
        f"warm {doc['all_within_target_warm']}"
    )
    return 0 if doc["all_within_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
