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
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from release.audit import (
    cpp_cache,
    cpp_consumer,
    cpp_target,
    device_code,
    gpus,
    hygiene,
    libraries,
    loader,
    packages,
    standalone,
)
from release.audit.cpp_sdk import sdk_dirs
from release.audit.identity import check_identity
from release.audit.inspect import Inspector
from release.audit.inventory import inventory
from release.audit.model import (
    AbiReport,
    AuditResult,
    Contents,
    Expectation,
    Finding,
    Library,
    Member,
    WheelFile,
    fail,
    is_library_name,
    ok,
)
from release.audit.wheel import open_wheel
from release.binary.elf import ElfError, read_elf
from release.core.errors import InputError, ToolError, WheelwrightError
from release.core.machine import default_cache_dir

if TYPE_CHECKING:
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
        r
        for r in rows
        if r.variant == variant
        and any(r.serves(t.interpreter, t.abi) for t in tags)
        and r.platform_tag in platforms
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


def _cross_check_one(lib: Library, tool: Path, version: str) -> Finding:
    """One file against cuobjdump; a cuobjdump failure marks only this file's cross-check unavailable."""
    from release.binary import cuobjdump

    if lib.device_file == "ptx":
        return ok(
            "cross_check",
            f"{lib.name}: a PTX file; cuobjdump does not read those",
            lib.path,
            cuobjdump=version,
        )
    try:
        if lib.device_file is not None:
            entries = [e for fb in lib.fatbins for e in fb.entries]
            result = cuobjdump.cross_check(lib.file, cuobjdump=tool, entries=entries,
                                           headers=lib.device_file != "cubin")  # fmt: skip
        else:
            result = cuobjdump.cross_check(lib.file, cuobjdump=tool)
    except (WheelwrightError, OSError) as exc:
        why = str(exc).replace(str(lib.file), lib.path)
        return ok(
            "cross_check",
            f"{lib.name}: cross-check unavailable (cuobjdump could not list it: {why.splitlines()[0]}); "
            "the fatbin reader's table stands alone for this file",
            lib.path, cuobjdump=version, unavailable=True, error=why[-2000:],
        )  # fmt: skip
    if result.same_entries:
        return ok(
            "cross_check",
            f"{lib.name}: cuobjdump lists the same {len(result.theirs)} device code entries as the fatbin reader"
            + (" (and the same headers: variants, PTX ISA, compression)" if result.their_headers else ""),
            lib.path, cuobjdump=version,
        )  # fmt: skip
    return fail(
        "cross_check",
        f"{lib.name}: cuobjdump and the fatbin reader disagree: {'; '.join(result.differences())}",
        lib.path,
        cuobjdump=version,
    )


def _cross_check(contents: Contents, cache_dir: Path) -> list[Finding]:
    """Every ELF file and device code file, whether or not the reader found device code in it."""
    from release.binary import cuobjdump

    tool = cuobjdump.ensure_cuobjdump(cache_dir)
    version = cuobjdump.cuobjdump_version(tool)
    files = [lib for lib in contents.libraries if lib.elf is not None or lib.device_file is not None]
    out = [_cross_check_one(lib, tool, version) for lib in files if lib.fatbin_error is None]
    if not out:
        out.append(ok("cross_check", "no ELF or device code file to cross-check", cuobjdump=version))
    return out


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

    ``remember``: read and keep the C++ consumer's findings in the cache (:mod:`release.audit.cpp_cache`,
    under ``cache_dir``); None: unless ``WHEELWRIGHT_CPP_CACHE=0``.
    """
    timings: dict[str, float] = {}
    start = time.perf_counter()
    remember = cpp_cache.enabled(os.environ) if remember is None else remember
    folder = Path(cache_dir or default_cache_dir(os.environ)) / cpp_cache.FOLDER if remember else None
    early = _EarlyCpp(expectation.runs("cpp_consumer"), folder, expectation.train, _platform_tags(path))
    with (
        early,  # outermost: its scratch directories go after the check that uses them is done
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="audit") as pool,
        Inspector() as inspector,
    ):
        with open_wheel(path, on_extracted=inspector.submit, on_others_done=early.start) as wheel:
            timings["extract"] = time.perf_counter() - start
            check_identity(wheel)
            cpp_future = None
            if expectation.runs("cpp_consumer"):  # it needs only the headers and each library's ELF header
                cpp_future = pool.submit(_cpp_consumer, wheel, expectation, early, folder)
            t = time.perf_counter()
            claimed = expectation
            # the platform analysis needs no embedded images: it starts while they are searched for
            libs = inspector.libraries(wheel, embedded=False)
            timings["inspect"] = time.perf_counter() - t
            expectation = standalone.resolve(claimed, Contents(wheel, libs))
            abi_future = _start_abi(pool, wheel, libs, expectation)
            t = time.perf_counter()
            libs = inspector.libraries(wheel)
            timings["embedded_wait"] = time.perf_counter() - t
            contents = Contents(wheel, libs)
            if inspector.scan_failed:  # a library's inspection stopped at its scan: start again from it
                expectation = standalone.resolve(claimed, contents)
                if abi_future is not None:
                    abi_future.cancel()
                abi_future = _start_abi(pool, wheel, libs, expectation)
            runs = [name for name in CHECK_FUNCTIONS if expectation.runs(name)]
            findings: dict[str, list[Finding]] = {}
            for name in runs:
                if name in ("hygiene", "cpp_consumer"):
                    continue
                t = time.perf_counter()
                findings[name] = CHECK_FUNCTIONS[name](contents, expectation)
                timings[name] = time.perf_counter() - t
            cross = cross_check_cuobjdump or (
                expectation.checks is not None and "cross_check" in expectation.checks
            )
            if cross:
                t = time.perf_counter()
                findings["cross_check"] = _cross_check(
                    contents, Path(cache_dir or default_cache_dir(os.environ))
                )
                timings["cross_check"] = time.perf_counter() - t
            if cpp_future is not None:
                findings["cpp_consumer"], timings["cpp_consumer"] = cpp_future.result()
            if abi_future is not None:
                t = time.perf_counter()
                abi = abi_future.result()
                timings["abi_wait"] = time.perf_counter() - t
                timings["abi"] = abi.seconds
                contents = replace(contents, abi=abi)
                findings["hygiene"] = hygiene.check(contents, expectation)
            ordered = [f for name in (*CHECK_FUNCTIONS, "cross_check") for f in findings.get(name, [])]
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
        checks_run=tuple(runs) + (("cross_check",) if cross else ()),
    )


def _platform_tags(path: str | os.PathLike[str]) -> tuple[str, ...]:
    """The platform tags of a wheel's file name; () when it is not a wheel's (open_wheel says so)."""
    try:
        tags = parse_wheel_filename(Path(path).name)[3]
    except InvalidWheelFilename:
        return ()
    return tuple(sorted({t.platform for t in tags}))


class _EarlyCpp:
    """The C++ consumer check's compile steps, started while the libraries are still being unpacked:
    they need only an include directory's headers (:func:`release.audit.cpp_consumer.prepare`). Started
    for each include directory all of whose members are out and whose ``lib``/``lib64`` sibling holds
    a file, with the compilers of the architecture the wheel's ``platform_tags`` name
    (:mod:`release.audit.cpp_target`); the check uses a result only for an SDK with the same directory,
    headers and compilers. None started when the cache (``folder``) has findings for these headers on
    this machine: then the check most likely reads its finding back, and compiles (late) only if the
    libraries changed."""

    def __init__(
        self,
        wanted: bool,
        folder: Path | None = None,
        train: str | None = None,
        platform_tags: tuple[str, ...] = (),
    ) -> None:
        self.wanted, self.folder, self.train = wanted, folder, train
        self.target = cpp_target.decide(platform_tags, ())
        self.arch = cpp_target.tag_arch(platform_tags)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpp")
        self.futures: dict[tuple[str, tuple[str, ...]], Future[cpp_consumer.Prepared]] = {}

    def start(self, members: list[Member], pending: frozenset[str]) -> None:
        if not self.wanted:
            return
        if self.folder is not None:
            sdk = cpp_cache.sdk_key(members, self.train, os.environ, pending, arch=self.arch)
            if sdk is not None and cpp_cache.seen(self.folder, sdk):
                return
        for include_dir, (headers, _libs) in sdk_dirs(members, pending).items():
            if any(n.startswith(include_dir + "/") for n in pending):
                continue  # a member under it is still being read
            key = (include_dir, headers)
            self.futures[key] = self._pool.submit(self._prepare, include_dir, headers, members)

    def _prepare(
        self, include_dir: str, headers: tuple[str, ...], members: list[Member]
    ) -> cpp_consumer.Prepared:
        return cpp_consumer.prepare(include_dir, headers, members, cpp_target.toolchain(self.target))

    def prepared(self) -> dict[tuple[str, tuple[str, ...]], cpp_consumer.Prepared]:
        """The compiles done; one that found no compilers for the wheel's architecture is left to the
        check, which may not need them (an SDK library of another architecture is told without a tool)
        and otherwise stops the audit the same way."""
        out = {}
        for key, future in self.futures.items():
            if not isinstance(future.exception(), ToolError):
                out[key] = future.result()
        return out

    def __enter__(self) -> _EarlyCpp:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for future in self.futures.values():
            if not future.cancelled() and future.exception() is None:
                future.result().cleanup()


def _cpp_consumer(
    wheel: WheelFile, expectation: Expectation, early: _EarlyCpp, folder: Path | None = None
) -> tuple[list[Finding], float]:
    """The C++ consumer check, beside the inspection of the libraries: it reads only their ELF headers.
    Its findings read back from the cache ``folder`` when the same inputs were checked before, and kept
    there when final (:mod:`release.audit.cpp_cache`)."""
    t = time.perf_counter()
    arch = cpp_target.tag_arch(wheel.platform_tags)
    if arch is None:  # the target is told by the libraries' ELF machine: not kept (a rare wheel)
        folder = None
    keys = (
        cpp_cache.keys(wheel.members, expectation.train, os.environ, arch=arch)
        if folder is not None
        else None
    )
    if folder is not None and keys is not None:
        found = cpp_cache.load(folder, keys)
        if found is not None:
            return found, time.perf_counter() - t
    findings = _cpp_findings(wheel, expectation, early)
    if folder is not None and keys is not None:
        cpp_cache.store(folder, keys, findings)
    return findings, time.perf_counter() - t


def _cpp_findings(wheel: WheelFile, expectation: Expectation, early: _EarlyCpp) -> list[Finding]:
    prepared = early.prepared()
    libs = []
    for member in wheel.members:
        if (
            member.path is not None
            and member.kind == "file"
            and (member.is_elf or is_library_name(member.name))
        ):
            try:
                info = read_elf(member.path)
            except ElfError:
                continue
            libs.append(Library(member.name, member.path, member.sha256, info, None, False, (), None))
    return cpp_consumer.check(Contents(wheel, tuple(libs)), expectation, prepared)


def _start_abi(
    pool: ThreadPoolExecutor, wheel: WheelFile, libs: Sequence[Library], expectation: Expectation
) -> Future[AbiReport] | None:
    """The platform analysis of the host libraries, in ``pool``, when the hygiene check runs."""
    if not expectation.runs("hygiene"):
        return None
    host = [lib for lib in libs if lib.device_file is None]
    exclude = (*loader.exclusion_patterns(expectation.cuda_packages), *expectation.provided_libraries)
    return pool.submit(_abi, wheel, host, exclude)


def _abi(wheel: WheelFile, host: list[Library], exclude: tuple[str, ...]) -> AbiReport:
    from release.audit.abi import analyze_abi  # auditwheel's policies: imported beside the other checks

    return analyze_abi(wheel.root, wheel.filename, wheel.platform_tags, host, exclude, graded="claimed")
