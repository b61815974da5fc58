"""Verified means downloaded (release/publish/guards/readback.py): after uploading, publish downloads each
file this run uploaded and compares its bytes' sha256 with the audited one; and the advice fits
the fault it saw. Against the real local index, real twine, and a proxy of ours in front of it
(:class:`LyingProxy`, a helpers.index.FaultProxy) that either serves other bytes for a file
under a correct listing, or lists another sha256 for a file it serves correctly.
"""

from __future__ import annotations

import contextlib
import re
import socket
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.index import (
    PROJECT,
    FaultProxy,
    publish_policy,
    release_wheel,
)

from release.core.errors import CheckFailed
from release.core.hashing import sha256_file
from release.policy.model import Policy
from release.publish.guards.plan import PublishReport
from release.publish.index.client import remote_hashes
from release.publish.index.local import LocalIndex
from release.publish.upload import publish

pytestmark = pytest.mark.integration
ROW = "cu130-py312-x86_64"


class LyingProxy(FaultProxy):
    """A FaultProxy (every upload and page passes as it comes) that lies in one of two ways:

    - ``serve``: every file download (a GET under ``/packages/``) gets ``other`` instead of the
      index's bytes; the project pages are the index's, correct;
    - ``listed``: each project page lists ``listed[name]`` as the sha256 of ``name``; the files
      are served as they are.
    """

    def __init__(self, upstream_port: int) -> None:
        super().__init__(upstream_port)
        self.serve: bytes | None = None
        self.listed: dict[str, str] = {}
        self.downloads = 0

    def _serve(self, client: socket.socket) -> None:
        try:
            head = client.recv(65536, socket.MSG_PEEK)
        except OSError:
            return
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        method, _, rest = line.partition(" ")
        path = rest.rsplit(" ", 1)[0]
        if method != "GET" or not (
            (self.serve is not None and "/packages/" in path) or (self.listed and "/simple/" in path)
        ):
            super()._serve(client)
            return
        self._sockets.append(client)
        with contextlib.suppress(OSError), client:
            request = b""
            while b"\r\n\r\n" not in request and (chunk := client.recv(65536)):
                request += chunk
            if "/packages/" in path:
                self.downloads += 1
                body, ctype = self.serve or b"", "application/octet-stream"
            else:
                with urllib.request.urlopen(
                    f"http://{self.upstream[0]}:{self.upstream[1]}{path}", timeout=30
                ) as answer:
                    body, ctype = answer.read(), answer.headers.get("Content-Type", "text/html")
                text = body.decode()
                for name, sha in self.listed.items():
                    text = re.sub(rf"({re.escape(name)}#sha256=)[0-9a-f]{{64}}", rf"\g<1>{sha}", text)
                body = text.encode()
            client.sendall(
                f"HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                "Connection: close\r\n\r\n".encode()
                + body
            )


@pytest.fixture(name="lying_proxy")
def fixture_lying_proxy(local_index_server: LocalIndex) -> Iterator[LyingProxy]:
    proxy = LyingProxy(local_index_server.port)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.fixture
def policy(tmp_path: Path) -> Policy:
    return publish_policy(tmp_path / "policy")


def _publish(wheel: Path, policy: Policy, index: LocalIndex, proxy: LyingProxy) -> PublishReport:
    return publish([wheel], proxy.target(["cu130"]), variant="cu130", policy=policy,
                   env=index.credentials_env("cu130"), log=lambda line: None)  # fmt: skip


def test_other_bytes_served_under_a_correct_listing_fail_the_read_back_naming_the_file(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, lying_proxy: LyingProxy
) -> None:
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    other = release_wheel(tmp_path / "other", policy, ROW, extra={"x/x": b"x"}, audit=False)
    lying_proxy.serve = other.read_bytes()
    with pytest.raises(CheckFailed) as info:
        _publish(wheel, policy, local_index_server, lying_proxy)
    message = str(info.value)
    assert lying_proxy.downloads == 1  # the read-back downloaded what it uploaded
    assert (
        f"{wheel.name}: the index lists the audited sha256 {sha256_file(wheel)}, but the file it serves "
        f"is other bytes (sha256 {sha256_file(other)}, {other.stat().st_size} bytes)"
    ) in message
    assert "the listing is right and the file served is not" in message and "[rule: read-back]" in message
    assert "bump the build number" not in message
    assert f"1 of 1 file(s) uploaded by this run ({wheel.name})" in message
    on_index = remote_hashes(local_index_server.simple_url("cu130"), PROJECT)
    assert on_index == {wheel.name: sha256_file(wheel)}  # the index holds them: what lies is in front of it


def test_the_read_back_passes_when_the_index_serves_what_it_lists(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, lying_proxy: LyingProxy
) -> None:
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    lines: list[str] = []
    report = publish([wheel], lying_proxy.target(["cu130"]), variant="cu130", policy=policy,
                     env=local_index_server.credentials_env("cu130"), log=lines.append)  # fmt: skip
    assert report.uploaded == (wheel.name,) and lying_proxy.downloads == 0  # passed through, not ours
    assert any("uploaded by this run (downloaded back: the audited bytes)" in line for line in lines)


def test_a_listing_that_lies_about_a_file_that_is_fine_is_not_told_to_remove_it(
    tmp_path: Path, policy: Policy, local_index_server: LocalIndex, lying_proxy: LyingProxy
) -> None:
    wheel = release_wheel(tmp_path / "dist", policy, ROW)
    assert _publish(wheel, policy, local_index_server, lying_proxy).uploaded == (wheel.name,)
    wrong = "e" * 64
    lying_proxy.listed = {wheel.name: wrong}
    with pytest.raises(CheckFailed) as info:
        _publish(wheel, policy, local_index_server, lying_proxy)  # the rerun reads the lying page
    message = str(info.value)
    assert (
        f"{wheel.name}: the index lists sha256 {wrong}, but the file it serves is the audited one "
        f"({sha256_file(wheel)}): the listing is wrong, not the file"
    ) in message
    assert "Do not remove the file and do not bump the build number" in message
    assert "if that file was never released, remove it" not in message
    assert message.endswith("nothing was uploaded")
    assert remote_hashes(local_index_server.simple_url("cu130"), PROJECT) == {wheel.name: sha256_file(wheel)}
