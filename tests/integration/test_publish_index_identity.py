"""Indexes are identities, not strings (issue 25 item 3), against the real local index server.

Two variants on one index break all or nothing: one variant's wheels land among another's. The
loader refuses the spellings of one index (loopback names, default ports, case, '/'); what slips
past it (a path the server maps to another variant's storage, a listing that already holds
another variant's file of this release) is refused by publish before anything of that variant is
uploaded, naming the file and both variants.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.index import PROJECT, publish_policy, release_wheel, write_smoke_record
from helpers.policy import stub_project

from release.core.errors import CheckFailed, PolicyError
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Policy
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex, local_index, stop
from release.publish.step import LOCAL_INDEX_DIR, publish_rows

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


def _target(name: str, cpu: tuple[str, str], cu130: tuple[str, str]) -> str:
    return f"""
[target.{name}]
rehearsal = true
index.cpu = {{ upload_url = "{cpu[0]}", simple_url = "{cpu[1]}" }}
index.cu130 = {{ upload_url = "{cu130[0]}", simple_url = "{cu130[1]}" }}
"""


def _release(tmp_path: Path, targets: str) -> tuple[Policy, tuple[Row, ...], Path]:
    """One real wheel per row (cpu, cu130; Python 3.12) with passing audit and smoke records."""
    policy = publish_policy(tmp_path / "policy", targets=targets, pythons=("3.12",))
    dist = tmp_path / "dist"
    for row in expand(policy):
        wheel = release_wheel(dist, policy, row.id, version="0.3.0")
        write_smoke_record(wheel, row, policy_sha256=policy.sha256)
    return policy, expand(policy), dist


def _env(index: LocalIndex) -> dict[str, str]:
    return {**index.credentials_env("cpu"), **index.credentials_env("cu130"), "PATH": "/usr/bin:/bin"}


def _listed(index: LocalIndex, variant: str) -> set[str]:
    return set(remote_hashes(index.simple_url(variant), PROJECT))


@pytest.fixture
def index(tmp_path: Path) -> Iterator[LocalIndex]:
    with local_index(("cpu", "cu130"), tmp_path / "index") as idx:
        yield idx


def test_one_index_under_two_spellings_is_refused_at_load(tmp_path: Path, index: LocalIndex) -> None:
    # the issue's case: cu130 at http://127.0.0.1:PORT/cu130/ and another variant at http://localhost:PORT/cu130/
    port = index.port
    alias = (f"http://localhost:{port}/cu130", f"http://LOCALHOST:{port}/cu130/simple")
    targets = _target("loopback", alias, (index.upload_url("cu130"), index.simple_url("cu130")))
    with pytest.raises(PolicyError) as info:
        publish_policy(tmp_path / "policy", targets=targets, pythons=("3.12",))
    message = str(info.value)
    assert str(tmp_path / "policy" / "rows.toml") in message
    assert "target.loopback.index.cu130.upload_url: is the same index as index.cpu.upload_url" in message
    assert "localhost, 127.0.0.1, ::1" in message
    assert "give index.cu130 an upload_url and simple_url of its own" in message
    for other in (f"http://[::1]:{port}/cu130/", f"http://127.0.0.1:{port}/./cu130//"):
        with pytest.raises(PolicyError, match=r"is the same index as index\.cpu"):
            publish_policy(
                tmp_path / "policy",
                targets=_target("loopback", (other, other + "simple/"), (index.upload_url("cu130"), index.simple_url("cu130"))),
                pythons=("3.12",),
            )  # fmt: skip
    # one variant's upload URL at another's simple root: one index too
    mixed = _target("loopback", (index.upload_url("cpu"), index.simple_url("cpu")), (f"http://localhost:{port}/cpu/", index.simple_url("cu130")))  # fmt: skip
    with pytest.raises(PolicyError, match=r"index\.cu130\.upload_url: is the same index as index\.cpu"):
        publish_policy(tmp_path / "policy", targets=mixed, pythons=("3.12",))
    # the case that passes: each variant on its own path of the one server
    own = _target("loopback", (index.upload_url("cpu"), index.simple_url("cpu")), (index.upload_url("cu130"), index.simple_url("cu130")))  # fmt: skip
    assert publish_policy(tmp_path / "policy", targets=own, pythons=("3.12",)).target("loopback")


def test_the_issues_cu130_and_cu132_on_one_index_are_refused_at_load(
    tmp_path: Path, index: LocalIndex
) -> None:
    # this repository's rows.toml (cpu, cu126, cu130, cu132), a rehearsal target on the real server:
    # cu130 at http://127.0.0.1:PORT/cu130/ and cu132 at http://localhost:PORT/cu130/
    port = index.port
    urls = {
        v: (f"http://127.0.0.1:{port}/{v}/", f"http://127.0.0.1:{port}/{v}/simple/")
        for v in ("cpu", "cu126", "cu130")
    }
    urls["cu132"] = (f"http://localhost:{port}/cu130/", f"http://localhost:{port}/cu130/simple/")
    text = (
        (REPO / "rows.toml").read_text(encoding="utf-8")
        + "\n[target.aliased]\nrehearsal = true\n"
        + "".join(f'index.{v} = {{ upload_url = "{u}", simple_url = "{s}" }}\n' for v, (u, s) in urls.items())
    )
    path = tmp_path / "rows.toml"
    path.write_text(text, encoding="utf-8")
    stub_project(tmp_path, "examples/tinyaxpy")
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    assert str(info.value).startswith(
        f"{path}: target.aliased.index.cu132.upload_url: is the same index as index.cu130.upload_url ("
    )
    assert "give index.cu132 an upload_url and simple_url of its own" in str(info.value)
    urls["cu132"] = (f"http://localhost:{port}/cu132/", f"http://localhost:{port}/cu132/simple/")
    path.write_text(text.replace(f"localhost:{port}/cu130/", f"localhost:{port}/cu132/"), encoding="utf-8")
    assert (
        load_policy(path).target("aliased").indexes["cu132"].upload_url == urls["cu132"][0]
    )  # its own: passes


def test_a_listing_holding_another_variants_file_is_refused_before_any_upload(
    tmp_path: Path, index: LocalIndex
) -> None:
    urls = {v: (index.upload_url(v), index.simple_url(v)) for v in ("cpu", "cu130")}
    policy, rows, dist = _release(tmp_path, _target("loopback", urls["cpu"], urls["cu130"]))
    cpu_wheel = next((dist / "cpu").glob("*.whl"))
    (index.folder("cu130") / cpu_wheel.name).write_bytes(cpu_wheel.read_bytes())  # pre-seeded
    with pytest.raises(CheckFailed) as info:
        publish_rows(policy, rows, target_name="loopback", dist=dist, env=_env(index))
    message = str(info.value)
    assert f"{cpu_wheel.name}: a cpu file of this release is on the cu130 index" in message
    assert "the cu130 and cpu indexes are one index under two names" in message
    assert "[rule: one-index]" in message and "nothing was uploaded" in message
    assert _listed(index, "cpu") == set()  # nothing of any variant: all or nothing
    assert _listed(index, "cu130") == {cpu_wheel.name}


def test_an_alias_the_server_maps_to_one_storage_stops_before_the_next_variants_first_upload(
    tmp_path: Path,
) -> None:
    root = tmp_path / "index"
    (root / "packages" / "cu130").mkdir(parents=True)
    (root / "packages" / "cpu").symlink_to("cu130")  # /cpu/ and /cu130/ serve one folder
    with local_index(("cpu", "cu130"), root) as index:
        urls = {v: (index.upload_url(v), index.simple_url(v)) for v in ("cpu", "cu130")}
        policy, rows, dist = _release(
            tmp_path, _target("loopback", urls["cpu"], urls["cu130"])
        )  # passes load
        cpu_wheel, cu_wheel = next((dist / "cpu").glob("*.whl")), next((dist / "cu130").glob("*.whl"))
        with pytest.raises(CheckFailed) as info:
            publish_rows(policy, rows, target_name="loopback", dist=dist, env=_env(index))
        message = str(info.value)
        assert "read again just before its first upload" in message
        assert f"{cpu_wheel.name}: a cpu file of this release is on the cu130 index" in message
        assert "nothing of cu130 was uploaded" in message and "[rule: one-index]" in message
        assert "variants already published completely: cpu" in message
        assert _listed(index, "cu130") == {cpu_wheel.name}  # no +cu130 wheel written among the cpu ones
        assert cu_wheel.name not in {p.name for p in (root / "packages" / "cu130").iterdir()}


def test_a_local_server_target_whose_variants_share_storage_is_refused_before_any_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    root = work / LOCAL_INDEX_DIR
    (root / "packages" / "cu130").mkdir(parents=True)
    (root / "packages" / "cpu").symlink_to("cu130")
    targets = "\n[target.rehearsal]\nrehearsal = true\nlocal_server = true\n"
    policy, rows, dist = _release(tmp_path, targets)
    try:
        with pytest.raises(CheckFailed) as info:
            publish_rows(policy, rows, target_name="rehearsal", dist=dist, env=dict(os.environ))
        message = str(info.value)
        assert "nothing was uploaded: two variants share one index" in message
        assert (
            "the cpu index keeps its files in" in message
            and "is the same folder as the cu130 index's" in message
        )
        assert "[rule: one-index]" in message
        assert list((root / "packages" / "cu130").iterdir()) == []
    finally:
        stop(root)
    # the case that passes: a folder of its own
    (root / "packages" / "cpu").unlink()
    try:
        reports = publish_rows(policy, rows, target_name="rehearsal", dist=dist, env=dict(os.environ))
        assert sorted(r.variant for r in reports) == ["cpu", "cu130"]
    finally:
        stop(root)
