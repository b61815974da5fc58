"""auditwheel's policies, frozen once per auditwheel release into the wheelwright cache: a cached
file gives exactly what auditwheel's public WheelPolicies gives; a corrupt or foreign file is
replaced, never trusted; the file is named by the installed auditwheel's version."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from release.audit.abi import manylinux_cache as policy_cache
from release.audit.abi.manylinux import Policies, from_data, to_data
from release.audit.abi.manylinux_cache import _from_auditwheel, cache_file


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("WHEELWRIGHT_CACHE", str(tmp_path))
    policy_cache._load.cache_clear()
    yield tmp_path
    policy_cache._load.cache_clear()


def _same(a: Policies, b: Policies) -> bool:
    return to_data(a) == to_data(b)


def test_the_cache_round_trips_auditwheels_policies_exactly(cache: Path) -> None:
    fresh = _from_auditwheel("glibc", "x86_64", None)
    assert len(fresh.ordered) > 10 and _same(from_data(json.loads(json.dumps(to_data(fresh)))), fresh)
    first = policy_cache.policies_of("glibc", "x86_64")
    path = cache_file("glibc", "x86_64", cache)
    assert path is not None and path.is_file()
    import importlib.metadata

    assert f"auditwheel-{importlib.metadata.version('auditwheel')}-glibc-x86_64" in path.name
    policy_cache._load.cache_clear()
    second = policy_cache.policies_of("glibc", "x86_64")  # from the file
    assert _same(first, fresh) and _same(second, fresh)
    assert second.named("manylinux_2_28_x86_64") is not None


@pytest.mark.parametrize(
    "text",
    ["not json", "[]", '[{"name": 1}]', '[{"name": "x", "priority": true}]', '{"a": 1}',
     '[{"name": "x", "priority": 1, "aliases": [1], "symbol_versions": {}, "whitelist": [], "blacklist": {}}]'],
)  # fmt: skip
def test_a_corrupt_cache_file_is_replaced_not_trusted(cache: Path, text: str) -> None:
    path = cache_file("glibc", "x86_64", cache)
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError):
        from_data(json.loads(text)) if text != "not json" else json.loads(text)
    got = policy_cache.policies_of("glibc", "x86_64")
    assert _same(got, _from_auditwheel("glibc", "x86_64", None))
    assert _same(from_data(json.loads(path.read_text(encoding="utf-8"))), got)  # rewritten whole


@pytest.mark.parametrize("text", ["[" * 100_000, " " * (policy_cache.CACHE_CAP + 1) + "[]"])
def test_a_hostile_cache_file_is_replaced_not_trusted(cache: Path, text: str) -> None:
    """Nesting deep enough to exhaust the parser, or a file over the cap: rebuilt from auditwheel."""
    path = cache_file("glibc", "x86_64", cache)
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    got = policy_cache.policies_of("glibc", "x86_64")
    assert _same(got, _from_auditwheel("glibc", "x86_64", None))
    assert path.stat().st_size < policy_cache.CACHE_CAP


def test_musl_policies_are_never_cached(cache: Path) -> None:
    """auditwheel keeps only the host's own musl policy: a file from another host would lie."""
    got = policy_cache.policies_of("musl", "x86_64")
    assert _same(got, _from_auditwheel("musl", "x86_64", None))
    assert not (cache / "auditwheel-policies").exists()


def test_abi_policy_stays_pure(cache: Path) -> None:
    """The policies module imports nothing of the cache (no file, no auditwheel)."""
    import subprocess
    import sys

    probe = (
        "import sys; import release.audit.abi.manylinux; "
        "print(sorted(m for m in sys.modules if m.startswith(('auditwheel', 'release.audit.abi.manylinux_cache', "
        "'release.core.files', 'release.core.machine'))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
