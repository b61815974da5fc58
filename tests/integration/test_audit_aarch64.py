"""Wheels of another CPU architecture, audited on this machine as a user audits a wheel: ``python -m release
audit W --json`` from an empty folder. Real libraries, built here by gcc and by Debian's cross compiler
(``aarch64-linux-gnu-gcc``, packages g++-aarch64-linux-gnu and libc6-dev-arm64-cross).

- must pass: an aarch64 wheel whose libraries are aarch64 (its SDK links with the cross toolchain);
- must fail: an aarch64-tagged wheel shipping an x86_64 library, and the reverse, named with both
  architectures by the platform-tag analysis (``hygiene``: auditwheel itself only logs "ignoring") and by
  the C++ consumer; a foreign library beside a right one (no SDK) fails too;
- cannot run: no toolchain for the wheel's architecture on PATH stops the audit (exit 3) with the package
  to install, never a verdict from this machine's compilers.

Written for an x86_64 machine, as CI's; on an aarch64 one the architectures swap (``OTHER``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.elf import write_wheel

from release.resources.cpus import cpus, host_arch

pytestmark = [pytest.mark.integration]

ROOT = Path(__file__).resolve().parents[2]
HOST = host_arch()
OTHER = "aarch64" if HOST != "aarch64" else "x86_64"
CROSS = f"{cpus().by_name[OTHER].triplet}-gcc"
C_API = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'
HEADER = C_API % "int fx_version(void);\nint fx_add(int a, int b);"
LIB = "int fx_version(void) { return 1; }\nint fx_add(int a, int b) { return a + b; }\n"


def _lib(tmp: Path, compiler: str, name: str = "libfx.so") -> bytes:
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "fx.c"
    src.write_text(LIB, encoding="utf-8")
    out = tmp / f"{compiler}-{name}"
    subprocess.run(
        [compiler, "-shared", "-fPIC", f"-Wl,-soname,{name}", "-o", out, src], check=True, timeout=120
    )
    return out.read_bytes()


def _sdk_wheel(tmp: Path, *, built: str, tagged: str) -> Path:
    """fxsdk 1.0: ``fxsdk/include/fx.h`` and ``fxsdk/lib/libfx.so`` built for ``built``, tagged ``tagged``."""
    compiler = "gcc" if built == HOST else CROSS
    files = {"fxsdk/include/fx.h": HEADER.encode(), "fxsdk/lib/libfx.so": _lib(tmp / "build", compiler)}
    return write_wheel(tmp / "dist", "fxsdk", files, tag=f"manylinux_2_28_{tagged}")


def audit(wheel: Path, cwd: Path, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any], str]:
    """``python -m release audit WHEEL --json --no-record --no-cache`` in ``cwd`` (no rows.toml there)."""
    cwd.mkdir(parents=True, exist_ok=True)
    base = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-m", "release", "audit", str(wheel), "--json", "--no-record", "--no-cache"],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env={**base, **(env or {})},
    )
    return proc.returncode, json.loads(proc.stdout), proc.stderr


def _findings(report: dict[str, Any], check: str) -> list[dict[str, Any]]:
    (result,) = report["results"]
    return [f for f in result["findings"] if f["check"] == check]


def test_a_wheel_of_another_architecture_passes(tmp_path: Path) -> None:
    """Must pass: every check; the platform tag is honest (auditwheel's policies for that architecture) and
    the SDK compiles and links with the cross toolchain."""
    code, report, stderr = audit(_sdk_wheel(tmp_path, built=OTHER, tagged=OTHER), tmp_path / "empty")
    assert code == 0, (stderr, report)
    (tag,) = _findings(report, "hygiene")[-1:]
    assert tag["ok"] and tag["message"].startswith(f"platform tag manylinux_2_28_{OTHER} is honest"), tag
    (cpp,) = _findings(report, "cpp_consumer")
    assert cpp["ok"] and f"a cross toolchain for {OTHER}: {CROSS}" in cpp["message"], cpp
    assert cpp["details"]["toolchain"]["arch"] == OTHER


@pytest.mark.parametrize(
    ("built", "tagged"), [(HOST, OTHER), (OTHER, HOST)], ids=["host-in-other", "other-in-host"]
)
def test_a_library_of_another_architecture_than_the_tag_fails(
    tmp_path: Path, built: str, tagged: str
) -> None:
    """Must fail (both ways): the platform-tag analysis names the library and both architectures (before, an
    aarch64 wheel holding only x86_64 libraries passed, standalone, as a wheel "with no platform ELF file");
    the C++ consumer says no consumer on the tag's architecture can link it."""
    code, report, stderr = audit(_sdk_wheel(tmp_path, built=built, tagged=tagged), tmp_path / "empty")
    assert code == 1, (stderr, report)
    failed = [f for f in _findings(report, "hygiene") if not f["ok"]]
    assert [f["message"] for f in failed] == [
        f"auditwheel could not analyse the wheel: fxsdk/lib/libfx.so is an {built} ELF file, but the wheel's "
        f"platform tag manylinux_2_28_{tagged} is {tagged}: pip installs the wheel only on {tagged} machines, "
        f"where it cannot be loaded; build it for {tagged}"
    ]
    (cpp,) = _findings(report, "cpp_consumer")
    assert not cpp["ok"]
    assert cpp["message"].startswith(
        f"fxsdk/lib/libfx.so is built for {built} (its ELF machine), but the wheel is"
    )
    assert cpp["details"]["foreign_libraries"] == {"fxsdk/lib/libfx.so": built}


def test_a_foreign_library_beside_a_right_one_fails(tmp_path: Path) -> None:
    """Must fail: no SDK (the C++ consumer has nothing to link); one library of the tag's architecture and one
    of the other, which auditwheel's analysis would skip with a log line and grade the rest."""
    files = {
        "fx/libfx.so": _lib(tmp_path / "a", CROSS, "libfx.so"),
        "fx/libhelper.so": _lib(tmp_path / "b", "gcc", "libhelper.so"),
    }
    wheel = write_wheel(tmp_path / "dist", "fx", files, tag=f"manylinux_2_28_{OTHER}")
    code, report, stderr = audit(wheel, tmp_path / "empty")
    assert code == 1, (stderr, report)
    failed = [f["message"] for f in _findings(report, "hygiene") if not f["ok"]]
    assert len(failed) == 1 and f"fx/libhelper.so is an {HOST} ELF file" in failed[0], failed
    assert f"platform tag manylinux_2_28_{OTHER} is {OTHER}" in failed[0]
    assert "fx/libfx.so is" not in failed[0]


def test_no_toolchain_for_the_wheels_architecture_stops_the_audit(tmp_path: Path) -> None:
    """Cannot run: no cross compiler on PATH (this machine's gcc and g++ are there) is a missing tool, exit 3,
    naming the package; nothing is linked by a compiler of this machine's architecture."""
    native = tmp_path / "bin"
    native.mkdir()
    for tool in ("gcc", "g++", "ld", "as"):
        found = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True, check=True)
        (native / tool).symlink_to(found.stdout.strip())
    wheel = _sdk_wheel(tmp_path, built=OTHER, tagged=OTHER)
    code, report, stderr = audit(wheel, tmp_path / "empty", env={"PATH": str(native)})
    assert code == 3, (stderr, report)
    (error,) = report["errors"]
    assert error["exit_code"] == 3
    said = error["error"]
    assert "the C++ consumer check cannot run here" in said
    assert (
        f"{cpus().by_name[OTHER].triplet}-gcc and {cpus().by_name[OTHER].triplet}-g++ are not on PATH" in said
    )
    assert "g++-aarch64-linux-gnu" in said or OTHER != "aarch64"
    assert said in stderr
