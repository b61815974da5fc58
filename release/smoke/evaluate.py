"""Decide a smoke run's verdict from what the probe (and the C++ consumer) reported. Pure.

Which loaded library is the CUDA runtime comes from :mod:`release.resources.cuda`, the
one table of CUDA's libraries.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from release.policy.matrix import Row
from release.policy.model import Project
from release.resources import cuda

NO_CHECK = "no check computation (project.check is not set): import and library load only"


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


def _number(value: object) -> float | None:
    """A finite int or float (not a boolean: ``False == 0.0`` must not pass a check), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _library_lines(row: Row, probe: Mapping[str, Any]) -> tuple[list[str], bool, int]:
    """Lines on the shipped libraries that link a CUDA library, which the probe loaded after the
    import; whether they all loaded (a missing CUDA driver excused); how many there are."""
    shipped = probe.get("libraries")
    if not isinstance(shipped, list):
        return [], True, 0  # a report from before libraries were loaded: nothing to judge
    lines: list[str] = []
    ok = True
    loaded: list[str] = []
    no_driver = not probe.get("gpus") and "libcuda.so" in str(probe.get("no_gpu_reason") or "")
    for lib in shipped:
        if not isinstance(lib, Mapping) or not isinstance(lib.get("member"), str):
            ok = False
            lines.append(f"✗ the probe reported a library it loaded as {lib!r}, not as member/needs/error")
            continue
        member, needs = lib["member"], ", ".join(str(n) for n in lib.get("needs") or ())
        if lib.get("problem"):
            ok = False
            lines.append(f"✗ {member} could not be loaded: {lib['problem']}")
        elif "error" not in lib:
            ok = False
            lines.append(f"✗ {member} (links {needs}) was not loaded: the probe stopped before it")
        elif lib["error"] is None:
            loaded.append(f"{member} ({needs})")
        elif no_driver and "libcuda.so" in str(lib["error"]):
            lines.append(
                f"- {member} was not loaded: it needs the CUDA driver (libcuda.so.1), which this machine lacks"
            )
        else:
            ok = False
            lines.append(
                f"✗ {member} (links {needs}) does not load after importing the package: {lib['error']}"
            )
    if loaded:
        n = len(loaded)
        lines.insert(
            0,
            f"✓ loaded the {'shipped library that links' if n == 1 else f'{n} shipped libraries that link'} "
            f"a CUDA library, after the import: {'; '.join(loaded)}",
        )
    elif not shipped:
        mark = "-" if row.is_cuda else "✓"
        lines.append(f"{mark} no shipped library links a CUDA library")
    return lines, ok, len(shipped)


def _runtime_lines(
    row: Row, probe: Mapping[str, Any], n_libraries: int
) -> tuple[list[str], bool, str | None]:
    """Where the CUDA runtime the process holds came from: the row's CUDA package, or nowhere
    for a CPU row. (lines, ok, the first libcudart)."""
    site = str(probe.get("site"))
    runtimes = loaded_cuda_runtime([str(p) for p in probe.get("loaded") or []])
    lines: list[str] = []
    ok = True
    if row.is_cuda:
        wanted = [os.path.join(site, p.installs_to) for p in row.cuda_packages]
        if not runtimes:
            ok = False
            how = (
                f"by importing the package and loading its {n_libraries} shipped "
                f"librar{'y' if n_libraries == 1 else 'ies'} that link CUDA"
                if "libraries" in probe
                else "by importing the package"
            )
            lines.append(f"✗ no libcudart was loaded {how}; the CUDA wheel does not link the runtime")
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
    return lines, ok, runtimes[0] if runtimes else None


def driver_import_note(error: str) -> str | None:
    """What an import that failed for want of the CUDA driver means, or None for another failure. Pure.

    A package that links the driver itself (``CUDA::cuda_driver``, ``-lcuda``) names ``libcuda.so.1`` in
    NEEDED, so it imports only where an NVIDIA driver is installed: not on a CPU-only CI machine. The
    smoke cannot verify such a row there and fails, closed; this says why and what verifies it."""
    if "libcuda.so.1" not in error or "cannot open shared object file" not in error:
        return None
    return (
        "- the import needs the CUDA driver (libcuda.so.1), which this machine does not have: the package "
        "links the driver itself (CUDA::cuda_driver, -lcuda), so it imports only where an NVIDIA driver is "
        "installed. Smoke-test this row on a GPU machine (the smoke step there, with --wheelhouse: "
        "docs/gpu-smoke.md), or load the driver on first use (dlopen, as PyTorch and CuPy do) so the "
        "package imports anywhere"
    )


def judge_check(result: object, project: Project | None) -> tuple[bool, str]:
    """The check's result against the CPU reference: exact unless the project sets
    ``atol``/``rtol``; then ``max_abs_diff <= atol + rtol * max_abs_reference``. Pure."""
    rtol, atol = (project.rtol, project.atol) if project is not None else (0.0, 0.0)
    diff = _number(result.get("max_abs_diff")) if isinstance(result, Mapping) else None
    if not isinstance(result, Mapping) or diff is None:
        return False, (
            f"✗ the check computation returned {result!r}; expected a dict with a number max_abs_diff "
            "(the largest |result - CPU reference|)"
        )
    device = result.get("device") or result.get("backend")
    where = f" on {device}" if device else ""  # a check that names no device is not said to run "on None"
    if rtol == 0.0 and atol == 0.0:
        if diff == 0.0:
            return True, f"✓ check computation ran{where}: max |diff| vs CPU reference = 0"
        return False, (
            f"✗ the check computation returned {result!r}; expected max_abs_diff == 0.0 "
            "(exact: set project.atol or project.rtol in the policy for a tolerance)"
        )
    reference = _number(result.get("max_abs_reference")) if rtol else 0.0
    if reference is None:
        return False, (
            f"✗ the check computation returned {result!r}; project.rtol needs it to report "
            "max_abs_reference (the largest |CPU reference value|), or use project.atol alone"
        )
    bound = atol + rtol * abs(reference)
    terms = f"atol {atol:g}" + (f" + rtol {rtol:g} x max |reference| {abs(reference):g}" if rtol else "")
    if diff <= bound:
        return (
            True,
            f"✓ check computation ran{where}: max |diff| vs CPU reference = {diff:g} <= {bound:g} ({terms})",
        )
    return False, (
        f"✗ the check computation returned {result!r}; max_abs_diff {diff:g} is over the tolerance "
        f"{bound:g} ({terms})"
    )


def evaluate(
    row: Row,
    probe: Mapping[str, Any],
    cpp: Mapping[str, Any] | None = None,
    *,
    project: Project | None = None,
    other_cpu: Sequence[tuple[str, str]] = (),
) -> Outcome:
    """Decide pass/fail from what the probe (and the C++ consumer) reported. Pure.

    ``project``: the policy's [project] table, for the check's tolerance (none: exact).
    ``other_cpu``: the installed libraries built for another CPU than the row's, with theirs
    (:func:`release.smoke.libraries.other_cpu`): each fails the run, named.
    """
    cpu_lines = [
        f"✗ {member} is built for {cpu}, not for this {row.platform} row: no {row.platform} interpreter can load it"
        for member, cpu in other_cpu
    ]
    if probe.get("import") != "ok":
        note = driver_import_note(str(probe.get("import")))
        return Outcome(
            False,
            False,
            (
                f"✗ import failed in a fresh venv: {probe.get('import')}",
                *([note] if note else []),
                *cpu_lines,
            ),
            None,
            None,
            dict(probe),
        )
    lines: list[str] = [f"✓ installed and imported in a fresh Python {probe.get('python')} venv", *cpu_lines]
    site = str(probe.get("site"))
    library_lines, libraries_ok, n_libraries = _library_lines(row, probe)
    runtime_lines, runtime_ok, libcudart = _runtime_lines(row, probe, n_libraries)
    lines += library_lines + runtime_lines
    ok = libraries_ok and runtime_ok and not cpu_lines

    executed = bool(probe.get("run_check"))
    skipped = None
    if probe.get("no_check"):
        skipped = NO_CHECK
        lines.append(f"- {NO_CHECK}")
    elif not executed:
        skipped = str(probe.get("no_gpu_reason") or "no GPU")
        lines.append(
            f"- no GPU here: execution skipped ({skipped}); install, import and library resolution were checked"
        )
    elif "check_error" in probe:
        ok = False
        lines.append(f"✗ the check computation failed: {probe['check_error']}")
    else:
        passed, line = judge_check(probe.get("check"), project)
        ok = ok and passed
        lines.append(line)
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


def combine(runs: Sequence[tuple[str, Outcome]]) -> Outcome:
    """One outcome for the smoke runs of one wheel on several Pythons (an abi3 or py3-none
    wheel serves them all), pure. It passes only when every run passed and says it executed
    only when every run did; each line names its Python; the details are the first run's,
    with every run's under ``pythons``."""
    if len(runs) == 1:
        return runs[0][1]
    lines: list[str] = []
    for version, outcome in runs:
        verdict = "passed" if outcome.passed else "FAILED"
        lines.append(f"{'✓' if outcome.passed else '✗'} Python {version}: the smoke run {verdict}")
        lines += [
            f"{ln[0]} [Python {version}]{ln[1:]}" if ln and ln[0] in "✓✗-" else ln for ln in outcome.lines
        ]
    first = runs[0][1]
    executed = all(o.executed for _, o in runs)
    details = {**first.details, "run_check": executed, "pythons": {v: dict(o.details) for v, o in runs}}
    return Outcome(
        passed=all(o.passed for _, o in runs),
        executed=executed,
        lines=tuple(lines),
        libcudart=first.libcudart,
        skipped_reason=next((o.skipped_reason for _, o in runs if o.skipped_reason), None),
        details=details,
    )
