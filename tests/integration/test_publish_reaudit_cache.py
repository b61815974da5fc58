"""Caches are never permissions: publish's audit again runs without the C++ consumer's cache
(release/publish/guards/reverify.py, release/audit/cpp/cache.py), against the real local index.

A real wheel whose SDK header does not compile (fx.h: a declaration without its ``;``, beside a
library gcc builds here) is audited with the cache on, as ``python -m release audit`` does; its
cache entry is then edited to say the C++ consumer passed, and the audit run again believes it
and writes a passing record. Publish refuses the wheel, naming the compiler's error, and leaves
the cache entry as it was; the same wheel with a header that compiles publishes.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path

import pytest
from helpers.index import (
    PROJECT,
    publish_policy,
    release_wheel,
    row_of,
)

from release.audit.cpp import cache as cpp_cache
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
C_API = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'
BROKEN = C_API % "int fx_version(void)"  # no ';': no C++ program including it compiles
GOOD = C_API % "int fx_version(void);"


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The C++ consumer cache on (tests turn it off), in this test's folder."""
    folder = tmp_path / "cache"
    monkeypatch.setenv(cpp_cache.CACHE_ENV, "1")
    monkeypatch.setenv(CACHE_VAR, str(folder))
    return folder / cpp_cache.FOLDER


def _sdk_wheel(tmp_path: Path, policy: Policy, header: str, version: str) -> Path:
    """The row's real wheel, plus an SDK: wwdemo/include/fx.h and wwdemo/lib/libfx.so (gcc, here)."""
    src = tmp_path / "fx.c"
    src.write_text("int fx_version(void) { return 1; }\n", encoding="utf-8")
    lib = tmp_path / "libfx.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True, timeout=120)
    extra = {"wwdemo/include/fx.h": header.encode(), "wwdemo/lib/libfx.so": lib.read_bytes()}
    return release_wheel(tmp_path / "dist", policy, ROW, version=version, extra=extra, audit=False)


def _audit(wheel: Path, policy: Policy) -> AuditResult:
    """`python -m release audit` of the wheel: the cache as the environment says (on, here); the record."""
    exp = dataclasses.replace(Expectation.from_row(row_of(policy, ROW)), policy_sha256=policy.sha256)
    result = audit_wheel(wheel, exp)
    write_record(result)
    return result


def _cpp(result: AuditResult, header: str = "wwdemo/include") -> list[dict[str, object]]:
    return [f.to_json() for f in result.findings if f.check == "cpp_consumer" and header in f.message]


def _publish(wheel: Path, policy: Policy, index: LocalIndex) -> object:
    return publish([wheel], index.target(), variant="cu130", policy=policy,
                   env=index.credentials_env("cu130"), log=lambda line: None)  # fmt: skip


def test_publish_refuses_a_wheel_whose_cache_entry_was_edited_to_pass(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, cache: Path
) -> None:
    wheel = _sdk_wheel(tmp_path, policy, BROKEN, "1.5.0")
    first = _audit(wheel, policy)
    (finding,) = _cpp(first)
    assert not finding["ok"] and "does not compile" in str(finding["message"])
    (entry,) = cache.glob("*/*.json")  # the failing finding, kept (the compiler's exit code: final)

    data = json.loads(entry.read_text(encoding="utf-8"))
    for kept in data["findings"]:
        kept.update(ok=True, message="a C++ program outside the wheel compiles against wwdemo/include")
    entry.write_text(json.dumps(data), encoding="utf-8")
    edited = entry.read_bytes()
    believed = _audit(wheel, policy)  # the audit with the cache believes the edited entry
    assert believed.passed and all(f["details"].get("cached") for f in _cpp(believed))  # type: ignore[attr-defined]

    with pytest.raises(CheckFailed) as info:
        _publish(wheel, policy, local_index_server)
    message = str(info.value)
    assert f"{wheel.name}: publish ran the audit again on the exact bytes it would upload" in message
    assert "[cpp_consumer] a C++ program including ['wwdemo/include/fx.h'] does not compile" in message
    assert "expected initializer before '}' token" in message and "[rule: re-audit]" in message
    assert remote_hashes(local_index_server.simple_url("cu130"), PROJECT) == {}
    assert entry.read_bytes() == edited and list(cache.glob("*/*.json")) == [
        entry
    ]  # neither read nor written


def test_the_same_wheel_with_a_header_that_compiles_publishes_with_the_cache_on(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, cache: Path
) -> None:
    wheel = _sdk_wheel(tmp_path, policy, GOOD, "1.5.1")
    assert _audit(wheel, policy).passed
    report = _publish(wheel, policy, local_index_server)
    assert report.uploaded == (wheel.name,)  # type: ignore[attr-defined]
    assert set(remote_hashes(local_index_server.simple_url("cu130"), PROJECT)) == {wheel.name}
