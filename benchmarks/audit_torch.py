"""Benchmark: the full audit of torch 2.14.1 (cu130) against just unzipping its shared libraries.

    python benchmarks/audit_torch.py [--wheel PATH] [--repeat 5] [--out benchmarks/results/audit_torch.json]

Each round runs, in this order and each in a fresh child process:

* ``unzip -q -o WHEEL '*.so*' -d TMP``: the baseline the target is stated against;
* ``unzip -q -o WHEEL -d TMP``: every file, the same extraction work the audit does;
* the audit: ``python -m release audit WHEEL --variant cu130 --gpu-archs LIST --json --no-record
  --no-cache`` (the same command body, :func:`release.commands.audit.run`; cold: the C++ consumer
  compiles every round).

Times are wall-clock seconds of the child, medians over the rounds (this machine's
disk and CPU are noisy: rounds alternate so drift hits every command alike, and every
command starts after ``sync`` and a 2 s pause, so the 1 GB another one wrote is not
still being flushed). Memory
is the child's peak RSS from ``resource.getrusage(RUSAGE_CHILDREN)`` (the largest
single process of its tree: the audit is one process, plus g++ for the C++ consumer
check) and, sampled every 200 ms (through /proc/PID/task/*/children, cheap), the peak of
the whole process tree's RSS summed.
Targets: audit <= 1.2x the baseline, peak RSS <= 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# torch 2.14.1 cu130's arch list: every translation unit of libtorch_cuda.so carries these (the
# audit's read-back claim adds its variants and sm_89: see docs/audit.md).
TORCH_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0"
TARGET_RATIO = 1.2
TARGET_RSS_MIB = 1024

# Runs one command, samples its process tree's RSS, prints one JSON line.
_MEASURE = r"""
import json, os, resource, subprocess, sys, threading, time

def descendants(pid):
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out

def tree_rss_kib(root):
    total = 0
    for pid in descendants(root):
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total

start = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
peak = [0]
def sample():
    while proc.poll() is None:
        peak[0] = max(peak[0], tree_rss_kib(proc.pid))
        time.sleep(0.2)
t = threading.Thread(target=sample, daemon=True)
t.start()
out, _ = proc.communicate()
wall = time.perf_counter() - start
t.join()
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"rc": proc.returncode, "wall_s": wall, "maxrss_kib": usage.ru_maxrss, "tree_peak_kib": peak[0],
                  "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "stdout": out.decode(errors="replace")}))
"""

_AUDIT = """
import argparse, sys
from release.commands import audit
parser = argparse.ArgumentParser(prog="python -m release")
audit.add_parser(parser.add_subparsers())
args = parser.parse_args(["audit", *sys.argv[1:]])
sys.exit(args.func(args))
"""


def settle() -> None:
    """Flush the previous command's writes (1 GB for an unzip) so they do not slow the next one."""
    os.sync()
    time.sleep(2)


def measure(cmd: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    settle()
    result = subprocess.run(
        [sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True, env=env, cwd=ROOT
    )
    data: dict[str, Any] = json.loads(result.stdout)
    return data


def run_round(wheel: Path, archs: str, env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, pattern in (("unzip_so", ["*.so*"]), ("unzip_all", [])):
        target = Path(tempfile.mkdtemp(prefix="bench-unzip-"))
        try:
            m = measure(["unzip", "-q", "-o", str(wheel), *pattern, "-d", str(target)])
        finally:
            shutil.rmtree(target, ignore_errors=True)
        out[name] = {k: m[k] for k in ("wall_s", "maxrss_kib", "tree_peak_kib", "user_s", "sys_s")}
    m = measure(
        [
            sys.executable,
            "-c",
            _AUDIT,
            str(wheel),
            "--variant",
            "cu130",
            "--gpu-archs",
            archs,
            "--json",
            "--no-record",
            "--no-cache",
        ],
        env=env,
    )
    doc = json.loads(m["stdout"])
    result = doc["results"][0]
    out["audit"] = {k: m[k] for k in ("wall_s", "maxrss_kib", "tree_peak_kib", "user_s", "sys_s")}
    out["audit"]["exit"] = m["rc"]
    out["audit"]["timings"] = result["timings"]
    out["audit"]["failed_checks"] = result["failed_checks"]
    out["audit"]["arch_list_found"] = result["arch_list_found"]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--wheel", type=Path, default=None, help="default: the pinned torch wheel, fetched by name and sha256"
    )
    parser.add_argument("--archs", default=TORCH_ARCHS)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "audit_torch.json")
    args = parser.parse_args()
    if args.wheel is None:
        sys.path.insert(0, str(ROOT / "tests"))
        from helpers.real_wheels import BY_KEY, fetch

        args.wheel = fetch(BY_KEY["torch"])
    if not args.wheel.is_file():
        print(f"no wheel at {args.wheel}", file=sys.stderr)
        return 2
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    # as pip installs a package: its bytecode compiled, not compiled again at each start
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "release")], check=True)
    rounds = []
    for i in range(args.repeat):
        r = run_round(args.wheel, args.archs, env)
        rounds.append(r)
        print(
            f"round {i + 1}: unzip *.so* {r['unzip_so']['wall_s']:.2f} s, unzip all {r['unzip_all']['wall_s']:.2f} s, "
            f"audit {r['audit']['wall_s']:.2f} s (peak RSS {r['audit']['maxrss_kib'] / 1024:.0f} MiB, "
            f"tree {r['audit']['tree_peak_kib'] / 1024:.0f} MiB)",
            flush=True,
        )

    def med(step: str, key: str) -> float:
        return float(statistics.median(r[step][key] for r in rounds))

    ratios = [r["audit"]["wall_s"] / r["unzip_so"]["wall_s"] for r in rounds]
    timing_keys = rounds[0]["audit"]["timings"].keys()
    summary = {
        "unzip_so_s": med("unzip_so", "wall_s"),
        "unzip_all_s": med("unzip_all", "wall_s"),
        "audit_s": med("audit", "wall_s"),
        "ratio_median_of_rounds": statistics.median(ratios),
        "ratio_of_medians": med("audit", "wall_s") / med("unzip_so", "wall_s"),
        "ratio_to_unzip_all": med("audit", "wall_s") / med("unzip_all", "wall_s"),
        "audit_peak_rss_mib": max(r["audit"]["maxrss_kib"] for r in rounds) / 1024,
        "audit_tree_peak_rss_mib": max(r["audit"]["tree_peak_kib"] for r in rounds) / 1024,
        "unzip_so_peak_rss_mib": max(r["unzip_so"]["maxrss_kib"] for r in rounds) / 1024,
        "audit_cpu_s": med("audit", "user_s") + med("audit", "sys_s"),
        "unzip_so_cpu_s": med("unzip_so", "user_s") + med("unzip_so", "sys_s"),
        "audit_timings_median_s": {
            k: statistics.median(r["audit"]["timings"][k] for r in rounds if k in r["audit"]["timings"])
            for k in timing_keys
        },
    }
    doc = {
        "version": 1,
        "wheel": args.wheel.name,
        "wheel_mib": args.wheel.stat().st_size / (1 << 20),
        "archs": args.archs,
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "tmpdir": tempfile.gettempdir(),
        },
        "targets": {"ratio": TARGET_RATIO, "peak_rss_mib": TARGET_RSS_MIB},
        "summary": summary,
        "met": {
            "ratio": summary["ratio_of_medians"] <= TARGET_RATIO,
            "peak_rss": summary["audit_peak_rss_mib"] <= TARGET_RSS_MIB,
        },
        "audit_verdict": {
            "exit": rounds[-1]["audit"]["exit"],
            "failed_checks": rounds[-1]["audit"]["failed_checks"],
            "arch_list_found": rounds[-1]["audit"]["arch_list_found"],
        },
        "rounds": rounds,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps({"summary": summary, "met": doc["met"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
