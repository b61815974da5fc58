"""Benchmark: a warm rehearsal of every row this machine can build, before and after.

after   this tree: rows in parallel (``--jobs``, default the machine's cores), smoke
        dependencies from the wheelhouse, fresh venvs made without ensurepip
before  the tree at ``--before REV`` (default 160022c, where the issue measured 82 s: one row
        at a time, every smoke downloading its CUDA runtime from the default index), run the
        same way on the same machine, alternating with ``after`` so both see the same load

Each side runs ``python -m release release --rehearsal --backend host`` in a committed copy
of its own ``rows.toml`` and ``examples/tinyaxpy``; one untimed run first warms the shared
caches (build venvs, kernels, the wheelhouse, uv). Target: the warm ``after`` at or under 40 s.
The other sessions on this machine load it too: the load average is recorded with each run.

    .venv/bin/python benchmarks/rehearsal.py [--repeat 2] [--before 160022c | --no-before]
    .venv/bin/python benchmarks/rehearsal.py --arch all --no-before

Writes benchmarks/results/rehearsal.json (version 1, sorted keys). With ``--arch all`` (issue
22: every row of both CPU archs this machine can build, the foreign ones cross-compiled and
smoke-tested under emulation) the target is 15 minutes and the result goes to
benchmarks/results/rehearsal_all_arch.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 40.0
TARGET_ALL_ARCH_S = 900.0
ISSUE_BEFORE_S = 82.0  # issue 16, measured at 160022c on this kind of machine


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=b", "-c", "user.email=b@b", *args], cwd=repo, check=True, capture_output=True
    )


def _tree_at(rev: str, dest: Path) -> Path:
    """``git archive REV`` unpacked into ``dest`` (read only for the repository)."""
    dest.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def _short(rev: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()


def _project(code: Path, dest: Path) -> Path:
    """A committed repository with ``code``'s policy and example, as a user's would be."""
    shutil.copytree(
        code / "examples" / "tinyaxpy",
        dest / "examples" / "tinyaxpy",
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__"),
    )
    shutil.copy2(code / "rows.toml", dest / "rows.toml")
    (dest / ".gitignore").write_text("dist/\n.wheelwright/\n")
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "benchmark")
    return dest


def _stop_index(code: Path, repo: Path) -> None:
    """Stop the local index the rehearsals left running (its module moved since 160022c), and
    any server of that index root still alive after that (by its process id)."""
    root = repo / ".wheelwright" / "index"
    env = {**os.environ, "PYTHONPATH": str(code)}
    for module in ("release.publish.index.server", "release.publish.index_server", "release.servers"):
        if (code / Path(*module.split("."))).with_suffix(".py").is_file():
            subprocess.run(
                [sys.executable, "-m", module, "stop", "--root", str(root)],
                env=env,
                capture_output=True,
                check=False,
                timeout=60,
            )
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"serve" in args and str(root).encode() in args:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.kill(int(cmdline.parent.name), signal.SIGTERM)


def _rehearse(code: Path, repo: Path, log: Path, arch: str | None = None) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(code)}
    load = os.getloadavg()[0]
    start = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(
            [sys.executable, "-m", "release", "release", "--rehearsal", "--backend", "host"]
            + (["--arch", arch] if arch else []),
            cwd=repo,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
            timeout=1800,
        )
    seconds = round(time.perf_counter() - start, 2)
    text = log.read_text(errors="replace")
    rows = sum(
        1
        for line in text.splitlines()
        if line.split()[:1] and line.split()[0].endswith(("x86_64", "aarch64")) and "uploaded" in line
    )
    if proc.returncode != 0:
        tail = "\n".join(text.splitlines()[-60:])
        raise SystemExit(
            f"the rehearsal of {code} failed (exit {proc.returncode}); its output ended:\n{tail}"
        )
    return {"seconds": seconds, "rows_published": rows, "load_before": round(load, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--before", default="160022c", help="the revision to compare with")
    parser.add_argument(
        "--after",
        help="time this revision instead of the working tree (e.g. HEAD while the tree is mid-edit)",
    )
    parser.add_argument("--no-before", action="store_true", help="time this tree only")
    parser.add_argument("--arch", help="passed to the rehearsal (x86_64, aarch64, all); needs --no-before")
    parser.add_argument(
        "--out", help="default: benchmarks/results/rehearsal.json (rehearsal_all_arch.json with --arch all)"
    )
    args = parser.parse_args(argv)
    if args.arch and not args.no_before:
        parser.error("--arch needs --no-before (the revision compared with has no --arch)")
    bench = "rehearsal_all_arch" if args.arch == "all" else "rehearsal"
    out = Path(args.out or ROOT / "benchmarks" / "results" / f"{bench}.json")
    target = TARGET_ALL_ARCH_S if args.arch == "all" else TARGET_S

    work = Path(tempfile.mkdtemp(prefix="ww-bench-rehearsal-"))
    sides: dict[str, tuple[Path, Path]] = {}
    try:
        after_code = _tree_at(args.after, work / "after-code") if args.after else ROOT
        after_rev = _short(args.after) if args.after else "working tree"
        sides["after"] = (after_code, _project(after_code, work / "after"))
        if not args.no_before:
            code = _tree_at(args.before, work / "before-code")
            sides["before"] = (code, _project(code, work / "before"))
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in sides}
        for name, (code, repo) in sides.items():  # warm every cache first, untimed
            _rehearse(code, repo, work / f"{name}-warm.log", args.arch)
        for i in range(args.repeat):
            for name, (code, repo) in sides.items():
                runs[name].append(_rehearse(code, repo, work / f"{name}-{i}.log", args.arch))
                print(f"{name} run {i + 1}: {runs[name][-1]}", file=sys.stderr)
    finally:
        for code, repo in sides.values():
            _stop_index(code, repo)
        shutil.rmtree(work, ignore_errors=True)

    after = [r["seconds"] for r in runs["after"]]
    result: dict[str, Any] = {
        "version": 1,
        "benchmark": bench,
        "arch": args.arch or "this machine's",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "rows": runs["after"][0]["rows_published"],
        "jobs": os.cpu_count(),
        "after": runs["after"],
        "after_rev": after_rev,
        "after_median_s": statistics.median(after),
        "target_s": target,
        "met": statistics.median(after) <= target,
        "issue_before_s": ISSUE_BEFORE_S,
    }
    if "before" in runs:
        before = [r["seconds"] for r in runs["before"]]
        result |= {
            "before_rev": args.before,
            "before": runs["before"],
            "before_median_s": statistics.median(before),
            "speedup": round(statistics.median(before) / statistics.median(after), 2),
        }
    out.write_text(json.dumps(result, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
