"""The same wheel, audited on x86_64 and (by emulation) on aarch64, gets the same verdict (issue 22
item 2). The aarch64 run is wheelwright itself under qemu-user: the emulated Debian arm64 CPython 3.11
(release.emulate, the sysroot the smoke step uses) runs ``python -m release audit W --json`` with
wheelwright's pure-Python dependencies downloaded for aarch64 at the versions this venv has. There the
machine says aarch64 and the PATH's g++ is the real x86_64 one: the C++ consumer must notice (its
probe) and link with the aarch64 cross compilers, never give a verdict from an x86_64 link.

Two of NVIDIA's aarch64 wheels (tests/helpers/real_wheels.py AARCH64_PINS): cuda-runtime (passes) and cuRAND
(its SDK declares functions its library does not export: a true defect, the same finding on both).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.real_wheels import real_aarch64_wheel

from release.core.machine import default_cache_dir
from release.emulate.python import find_python
from release.resources.cpus import host_arch

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
# wheelwright's runtime imports for an audit (isal is optional: zlib stands in)
DEPENDENCIES = (
    "packaging",
    "requests",
    "urllib3",
    "idna",
    "certifi",
    "charset-normalizer",
    "auditwheel",
    "pyelftools",
)


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """The emulated CPython 3.11 for aarch64 and an environment whose PYTHONPATH holds this checkout and
    the dependencies, downloaded once for aarch64 (cached by their versions)."""
    assert host_arch() == "x86_64", "this test emulates aarch64 on an x86_64 machine"
    info = find_python("3.11", "aarch64", env=os.environ)
    pins = [f"{name}=={importlib.metadata.version(name)}" for name in DEPENDENCIES]
    site = default_cache_dir(os.environ) / "test-emulated-site" / "-".join(p.replace("==", "_") for p in pins)
    if not (site / ".complete").is_file():
        shutil.rmtree(site, ignore_errors=True)
        wheels = tmp_path_factory.mktemp("wheels")
        platform = ("--platform", "manylinux_2_28_aarch64", "--platform", "manylinux2014_aarch64")
        common = ("--no-deps", "--only-binary=:all:", "--python-version", "3.11", *platform)
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", *common, "-d", str(wheels), *pins],
            check=True,
            timeout=600,
        )
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", *common, "--target", str(site),
             *map(str, sorted(wheels.glob("*.whl")))],
            check=True,
            timeout=600,
        )  # fmt: skip
        (site / ".complete").write_text("\n".join(pins) + "\n")
    env = {**os.environ, **dict(info.env), "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    env["WHEELWRIGHT_CPP_CACHE"] = "0"
    return info.path, env


def _audit(python: Path | str, wheel: Path, cwd: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    cwd.mkdir(parents=True)
    copy = cwd / wheel.name
    shutil.copy2(wheel, copy)
    proc = subprocess.run(
        [str(python), "-m", "release", "audit", copy.name, "--json", "--no-cache"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert proc.stdout, proc.stderr[-3000:]
    report: dict[str, Any] = json.loads(proc.stdout)
    assert not report["errors"], (report["errors"], proc.stderr[-3000:])
    assert sorted(p.name for p in cwd.iterdir()) == [wheel.name], "a standalone audit writes nothing"
    (result,) = report["results"]
    return proc.returncode, result


def _verdict(result: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """Each finding's check, ok and first line (what the verdict rests on; paths and timings aside)."""
    return sorted((f["check"], f["ok"], f["message"].splitlines()[0]) for f in result["findings"])


@pytest.mark.parametrize(("key", "code"), [("nvidia_cuda_runtime", 0), ("nvidia_curand", 1)])
def test_the_emulated_aarch64_audit_agrees_with_the_x86_64_one(
    emulated: tuple[Path, dict[str, str]], key: str, code: int, tmp_path: Path
) -> None:
    python, env = emulated
    wheel = real_aarch64_wheel(key)
    native = {**os.environ, "PYTHONPATH": str(ROOT), "WHEELWRIGHT_CPP_CACHE": "0"}
    x86_code, x86 = _audit(sys.executable, wheel, tmp_path / "x86_64", native)
    arm_code, arm = _audit(python, wheel, tmp_path / "aarch64", env)
    assert (x86_code, arm_code) == (code, code)
    assert _verdict(arm) == _verdict(x86)
    (cpp,) = [f for f in arm["findings"] if f["check"] == "cpp_consumer"]
    assert "aarch64-linux-gnu-g++" in cpp["message"] or cpp["ok"], cpp["message"]
    if key == "nvidia_curand":
        assert "undefined reference to `curandGenerateBinomial'" in cpp["message"]
