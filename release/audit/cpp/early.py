"""The C++ consumer check as the audit runs it: started early, read from and kept in its cache.

:class:`EarlyCpp` starts the check's compile steps while the wheel's libraries are still being
unpacked (they need only an include directory's headers); :func:`cached_check` runs the check beside
the inspection of the libraries, reading its findings back from :mod:`release.audit.cpp.cache` when
the same inputs were checked before; :func:`fresh_check` is the check itself on the libraries' ELF
headers. :func:`release.audit.run.audit_wheel` calls them.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from release.audit.cpp import cache, consumer, target
from release.audit.cpp.sdk import sdk_dirs
from release.audit.model import Contents, Expectation, Finding, Library, Member, WheelFile, is_library_name
from release.binary.elf import ElfError, read_elf
from release.core.errors import ToolError

__all__ = ["EarlyCpp", "cached_check", "fresh_check"]


class EarlyCpp:
    """The C++ consumer check's compile steps, started while the libraries are still being unpacked:
    they need only an include directory's headers (:func:`release.audit.cpp.consumer.prepare`). Started
    for each include directory all of whose members are out and whose ``lib``/``lib64`` sibling holds
    a file, with the compilers of the architecture the wheel's ``platform_tags`` name
    (:mod:`release.audit.cpp.target`); the check uses a result only for an SDK with the same directory,
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
        self.target = target.decide(platform_tags, ())
        self.arch = target.tag_arch(platform_tags)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpp")
        self.futures: dict[tuple[str, tuple[str, ...]], Future[consumer.Prepared]] = {}

    def start(self, members: list[Member], pending: frozenset[str]) -> None:
        if not self.wanted:
            return
        if self.folder is not None:
            sdk = cache.sdk_key(members, self.train, os.environ, pending, arch=self.arch)
            if sdk is not None and cache.seen(self.folder, sdk):
                return
        for include_dir, (headers, _libs) in sdk_dirs(members, pending).items():
            if any(n.startswith(include_dir + "/") for n in pending):
                continue  # a member under it is still being read
            key = (include_dir, headers)
            self.futures[key] = self._pool.submit(self._prepare, include_dir, headers, members)

    def _prepare(
        self, include_dir: str, headers: tuple[str, ...], members: list[Member]
    ) -> consumer.Prepared:
        return consumer.prepare(include_dir, headers, members, target.toolchain(self.target))

    def prepared(self) -> dict[tuple[str, tuple[str, ...]], consumer.Prepared]:
        """The compiles done; one that found no compilers for the wheel's architecture is left to the
        check, which may not need them (an SDK library of another architecture is told without a tool)
        and otherwise stops the audit the same way."""
        out = {}
        for key, future in self.futures.items():
            if not isinstance(future.exception(), ToolError):
                out[key] = future.result()
        return out

    def __enter__(self) -> EarlyCpp:
        return self

    def __exit__(self, *_exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        for future in self.futures.values():
            if not future.cancelled() and future.exception() is None:
                future.result().cleanup()


def cached_check(
    wheel: WheelFile, expectation: Expectation, early: EarlyCpp, folder: Path | None = None
) -> tuple[list[Finding], float]:
    """The C++ consumer check, beside the inspection of the libraries: it reads only their ELF headers.
    Its findings read back from the cache ``folder`` when the same inputs were checked before, and kept
    there when final (:mod:`release.audit.cpp.cache`)."""
    t = time.perf_counter()
    arch = target.tag_arch(wheel.platform_tags)
    if arch is None:  # the target is told by the libraries' ELF machine: not kept (a rare wheel)
        folder = None
    keys = cache.keys(wheel.members, expectation.train, os.environ, arch=arch) if folder is not None else None
    if folder is not None and keys is not None:
        found = cache.load(folder, keys)
        if found is not None:
            return found, time.perf_counter() - t
    findings = fresh_check(wheel, expectation, early)
    if folder is not None and keys is not None:
        cache.store(folder, keys, findings)
    return findings, time.perf_counter() - t


def fresh_check(wheel: WheelFile, expectation: Expectation, early: EarlyCpp) -> list[Finding]:
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
    return consumer.check(Contents(wheel, tuple(libs)), expectation, prepared)
