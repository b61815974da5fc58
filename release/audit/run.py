"""Audit one wheel: extract, inspect, analyse, run every check, return every finding.

The effects happen here, in order and in parallel where they can:

1. :func:`release.audit.wheel.open_wheel` extracts and hashes every member (threads);
2. every ELF file is inspected once (:mod:`release.audit.inspect`), and the platform-tag
   analysis (:mod:`release.audit.abi`: auditwheel's policies, wheelwright's ELF reader)
   starts in a thread on the inspected files;
3. the checks run (``cpp_consumer`` runs g++); ``hygiene`` last, once the analysis is in.

The checks themselves are functions ``check(contents, expectation) -> list[Finding]``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.audit import (
    cpp_consumer,
    device_code,
    gpus,
    hygiene,
    libraries,
    loader,
    packages,
)
from release.audit.abi import analyze_abi
from release.audit.identity import check_identity
from release.audit.inspect import inspect_libraries
from release.audit.model import AuditResult, Contents, Expectation, Finding, fail, ok
from release.audit.wheel import open_wheel
from release.core.errors import InputError
from release.policy.matrix import Row
from release.policy.model import Policy

__all__ = ["CHECK_FUNCTIONS", "audit_wheel", "expectation_for_wheel"]

CheckFunction = Callable[[Contents, Expectation], list[Finding]]
CHECK_FUNCTIONS: dict[str, CheckFunction] = {
    "libraries": libraries.check,
    "device_code": device_code.check,
    "gpus": gpus.check,
    "packages": packages.check,
    "loader": loader.check,
    "hygiene": hygiene.check,
    "cpp_consumer": cpp_consumer.check,
}


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
        r for r in rows if r.variant == variant and r.python_tag in pythons and r.platform_tag in platforms
    ]
    if len(matches) == 1:
        return Expectation.from_row(matches[0])
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


def _cross_check(contents: Contents, cache_dir: Path) -> list[Finding]:
    from release.audit import cuobjdump

    tool = cuobjdump.ensure_cuobjdump(cache_dir)
    version = cuobjdump.cuobjdump_version(tool)
    out: list[Finding] = []
    for lib in contents.device_libraries:
        if lib.fatbin_error is not None:
            continue
        result = cuobjdump.cross_check(lib.file, cuobjdump=tool)
        if result.same_entries:
            out.append(
                ok(
                    "cross_check",
                    f"{lib.name}: cuobjdump lists the same {len(result.theirs)} device code entries as the "
                    "fatbin reader",
                    lib.path,
                    cuobjdump=version,
                )
            )
        else:
            out.append(
                fail(
                    "cross_check",
                    f"{lib.name}: cuobjdump and the fatbin reader disagree: {'; '.join(result.differences())}",
                    lib.path,
                    cuobjdump=version,
                )
            )
    if not out:
        out.append(ok("cross_check", "no device code to cross-check", cuobjdump=version))
    return out


def default_cache_dir() -> Path:
    env = os.environ.get("WHEELWRIGHT_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "wheelwright"


def audit_wheel(
    path: str | os.PathLike[str],
    expectation: Expectation,
    *,
    cross_check_cuobjdump: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
) -> AuditResult:
    """Audit one wheel against an expectation. InputError (exit 2) if it cannot be read."""
    timings: dict[str, float] = {}
    start = time.perf_counter()
    exclude = loader.exclusion_patterns(expectation.cuda_packages)
    with open_wheel(path) as wheel, ThreadPoolExecutor(max_workers=1, thread_name_prefix="abi") as pool:
        timings["extract"] = time.perf_counter() - start
        check_identity(wheel)
        t = time.perf_counter()
        libs = inspect_libraries(wheel)
        timings["inspect"] = time.perf_counter() - t
        abi_future = pool.submit(
            analyze_abi, wheel.root, wheel.filename, wheel.platform_tags, libs, exclude, graded="claimed"
        )
        contents = Contents(wheel, libs)
        findings: dict[str, list[Finding]] = {}
        for name, function in CHECK_FUNCTIONS.items():
            if name == "hygiene":
                continue
            t = time.perf_counter()
            findings[name] = function(contents, expectation)
            timings[name] = time.perf_counter() - t
        if cross_check_cuobjdump:
            t = time.perf_counter()
            findings["cross_check"] = _cross_check(contents, Path(cache_dir or default_cache_dir()))
            timings["cross_check"] = time.perf_counter() - t
        t = time.perf_counter()
        abi = abi_future.result()
        timings["abi_wait"] = time.perf_counter() - t
        timings["abi"] = abi.seconds
        contents = replace(contents, abi=abi)
        findings["hygiene"] = hygiene.check(contents, expectation)
        ordered = [f for name in (*CHECK_FUNCTIONS, "cross_check") for f in findings.get(name, [])]
        table = gpus.gpu_table(contents, expectation)
        arch_list = device_code.arch_list_found(contents)
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
    )
