"""auditwheel's policies, read once per process and kept on disk once per auditwheel release. Effects.

:func:`policies_of` is where the platform analysis (:mod:`release.audit.abi.analysis`) gets its
:class:`~release.audit.abi.manylinux.Policies`: from ``<cache>/auditwheel-policies/`` when a readable
file of the installed auditwheel release is there (reading it takes 2 ms; importing auditwheel's
policy stack about 0.1 s of CPU), else from auditwheel's public ``auditwheel.policy.WheelPolicies``,
then written there for the next audit. What the file holds and how it is checked on the way back
(:func:`~release.audit.abi.manylinux.to_data`, :func:`~release.audit.abi.manylinux.from_data`) is pure and
lives with the policies in :mod:`release.audit.abi.manylinux`; this module is the I/O around it:

* a file over :data:`CACHE_CAP`, or one that does not parse (corrupt, foreign, nested deep enough to
  exhaust the parser), is replaced, never trusted;
* an unwritable cache only costs the next audit the import;
* musl's policies (auditwheel keeps only the host's own musl policy) and Android's (read from the
  wheel) are never cached: a file from another host or wheel would lie;
* a cache is no permission: inside :func:`cold` (publish's audit again, a gate) the policies come
  from the installed auditwheel only, and the file is neither read nor written. Anyone with this
  user's rights can edit the file (a policy that allows ``libcrypto.so.3``): only the audits a
  person reads (``python -m release audit``, the release's audit stage) read it.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from release.audit.abi.manylinux import PlatformPolicy, Policies, from_data, to_data

__all__ = ["CACHE_CAP", "CACHE_FORMAT", "cache_file", "cold", "policies_of"]

CACHE_FORMAT = 1  # the layout of a cached policies file; a change makes new file names
CACHE_CAP = 16 << 20  # a cached policies file is about 100 KiB; a bigger one is not ours
_cold = [0]  # how many cold() blocks are open, in any thread (the audit reads policies in its pool)
_cold_lock = threading.Lock()


@contextlib.contextmanager
def cold() -> Iterator[None]:
    """Inside, :func:`policies_of` reads the installed auditwheel only, never the cache file (the
    process-wide switch: the audit asks from its worker threads). For a gate's audit."""
    with _cold_lock:
        _cold[0] += 1
    try:
        yield
    finally:
        with _cold_lock:
            _cold[0] -= 1


def _from_auditwheel(libc: str, arch: str, android_wheel: str | None) -> Policies:
    """auditwheel's policies through its public ``WheelPolicies``, frozen (imports auditwheel)."""
    from auditwheel.architecture import Architecture
    from auditwheel.libc import Libc
    from auditwheel.policy import WheelPolicies

    policies = WheelPolicies(
        libc=Libc(libc), arch=Architecture(arch), wheel_fn=Path(android_wheel) if android_wheel else None
    )
    return Policies(
        tuple(
            PlatformPolicy(
                name=p.name,
                aliases=tuple(p.aliases),
                priority=p.priority,
                symbol_versions={k: frozenset(v) for k, v in p.symbol_versions.items()},
                whitelist=frozenset(p.whitelist),
                blacklist={k: frozenset(v) for k, v in p.blacklist.items()},
            )
            for p in policies
        )
    )


def cache_file(libc: str, arch: str, cache_dir: Path) -> Path | None:
    """Where the frozen policies of this auditwheel release (by its installed distribution's
    version, found without importing it) are kept; None when it cannot be told."""
    spec = importlib.util.find_spec("auditwheel")
    if spec is None or spec.origin is None:
        return None
    dists = sorted(Path(spec.origin).parent.parent.glob("auditwheel-*.dist-info"))
    if len(dists) != 1:
        return None
    version = dists[0].name[len("auditwheel-") : -len(".dist-info")]
    return cache_dir / "auditwheel-policies" / f"v{CACHE_FORMAT}-auditwheel-{version}-{libc}-{arch}.json"


@functools.cache
def _load(libc: str, arch: str, android_wheel: str | None, trust_file: bool) -> Policies:
    """auditwheel's policies, frozen; from the cache file of this auditwheel release when there is
    a readable one and ``trust_file``, else from auditwheel, then cached (when ``trust_file``). A
    file that does not parse is replaced, never trusted."""
    if android_wheel is not None or libc != "glibc" or not trust_file:  # musl's: the host's own musl
        return _from_auditwheel(libc, arch, android_wheel)
    from release.core.machine import default_cache_dir

    path = cache_file(libc, arch, default_cache_dir(os.environ))
    if path is not None:
        try:
            with path.open("rb") as f:
                raw = f.read(CACHE_CAP + 1)
            if len(raw) <= CACHE_CAP:
                return from_data(json.loads(raw))
        except (OSError, ValueError, RecursionError):
            pass
    policies = _from_auditwheel(libc, arch, None)
    if path is not None:
        from release.core.errors import StepFailed
        from release.core.files import write_atomic

        with contextlib.suppress(StepFailed):  # an unwritable cache only costs the next audit the import
            write_atomic(
                path, json.dumps(to_data(policies), sort_keys=True), what="the policies cache", parents=True
            )
    return policies


def policies_of(libc: str, arch: str, wheel_name: str | None = None) -> Policies:
    """auditwheel's policies for a libc (``glibc``, ``musl``) and architecture, read once (inside
    :func:`cold`: from the installed auditwheel, once)."""
    return _load(libc, arch, wheel_name if libc == "android" else None, _cold[0] == 0)
