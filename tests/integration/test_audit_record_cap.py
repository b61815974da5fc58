"""A RECORD that disagrees with many members gives a small report: ten findings, then a count."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

import pytest

from release.audit.checks.hygiene import RECORD_FINDINGS_SHOWN
from release.audit.model import Expectation
from release.audit.run import audit_wheel

pytestmark = pytest.mark.integration

CPU = Expectation(variant="cpu", train=None, gpu_archs=(), cuda_packages=())


def _wheel(tmp: Path, unlisted: int) -> Path:
    path = tmp / "capped-1.0-py3-none-any.whl"
    files = {
        "capped/__init__.py": b"",
        "capped-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: capped\nVersion: 1.0\n",
        "capped-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    extra = {f"capped/data{i:03d}.txt": f"{i}\n".encode() for i in range(unlisted)}
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append("capped-1.0.dist-info/RECORD,,")
    with zipfile.ZipFile(path, "w") as z:
        for name, data in {**files, **extra}.items():
            z.writestr(name, data)
        z.writestr("capped-1.0.dist-info/RECORD", "\n".join(lines) + "\n")
    return path


def _record_findings(wheel: Path) -> list[str]:
    result = audit_wheel(wheel, CPU)
    return [f.message for f in result.findings if f.check == "hygiene" and not f.ok and "RECORD" in f.message]


def test_many_unlisted_members_are_counted_not_listed(tmp_path: Path) -> None:
    messages = _record_findings(_wheel(tmp_path, 500))
    assert len(messages) == RECORD_FINDINGS_SHOWN + 1
    assert messages[-1].startswith("490 more RECORD problems like the ones above")


def test_a_few_unlisted_members_are_each_named(tmp_path: Path) -> None:
    messages = _record_findings(_wheel(tmp_path, 3))
    assert len(messages) == 3
    assert all("is in the wheel but not in RECORD" in m for m in messages)
