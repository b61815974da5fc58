"""Fixtures and helpers for publishing tests: tiny real wheels, audit records, a real
local index (pypiserver), and a fresh venv to install into.

Fixtures are declared with ``name=``, so importing their functions (``fixture_<name>``)
into a test module or a conftest registers them under their fixture names:

- ``local_index_server``: a running :class:`release.publish.index_server.LocalIndex` for
  variants cpu, cu126 and cu130, files under ``tmp_path/index``; stopped after the test.
- ``tiny_wheel_factory(dest, version=..., tag=..., payload=...)``: build a real wheel.
- ``audited_wheel_factory(dest, ..., passed=True)``: a wheel plus its audit record.
- ``install_venv``: a fresh venv (no pip inside); ``install_venv.install(index_url, req)``
  installs with this venv's pip through ``--python``, isolated from any pip config.
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pytest

from release.core import proc
from release.publish.local_index import LocalIndex, local_index

POLICY_SHA256 = hashlib.sha256(b"rows.toml used by the publishing tests\n").hexdigest()
PROJECT = "wwdemo"
VARIANTS = ("cpu", "cu126", "cu130")


def _record_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"sha256={digest}"


def build_tiny_wheel(
    dest: Path,
    *,
    name: str = PROJECT,
    version: str = "1.5.0+cu130",
    tag: str = "py3-none-any",
    payload: str = "",
) -> Path:
    """A real, installable wheel: a module reporting its version, METADATA, WHEEL and RECORD."""
    dest.mkdir(parents=True, exist_ok=True)
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\nTAG = {tag!r}\nPAYLOAD = {payload!r}\n".encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: a tiny wheel for wheelwright's publishing tests\nRequires-Python: >=3.8\n\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            f"Wheel-Version: 1.0\nGenerator: wheelwright-tests\n"
            f"Root-Is-Purelib: {'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n"
        ).encode(),
    }
    path = dest / f"{name}-{version}-{tag}.whl"
    lines = []
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for arcname, data in files.items():
            zf.writestr(zipfile.ZipInfo(arcname, date_time=(2026, 1, 1, 0, 0, 0)), data)
            lines.append(f"{arcname},{_record_hash(data)},{len(data)}")
        lines.append(f"{dist_info}/RECORD,,")
        zf.writestr(
            zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2026, 1, 1, 0, 0, 0)), "\n".join(lines) + "\n"
        )
    return path


def write_audit_record(
    wheel: Path,
    *,
    row: str,
    variant: str,
    passed: bool = True,
    policy_sha256: str = POLICY_SHA256,
    sha256: str | None = None,
) -> Path:
    """The record the audit step writes beside a wheel (``<wheel>.audit.json``)."""
    record = {
        "version": 1,
        "wheel": wheel.name,
        "sha256": sha256 or hashlib.sha256(wheel.read_bytes()).hexdigest(),
        "row": row,
        "variant": variant,
        "policy_sha256": policy_sha256,
        "passed": passed,
        "findings": [] if passed else [{"check": "device-code", "message": "missing sm_90"}],
    }
    path = wheel.with_name(wheel.name + ".audit.json")
    path.write_text(json.dumps(record, indent=2, sort_keys=True), encoding="utf-8")
    return path


class TinyWheelFactory(Protocol):
    def __call__(self, dest: Path, *, version: str = ..., tag: str = ..., payload: str = ...) -> Path: ...


class AuditedWheelFactory(Protocol):
    def __call__(
        self,
        dest: Path,
        *,
        version: str = ...,
        tag: str = ...,
        payload: str = ...,
        row: str | None = ...,
        passed: bool = ...,
    ) -> Path: ...


def _audited(
    dest: Path,
    *,
    version: str = "1.5.0+cu130",
    tag: str = "py3-none-any",
    payload: str = "",
    row: str | None = None,
    passed: bool = True,
) -> Path:
    wheel = build_tiny_wheel(dest, version=version, tag=tag, payload=payload)
    variant = version.partition("+")[2] or "cpu"
    write_audit_record(wheel, row=row or f"{variant}-{tag}", variant=variant, passed=passed)
    return wheel


@pytest.fixture(name="tiny_wheel_factory")
def fixture_tiny_wheel_factory() -> TinyWheelFactory:
    def make(
        dest: Path, *, version: str = "1.5.0+cu130", tag: str = "py3-none-any", payload: str = ""
    ) -> Path:
        return build_tiny_wheel(dest, version=version, tag=tag, payload=payload)

    return make


@pytest.fixture(name="audited_wheel_factory")
def fixture_audited_wheel_factory() -> AuditedWheelFactory:
    return _audited


@pytest.fixture(name="local_index_server")
def fixture_local_index_server(tmp_path: Path) -> Iterator[LocalIndex]:
    with local_index(VARIANTS, tmp_path / "index") as index:
        yield index


@dataclass(frozen=True)
class InstallVenv:
    root: Path

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    def install(self, index_url: str, *requirements: str) -> proc.Result:
        """pip install into this venv from ``index_url`` only, ignoring every pip config."""
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": str(self.root),
            "PIP_CONFIG_FILE": "/dev/null",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        }
        return proc.run(
            [
                sys.executable,
                "-m",
                "pip",
                "--python",
                str(self.python),
                "install",
                "--isolated",
                "--no-cache-dir",
                "--no-deps",
                "--index-url",
                index_url,
                *requirements,
            ],
            env=env,
            check=False,
            timeout=120,
        )

    def run(self, code: str) -> proc.Result:
        return proc.run(
            [str(self.python), "-c", code], env={"PATH": "/usr/bin:/bin"}, check=False, timeout=60
        )


@pytest.fixture(name="install_venv")
def fixture_install_venv(tmp_path: Path) -> InstallVenv:
    root = tmp_path / "venv"
    proc.run([sys.executable, "-m", "venv", "--without-pip", str(root)], timeout=60)
    return InstallVenv(root)
