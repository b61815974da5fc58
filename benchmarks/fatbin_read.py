"""Time release.binary.fatbin.read_fatbins against cuobjdump on one CUDA library.

    .venv/bin/python benchmarks/fatbin_read.py /tmp/torch/lib/libtorch_cuda.so

Each measurement runs in a fresh child process (through release.core.proc), so peak
RSS is that of the measured work alone: for read_fatbins the child's own peak
(Python included; the bare interpreter's peak is reported next to it), for
cuobjdump the peak of the cuobjdump process the child ran. The library is read
once before timing so both sides start from a warm page cache. The two tables
are compared entry by entry (release.binary.cuobjdump.cross_check rules).

Writes benchmarks/results/fatbin_read.json (or --output).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from release.binary.cuobjdump import cross_check, cuobjdump_version, ensure_cuobjdump, find_cuobjdump  # noqa: E402
from release.binary.fatbin import read_fatbins  # noqa: E402
from release.core import proc  # noqa: E402

DEFAULT_OUTPUT = ROOT / "benchmarks" / "results" / "fatbin_read.json"
DEFAULT_CACHE = Path.home() / ".cache" / "wheelwright"

# Child programs. Each prints one JSON object on its last line.
BASELINE = """
import json, resource
print(json.dumps({"peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

OURS = """
import json, resource, sys, time
from release.binary.fatbin import read_fatbins
t = time.perf_counter()
fbs = read_fatbins(sys.argv[1])
seconds = time.perf_counter() - t
print(json.dumps({
    "seconds": seconds,
    "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    "fatbinaries": len(fbs),
    "entries": sum(len(f.entries) for f in fbs),
}))
"""

THEIRS = """
import json, resource, sys, time
from release import proc
t = time.perf_counter()
r = proc.run([sys.argv[2], sys.argv[3], sys.argv[1]], check=False)
seconds = time.perf_counter() - t
print(json.dumps({
    "seconds": seconds,
    "peak_rss_kib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    "returncode": r.returncode,
    "lines": len(r.stdout.splitlines()),
}))
"""


def child(code: str, *args: str) -> dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    result = proc.run([sys.executable, "-c", code, *args], env=env, cwd=ROOT)
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


def warm(path: Path) -> None:
    with path.open("rb") as f:
        while f.read(1 << 24):
            pass


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    seconds = [r["seconds"] for r in runs]
    return {
        "runs": len(runs),
        "seconds": [round(s, 4) for s in seconds],
        "seconds_min": round(min(seconds), 4),
        "seconds_median": round(statistics.median(seconds), 4),
        "peak_rss_mib": round(max(r["peak_rss_kib"] for r in runs) / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("library", type=Path)
    parser.add_argument("--repeat", type=int, default=5, help="read_fatbins runs (default 5)")
    parser.add_argument("--cuobjdump-repeat", type=int, default=1, help="cuobjdump runs per mode (default 1)")
    parser.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)

    lib: Path = args.library.resolve()
    tool = find_cuobjdump(args.cache_dir) or ensure_cuobjdump(args.cache_dir)
    print(f"library   {lib} ({lib.stat().st_size / 1e6:.1f} MB)", file=sys.stderr)
    print(f"cuobjdump {tool}", file=sys.stderr)
    warm(lib)

    baseline = child(BASELINE)
    ours_runs = [child(OURS, str(lib)) for _ in range(args.repeat)]
    ours = summary(ours_runs)
    ours["fatbinaries"] = ours_runs[0]["fatbinaries"]
    ours["entries"] = ours_runs[0]["entries"]
    print(f"read_fatbins  {ours['seconds_min']:.3f} s, {ours['peak_rss_mib']} MiB", file=sys.stderr)

    theirs: dict[str, Any] = {}
    for option in ("--list-elf", "--list-ptx"):
        runs = [child(THEIRS, str(lib), str(tool), option) for _ in range(args.cuobjdump_repeat)]
        theirs[option] = summary(runs) | {
            "returncode": runs[0]["returncode"],
            "lines": runs[0]["lines"],
        }
        print(
            f"cuobjdump {option}  {theirs[option]['seconds_min']:.3f} s, "
            f"{theirs[option]['peak_rss_mib']} MiB",
            file=sys.stderr,
        )

    check = cross_check(lib, cuobjdump=tool)
    entries = Counter(e.name for fb in read_fatbins(lib) for e in fb.entries)
    cuobjdump_total = sum(v["seconds_min"] for v in theirs.values())
    report = {
        "benchmark": "fatbin_read",
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "library": str(lib),
        "library_bytes": lib.stat().st_size,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
        },
        "page_cache": "warm (library read once before timing)",
        "cuobjdump": {"path": str(tool), "version": cuobjdump_version(tool)},
        "python_baseline_peak_rss_mib": round(baseline["peak_rss_kib"] / 1024, 1),
        "read_fatbins": ours,
        "cuobjdump_runs": theirs,
        "speedup_vs_cuobjdump_both_modes": round(cuobjdump_total / ours["seconds_min"], 1),
        "entries_by_name": dict(sorted(entries.items())),
        "cross_check": {
            "same_entries": check.same_entries,
            "same_order": check.same_order,
            "differences": check.differences(),
            "compared_entries": len(check.ours),
            "note": "cuobjdump lists sm_XYf cubins as sm_XY; LTO-IR entries are not listed",
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_name(args.output.name + ".tmp")
    tmp.write_text(json.dumps(report, indent=2) + "\n")
    tmp.replace(args.output)
    print(f"wrote {args.output}", file=sys.stderr)
    return 0 if check.same_entries else 1


if __name__ == "__main__":
    raise SystemExit(main())
