"""Decide a smoke run's verdict from what the probe (and the C++ consumer) reported. Pure.

Which loaded library is the CUDA runtime comes from :mod:`release.resources.cuda`, the
one table of CUDA's libraries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from release.policy.matrix import Row
from release.resources import cuda


@dataclass(frozen=True)
class Outcome:
    """What the smoke step concluded for one wheel."""

    passed: bool
    executed: bool
    lines: tuple[str, ...]  # human lines, ✓/✗/- prefixed
    libcudart: str | None
    skipped_reason: str | None
    details: Mapping[str, Any] = field(default_factory=dict)


def _within(path: str, folder: str) -> bool:
    p, f = os.path.normpath(path), os.path.normpath(folder)
    return p == f or p.startswith(f + os.sep)


def loaded_cuda_runtime(loaded: Sequence[str]) -> list[str]:
    """The loaded files that are the CUDA runtime (any CUDA major, a grafted copy too)."""
    out = set()
    for path in loaded:
        known = cuda.library(os.path.basename(path))
        if known is not None and known.kind == "runtime":
            out.add(path)
    return sorted(out)


def evaluate(row: Row, probe: Mapping[str, Any], cpp: Mapping[str, Any] | None = None) -> Outcome:
    """Decide pass/fail from what the probe (and the C++ consumer) reported. Pure."""
    lines: list[str] = []
    ok = True
    if probe.get("import") != "ok":
        return Outcome(
            False,
            False,
            (f"✗ import failed in a fresh venv: {probe.get('import')}",),
            None,
            None,
            dict(probe),
        )
    lines.append(f"✓ installed and imported in a fresh Python {probe.get('python')} venv")
    site = str(probe.get("site"))
    runtimes = loaded_cuda_runtime(probe.get("loaded", []))
    libcudart = runtimes[0] if runtimes else None
    if row.is_cuda:
        wanted = [os.path.join(site, p.installs_to) for p in row.cuda_packages]
        if not runtimes:
            ok = False
            lines.append(
                "✗ no libcudart was loaded by importing the package; the CUDA wheel does not link the runtime"
            )
        for rt in runtimes:
            if any(_within(rt, w) for w in wanted):
                lines.append(f"✓ libcudart came from the environment's CUDA package: {rt}")
            else:
                ok = False
                lines.append(
                    f"✗ libcudart came from {rt}, not from the environment's "
                    f"{', '.join(p.name for p in row.cuda_packages)} ({', '.join(wanted)}); "
                    "the wheel only works where that path exists (check its RPATH/RUNPATH)"
                )
    elif runtimes:
        ok = False
        lines.append(f"✗ the CPU wheel loaded a CUDA runtime: {', '.join(runtimes)}")
    else:
        lines.append("✓ CPU wheel: no CUDA runtime loaded")

    executed = bool(probe.get("run_check"))
    skipped = None
    if not executed:
        skipped = str(probe.get("no_gpu_reason") or "no GPU")
        lines.append(
            f"- no GPU here: execution skipped ({skipped}); install, import and library resolution were checked"
        )
    elif "check_error" in probe:
        ok = False
        lines.append(f"✗ the check computation failed: {probe['check_error']}")
    else:
        result = probe.get("check")
        diff = result.get("max_abs_diff") if isinstance(result, Mapping) else None
        if diff == 0.0:
            where = result.get("device") or result.get("backend") if isinstance(result, Mapping) else None
            lines.append(f"✓ check computation ran on {where}: max |diff| vs CPU reference = 0")
        else:
            ok = False
            lines.append(f"✗ the check computation returned {result!r}; expected max_abs_diff == 0.0")
    if "sdk_error" in probe:
        ok = False
        lines.append(f"✗ the SDK paths could not be read: {probe['sdk_error']}")
    if cpp is not None:
        if cpp.get("error"):
            ok = False
            lines.append(f"✗ a C++ program outside the wheel could not use the SDK: {cpp['error']}")
        else:
            loaded = [str(p) for p in cpp.get("loaded", [])]
            wanted_libs = [f"lib{name}.so" for name in cpp.get("libraries", [])]
            cpp_rt = loaded_cuda_runtime(loaded)
            bad = [
                r
                for r in cpp_rt
                if not any(_within(r, os.path.join(site, p.installs_to)) for p in row.cuda_packages)
            ]
            not_loaded = [lib for lib in wanted_libs if not any(os.path.basename(p) == lib for p in loaded)]
            if not wanted_libs:
                ok = False
                lines.append("✗ the SDK names no library to link; a C++ consumer check needs one")
            elif not_loaded:
                ok = False
                lines.append(f"✗ the C++ consumer did not load the SDK's {', '.join(not_loaded)}")
            elif bad:
                ok = False
                lines.append(f"✗ the C++ consumer loaded libcudart from {bad[0]}, not from the environment")
            elif row.is_cuda and not cpp_rt:
                ok = False
                lines.append(
                    "✗ the C++ consumer loaded no libcudart, but the CUDA SDK must reach the environment's runtime"
                )
            else:
                lines.append("✓ a C++ program outside the wheel compiled, linked and loaded the SDK")
    return Outcome(ok, executed, tuple(lines), libcudart, skipped, dict(probe))


def check_resolution(row: Row, chosen: str) -> str | None:
    """None when pip's choice is this row's wheel; else what a user would wrongly get. Pure."""
    from release.records import row_matches_wheel

    if row_matches_wheel(row, chosen):
        return None
    if "+" not in chosen.split("-")[1]:
        return f"pip picked the CPU wheel {chosen} instead of the {row.variant} wheel"
    return f"pip picked {chosen}, not the {row.variant} wheel for {row.python_tag}"
