"""Caches are never permissions: publish's audit again reads auditwheel's policies from the installed
auditwheel, never from the copy kept in wheelwright's cache folder (release/audit/abi/manylinux_cache.py,
release/publish/guards/reverify.py), against the real local index.

A real wheel under a manylinux_2_28 tag carries a library gcc links here against ``libcrypto.so.3``,
which no manylinux policy allows. The audit, as ``python -m release audit`` runs it, fails it; the
cached policies file is then edited to allow ``libcrypto.so.3``, and the audit run again believes it
and writes a passing record. Publish refuses the wheel, naming the library, and leaves the cached
file as it was; a wheel without that library publishes with the edited file still there.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.index import PROJECT, publish_policy, release_wheel, row_of

from release.audit.abi import manylinux_cache
from release.audit.model import AuditResult, Expectation
from release.audit.report.record import write_record
from release.audit.run import audit_wheel
from release.core.errors import CheckFailed
from release.core.machine import CACHE_VAR
from release.policy.model import Policy
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex
from release.publish.upload import publish

pytestmark = pytest.mark.integration
ROW = "cu130-py312-x86_64"
SOURCE = "extern unsigned int OPENSSL_version_major(void);\nint ww_crypto(void) { return (int)OPENSSL_version_major(); }\n"


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """wheelwright's cache folder in this test's folder; the policies read again from it."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_VAR, str(folder))
    manylinux_cache._load.cache_clear()
    yield folder
    manylinux_cache._load.cache_clear()


def _crypto_wheel(tmp_path: Path, policy: Policy) -> Path:
    src = tmp_path / "crypto.c"
    src.write_text(SOURCE, encoding="utf-8")
    lib = tmp_path / "libwwcrypto.so"
    subprocess.run(
        ["gcc", "-shared", "-fPIC", "-o", str(lib), str(src), "-l:libcrypto.so.3"], check=True, timeout=120
    )
    return release_wheel(
        tmp_path / "dist", policy, ROW, extra={"wwdemo/libwwcrypto.so": lib.read_bytes()}, audit=False
    )


def _audit(wheel: Path, policy: Policy) -> AuditResult:
    """`python -m release audit` of the wheel (the policies' cache as it is); the record written."""
    exp = dataclasses.replace(Expectation.from_row(row_of(policy, ROW)), policy_sha256=policy.sha256)
    result = audit_wheel(wheel, exp)
    write_record(result)
    return result


def _crypto_findings(result: AuditResult) -> list[str]:
    return [f.message for f in result.findings if not f.ok and "libcrypto.so.3" in f.message]


def _allow_libcrypto(cache: Path) -> Path:
    """Edit every cached manylinux policy to allow libcrypto.so.3, as anyone with this user's rights can."""
    path = manylinux_cache.cache_file("glibc", "x86_64", cache)
    assert path is not None and path.is_file()
    data = json.loads(path.read_text(encoding="utf-8"))
    for p in data:
        p["whitelist"] = sorted({*p["whitelist"], "libcrypto.so.3"})
    path.write_text(json.dumps(data), encoding="utf-8")
    manylinux_cache._load.cache_clear()  # a new process: the file read again
    return path


def test_publish_refuses_a_library_an_edited_policies_cache_allows(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, cache: Path
) -> None:
    wheel = _crypto_wheel(tmp_path, policy)
    first = _audit(wheel, policy)
    assert not first.passed and _crypto_findings(first), [f.message for f in first.findings if not f.ok]
    path = _allow_libcrypto(cache)
    edited = path.read_bytes()
    believed = _audit(wheel, policy)  # the audit that reads the cache believes the edited file
    assert believed.passed and not _crypto_findings(believed)

    with pytest.raises(CheckFailed) as info:
        publish([wheel], local_index_server.target(), variant="cu130", policy=policy,
                env=local_index_server.credentials_env("cu130"), log=lambda line: None)  # fmt: skip
    message = str(info.value)
    assert f"{wheel.name}: publish ran the audit again on the exact bytes it would upload" in message
    assert "libcrypto.so.3" in message and "[rule: re-audit]" in message
    assert remote_hashes(local_index_server.simple_url("cu130"), PROJECT) == {}
    assert path.read_bytes() == edited  # neither trusted nor rewritten


def test_a_wheel_without_that_library_publishes_with_the_edited_cache_there(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, cache: Path
) -> None:
    wheel = release_wheel(tmp_path / "dist", policy, ROW, audit=False)
    assert _audit(wheel, policy).passed
    _allow_libcrypto(cache)
    assert _audit(wheel, policy).passed
    report = publish([wheel], local_index_server.target(), variant="cu130", policy=policy,
                     env=local_index_server.credentials_env("cu130"), log=lambda line: None)  # fmt: skip
    assert report.uploaded == (wheel.name,)
    assert set(remote_hashes(local_index_server.simple_url("cu130"), PROJECT)) == {wheel.name}
