"""Remember the C++ consumer check's findings: the same inputs give the same finding, so an audit that
has seen them does not run the compiler again (as ccache skips a compile it has seen).

A finding is kept under a key of everything it depends on:

* the check's own code and wheelwright's version: the bytes of every ``.py`` and ``.toml`` file of the
  ``release`` package (:func:`code_files`). A superset of the check's import closure on purpose (the
  closure, with the CUDA tables it reads, is about half of release/; tests/unit/test_audit_cpp_cache.py
  computes the closure from the import statements and holds that touching any module in it changes
  the key), so no hand-kept list can go stale;
* the wheel's SDKs: every member under an ``include`` directory with a ``lib``/``lib64`` sibling, and
  the members of those siblings, by name and sha256 (the digests the audit computed for the RECORD
  check anyway); the wheel's METADATA (its CUDA packages name a CUDA major); the claim's CUDA train;
* the CPU architecture the consumer builds for (the platform tag's, :mod:`release.audit.cpp.target`) and
  this machine's;
* this machine, by fingerprint: the compilers and linker for that architecture (``g++``, ``gcc``, ``ld``
  natively; ``aarch64-linux-gnu-g++``, ``-gcc``, ``-ld`` for an aarch64 wheel on x86_64) and ``nvcc``, as
  PATH finds them (real path, size, modification time), ``CUDA_HOME``'s nvcc, the variables the CUDA header search reads
  (:func:`release.audit.cpp.cuda_headers.cuda_env`), the PyPI toolchains in the wheelwright cache, the CUDA
  package folders of the site, and the package database (dpkg, rpm, apk), which changes with every
  install or upgrade, the system's headers included.

Only final findings are kept: passes, and failures the compiler or linker gave by their exit code
(``repeatable`` in their details). A limit hit (time, memory), a tool missing or CUDA headers missing
are checked again next time. A finding read back says so (``cached: true`` in its details).

Entries: ``<cache>/cpp-consumer/<sdk key>/<key>.json``, a few kilobytes each, the newest
:data:`KEEP` per SDK key. ``WHEELWRIGHT_CPP_CACHE=0`` or ``audit --no-cache`` turns it off.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.audit.cpp.sdk import sdk_dirs
from release.audit.cpp.target import tool_names
from release.audit.model import Finding, Member
from release.resources.cpus import host_arch

__all__ = [
    "CACHE_ENV",
    "ENTRY_BYTES",
    "FOLDER",
    "KEEP",
    "Keys",
    "code_files",
    "digest_files",
    "enabled",
    "final",
    "fingerprint",
    "keys",
    "load",
    "sdk_key",
    "seen",
    "store",
]

CACHE_ENV = "WHEELWRIGHT_CPP_CACHE"
FOLDER = "cpp-consumer"
KEEP = 16  # entries per SDK key (a wheel's libraries change from build to build; its headers less)
_PACKAGE_DATABASES = ("/var/lib/dpkg/status", "/var/lib/rpm", "/lib/apk/db/installed")
ENTRY_BYTES = 4 * 1024 * 1024  # an entry read back: a few kilobytes; more is not one of ours


def enabled(environ: Mapping[str, str]) -> bool:
    return environ.get(CACHE_ENV, "1").strip() not in ("0", "false", "no", "off")


def code_files() -> list[Path]:
    """The files whose bytes may decide the check's findings: every module and data file of the
    ``release`` package. Not a hand-kept list of what the check imports (that list went stale: the
    modules choosing the CUDA headers were missing from it); any change to wheelwright's code or
    tables starts a new key, which costs one compile and can never serve a stale finding."""
    package = Path(__file__).resolve().parents[2]  # release/ (this is release/audit/cpp/cache.py)
    return sorted(p for p in package.rglob("*") if p.suffix in (".py", ".toml") and p.is_file())


def digest_files(paths: Iterable[Path], version: str) -> str:
    h = hashlib.sha256(version.encode() + b"\0")
    for path in paths:
        h.update(f"{path.parent.name}/{path.name}".encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


@functools.cache
def _code() -> str:
    """The check's own code and wheelwright's version: a new version never reads an old finding."""
    from importlib import metadata

    try:
        version = metadata.version("wheelwright")
    except metadata.PackageNotFoundError:
        version = "unknown"
    return digest_files(code_files(), version)


def _stat(path: str | os.PathLike[str] | None) -> tuple[str, int, int] | None:
    if path is None:
        return None
    try:
        real = Path(path).resolve()
        st = real.stat()
    except OSError:
        return None
    return (str(real), st.st_size, st.st_mtime_ns)


def fingerprint(environ: Mapping[str, str], arch: str | None = None) -> list[Any]:
    """What of this machine a finding depends on, cheaply (stat calls, no tool run), for a wheel of CPU
    architecture ``arch`` (None: this machine's). Effects: reads."""
    from release.audit.cpp.cuda_headers import cuda_env, cuda_sites, pypi_manifests

    path = environ.get("PATH", "")
    gcc, gxx, ld = tool_names(arch)
    parts: list[Any] = [["target", arch or host_arch(), host_arch()]]
    parts += [[tool, _stat(shutil.which(tool, path=path))] for tool in (gxx, gcc, ld, "nvcc")]
    home = environ.get("CUDA_HOME")
    if home:
        parts.append(["CUDA_HOME", _stat(Path(home) / "bin" / "nvcc"), _stat(Path(home) / "include")])
    parts.append([list(kv) for kv in cuda_env(environ)])
    parts.append([_stat(p) for p in pypi_manifests(environ)])
    parts.append([[site, _stat(Path(site) / "nvidia")] for site in cuda_sites(environ)])
    parts.append([_stat(db) for db in _PACKAGE_DATABASES])
    return parts


def _digest(member: Member) -> str:
    return member.sha256.hex() if member.sha256 is not None else f"unread:{member.kind}:{member.problem}"


def sdk_key(
    members: Sequence[Member],
    train: str | None,
    environ: Mapping[str, str],
    pending: Iterable[str] = (),
    *,
    arch: str | None = None,
) -> str | None:
    """The key of what the finding depends on but the SDKs' libraries: known once the headers are out
    (``pending``: names still being unpacked, the libraries). ``arch``: the CPU architecture the consumer
    builds for (None: this machine's). None: the wheel has no SDK."""
    sdks = sdk_dirs(members, pending)
    if not sdks:
        return None
    h = hashlib.sha256()
    h.update(json.dumps([_code(), fingerprint(environ, arch), train], sort_keys=True).encode())
    for include_dir in sdks:
        under = sorted((m.name, _digest(m)) for m in members if m.name.startswith(include_dir + "/"))
        h.update(json.dumps([include_dir, under]).encode())
    metadata = [(m.name, _digest(m)) for m in members if m.name.endswith(".dist-info/METADATA")]
    h.update(json.dumps(sorted(metadata)).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class Keys:
    """The SDK key and the whole key (the SDKs' libraries too) of one wheel's C++ consumer finding."""

    sdk: str
    whole: str


def keys(
    members: Sequence[Member], train: str | None, environ: Mapping[str, str], *, arch: str | None = None
) -> Keys | None:
    """Both keys, once every member is out (``arch``: as :func:`sdk_key`'s). None: no SDK (nothing worth
    remembering)."""
    sdk = sdk_key(members, train, environ, arch=arch)
    if sdk is None:
        return None
    libs = [
        (m.name, _digest(m))
        for _headers, libs in sdk_dirs(members).values()
        for m in members
        if posixpath.dirname(m.name) in libs
    ]
    whole = hashlib.sha256(json.dumps([sdk, sorted(libs)]).encode()).hexdigest()
    return Keys(sdk, whole)


def seen(folder: Path, sdk: str) -> bool:
    """Whether findings were kept for these headers on this machine (then a hit is likely)."""
    return (folder / sdk).is_dir()


def load(folder: Path, key: Keys) -> list[Finding] | None:
    """The findings kept for ``key``, each marked ``cached``; None when none (or unreadable)."""
    try:
        with (folder / key.sdk / f"{key.whole}.json").open("rb") as f:
            raw = f.read(ENTRY_BYTES + 1)
        data = json.loads(raw) if len(raw) <= ENTRY_BYTES else None
    except (OSError, ValueError):
        return None
    if (
        not isinstance(data, dict)
        or data.get("key") != key.whole
        or not isinstance(data.get("findings"), list)
    ):
        return None
    try:
        return [
            Finding(f["check"], bool(f["ok"]), f["message"], f["library"], {**f["details"], "cached": True})
            for f in data["findings"]
        ]
    except (KeyError, TypeError):
        return None


def final(findings: Sequence[Finding]) -> bool:
    """Whether the findings would be the same next time: passes, and failures by exit code."""
    return bool(findings) and all(f.ok or f.details.get("repeatable") is True for f in findings)


def store(folder: Path, key: Keys, findings: Sequence[Finding]) -> bool:
    """Keep final ``findings`` (atomically; the oldest beyond :data:`KEEP` go). Whether kept. Never
    raises for a cache that cannot be written: the audit's result stands without it."""
    if not final(findings):
        return False
    where = folder / key.sdk
    try:
        where.mkdir(parents=True, exist_ok=True)
        body = json.dumps({"key": key.whole, "findings": [f.to_json() for f in findings]}, sort_keys=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".json", dir=where)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(body)
            Path(tmp).replace(where / f"{key.whole}.json")
        finally:
            Path(tmp).unlink(missing_ok=True)
        entries = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
        for old in entries[KEEP:]:
            old.unlink(missing_ok=True)
    except (OSError, TypeError, ValueError):
        return False
    return True
