"""Audit one wheel: extract, inspect, analyse, run every check, return every finding.

The effects happen here, in order and in parallel where they can:

1. :func:`release.audit.reading.archive.open_wheel` extracts and hashes every member (threads);
2. every ELF file is inspected once (:mod:`release.audit.reading.inspector`), and the platform-tag
   analysis (:mod:`release.audit.abi.analysis`: auditwheel's policies, wheelwright's ELF reader)
   starts in a thread on the inspected files;
3. the checks run, in the order of :mod:`release.audit.registry` (``cpp_consumer`` runs g++, started
   early: :mod:`release.audit.cpp.early`); ``hygiene`` last, once the analysis is in.

The checks themselves are functions ``check(contents, expectation) -> list[Finding]``, each declared
by its module (``SPEC``) and listed once, in the registry.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.audit import link_closure, registry, standalone
from release.audit.checks import cross_check, device_code, gpus, hygiene, loader
from release.audit.claim import row_expectation
from release.audit.cpp import cache as cpp_cache
from release.audit.cpp import consumer as cpp_consumer
from release.audit.cpp.early import EarlyCpp, cached_check
from release.audit.model import AbiReport, AuditResult, Contents, Expectation, Finding, Library, WheelFile, ok
from release.audit.reading.archive import open_wheel
from release.audit.reading.identity import check_identity
from release.audit.reading.inspector import Inspector
from release.audit.report.inventory import inventory
from release.core.errors import InputError, ToolError
from release.core.machine import default_cache_dir

if TYPE_CHECKING:
    from release.policy.matrix import Row
    from release.policy.model import Policy

__all__ = ["audit_wheel", "expectation_for_wheel"]


def expectation_for_wheel(path: str | os.PathLike[str], policy: Policy, rows: Sequence[Row]) -> Expectation:
    """The row a wheel claims by its file name: local version label, Python tag, platform tag.

    ``pkg-1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl`` is the cu130 row for 3.12 on
    x86_64; a wheel without a local label is the CPU row. InputError when none matches.
    """
    name = Path(path).name
    try:
        _dist, version, _build, tags = parse_wheel_filename(name)
    except InvalidWheelFilename as exc:
        raise InputError(f"{name}: not a wheel file name: {exc}") from None
    variant = version.local or "cpu"
    pythons = {t.interpreter for t in tags}
    platforms = {t.platform for t in tags}
    matches = [
        r
        for r in rows
        if r.variant == variant
        and any(r.serves(t.interpreter, t.abi) for t in tags)
        and r.platform_tag in platforms
    ]
    if len(matches) == 1:
        return row_expectation(matches[0])
    if len(matches) > 1:  # pragma: no cover - row ids are unique per (variant, python, platform)
        raise InputError(f"{name}: matches several rows: {', '.join(r.id for r in matches)}; pass --row")
    same_variant = [r.id for r in rows if r.variant == variant]
    if not same_variant:
        known = sorted({r.variant for r in rows})
        raise InputError(
            f"{name}: no row of {policy.path} has variant {variant!r} (from the local version label "
            f"{'+' + version.local if version.local else '(none)'}); variants: {', '.join(known)}; "
            "pass --row or --variant"
        )
    raise InputError(
        f"{name}: no row of {policy.path} is variant {variant} for {', '.join(sorted(pythons))} on "
        f"{', '.join(sorted(platforms))}; rows of variant {variant}: {', '.join(same_variant)} "
        "(a row's wheel is tagged with its python tag and platform tag, e.g. manylinux_2_28_x86_64); "
        "pass --row or --variant"
    )


def audit_wheel(
    path: str | os.PathLike[str],
    expectation: Expectation,
    *,
    cross_check_cuobjdump: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    remember: bool | None = None,
) -> AuditResult:
    """Audit one wheel against an expectation. InputError (exit 2) if it cannot be read.

    A standalone expectation (no policy) is completed from the wheel first
    (:func:`release.audit.standalone.resolve`); ``expectation.checks`` limits the checks run.
    Work overlaps where it can: each ELF file is inspected as soon as it is unpacked; the C++
    consumer (g++) starts once the wheel is unpacked, beside the inspection; the platform
    analysis runs beside the other checks. (Python work in other threads while the wheel is
    unpacked, imports for instance, slowed the unpacking down more than it saved.)

    ``remember``: read and keep the C++ consumer's findings in the cache (:mod:`release.audit.cpp.cache`,
    under ``cache_dir``); None: unless ``WHEELWRIGHT_CPP_CACHE=0``.
    """
    timings: dict[str, float] = {}
    start = time.perf_counter()
    remember = cpp_cache.enabled(os.environ) if remember is None else remember
    folder = Path(cache_dir or default_cache_dir(os.environ)) / cpp_cache.FOLDER if remember else None
    early = EarlyCpp(expectation.runs(cpp_consumer.CHECK), folder, expectation.train, _platform_tags(path))
    with (
        early,  # outermost: its scratch directories go after the check that uses them is done
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="audit") as pool,
        Inspector() as inspector,
    ):
        with open_wheel(path, on_extracted=inspector.submit, on_others_done=early.start) as wheel:
            timings["extract"] = time.perf_counter() - start
            check_identity(wheel)
            cpp_future = None
            if expectation.runs(
                cpp_consumer.CHECK
            ):  # it needs only the headers and each library's ELF header
                cpp_future = pool.submit(cached_check, wheel, expectation, early, folder)
            t = time.perf_counter()
            claimed = expectation
            # the platform analysis needs no embedded images: it starts while they are searched for
            libs = inspector.libraries(wheel, embedded=False)
            timings["inspect"] = time.perf_counter() - t
            expectation = standalone.resolve(claimed, Contents(wheel, libs))
            abi_future = _start_abi(pool, wheel, libs, expectation)
            t = time.perf_counter()
            libs = link_closure.relink(inspector.libraries(wheel), wheel.root)  # rdc: the loader's view
            timings["embedded_wait"] = time.perf_counter() - t
            contents = Contents(wheel, libs)
            if inspector.scan_failed:  # a library's inspection stopped at its scan: start again from it
                expectation = standalone.resolve(claimed, contents)
                if abi_future is not None:
                    abi_future.cancel()
                abi_future = _start_abi(pool, wheel, libs, expectation)
            expectation = standalone.by_design(expectation, contents)  # NVIDIA's NVRTC, runtime...: a note
            runs = [name for name in registry.CHECKS if expectation.runs(name)]
            findings: dict[str, list[Finding]] = {}
            for name in runs:
                if name in (hygiene.CHECK, cpp_consumer.CHECK):  # beside the others, and last
                    continue
                t = time.perf_counter()
                if name == gpus.CHECK and expectation.by_design is not None:  # no kernels to place on a GPU
                    findings[name] = [ok(name, f"note: {expectation.by_design}")]
                else:
                    findings[name] = registry.by_name(name).function(contents, expectation)
                timings[name] = time.perf_counter() - t
            cross = cross_check_cuobjdump or (
                expectation.checks is not None and cross_check.CHECK in expectation.checks
            )
            if cross:
                t = time.perf_counter()
                findings[cross_check.CHECK] = cross_check.check(
                    contents, Path(cache_dir or default_cache_dir(os.environ))
                )
                timings[cross_check.CHECK] = time.perf_counter() - t
            if cpp_future is not None:
                findings[cpp_consumer.CHECK], timings[cpp_consumer.CHECK] = _cpp_result(cpp_future, runs)
            if abi_future is not None:
                t = time.perf_counter()
                abi = abi_future.result()
                timings["abi_wait"] = time.perf_counter() - t
                timings["abi"] = abi.seconds
                contents = replace(contents, abi=abi)
                findings[hygiene.CHECK] = hygiene.check(contents, expectation)
            ordered = [
                f for name in (*registry.CHECKS, *registry.OPTIONAL_CHECKS) for f in findings.get(name, [])
            ]
            table = gpus.gpu_table(contents, expectation)
            arch_list = device_code.arch_list_found(contents)
            found = inventory(contents)
            t = time.perf_counter()
        timings["cleanup"] = time.perf_counter() - t
    timings["total"] = time.perf_counter() - start
    return AuditResult(
        wheel=wheel.filename,
        wheel_path=wheel.path,
        sha256=wheel.sha256,
        expectation=expectation,
        findings=tuple(ordered),
        gpu_table=table,
        arch_list_found=arch_list,
        timings=timings,
        inventory=found,
        checks_run=tuple(runs) + ((cross_check.CHECK,) if cross else ()),
        partial=not set(registry.CHECKS) <= set(runs),
    )


def _cpp_result(
    future: Future[tuple[list[Finding], float]], runs: Sequence[str]
) -> tuple[list[Finding], float]:
    """The C++ consumer check's findings; a compiler it cannot find is a ToolError naming the check and
    how to run the others without it (fail closed: the check is not passed over in silence)."""
    try:
        return future.result()
    except ToolError as exc:
        others = ",".join(name for name in runs if name != cpp_consumer.CHECK)
        raise ToolError(
            f"{exc}: the C++ consumer check ({cpp_consumer.CHECK}) needs it to compile and link a program "
            f"against the wheel's C++ SDK; install gcc and g++ (Debian: apt-get install gcc g++), or run the "
            f"other checks without it: --checks {others}"
        ) from None


def _platform_tags(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The platform tags of a wheel's file name; () when it is not a wheel's (open_wheel says so)."""
    try:
        tags = parse_wheel_filename(Path(path).name)[3]
    except InvalidWheelFilename:
        return ()
    return tuple(sorted({t.platform for t in tags}))


def _start_abi(
    pool: ThreadPoolExecutor, wheel: WheelFile, libs: Sequence[Library], expectation: Expectation
) -> Future[AbiReport] | None:
    """The platform analysis of the host libraries, in ``pool``, when the hygiene check runs."""
    if not expectation.runs(hygiene.CHECK):
        return None
    host = [lib for lib in libs if lib.device_file is None]
    exclude = (*loader.exclusion_patterns(expectation.cuda_packages), *expectation.provided_libraries)
    return pool.submit(_abi, wheel, host, exclude)


def _abi(wheel: WheelFile, host: list[Library], exclude: tuple[str, ...]) -> AbiReport:
    from release.audit.abi.analysis import analyze_abi  # auditwheel's policies: beside the other checks

    return analyze_abi(wheel.root, wheel.filename, wheel.platform_tags, host, exclude, graded="claimed")
