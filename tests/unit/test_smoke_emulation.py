"""The smoke step's pure parts for a row of another CPU: the platform tags a wheelhouse downloads for,
the cross compiler, the one emulation line, and a library of another CPU failing the verdict (the same
evaluate() for both CPUs)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.core.errors import ToolError
from release.core.machine import PythonInfo
from release.core.pip import platform_tags
from release.smoke.emulation import cross_compiler, emulation_line
from release.smoke.evaluate import evaluate
from release.smoke.wheelhouse import Wheelhouse, download_args, target_for


def test_platform_tags_cover_every_manylinux_down_to_2_17_then_the_legacy_alias() -> None:
    tags = platform_tags("manylinux_2_28", "aarch64")
    assert tags[0] == "manylinux_2_28_aarch64" and tags[11] == "manylinux_2_17_aarch64"
    assert tags[-2:] == ("manylinux2014_aarch64", "linux_aarch64") and len(tags) == 14
    assert platform_tags("manylinux2014", "x86_64")[0] == "manylinux_2_17_x86_64"
    with pytest.raises(ValueError, match="not a manylinux_2_X policy"):
        platform_tags("musllinux_1_2", "aarch64")


def test_download_args_for_another_cpu_name_its_platforms_and_python(tmp_path: Path) -> None:
    house = Wheelhouse(tmp_path / "h", "cu130", None, ())
    plain = download_args(house, Path("w.whl"), tmp_path)
    assert "--platform" not in plain and plain[-1] == "w.whl"
    args = download_args(house, Path("w.whl"), tmp_path, target_for("manylinux_2_28", "aarch64", "3.11"))
    assert "--only-binary=:all:" in args
    assert args[args.index("--python-version") + 1] == "3.11"
    assert args[args.index("--implementation") + 1] == "cp"
    assert [args[i + 1] for i, a in enumerate(args) if a == "--platform"] == list(
        platform_tags("manylinux_2_28", "aarch64")
    )


def test_cross_compiler_is_debians() -> None:
    assert cross_compiler("aarch64") == "aarch64-linux-gnu-g++"
    with pytest.raises(ToolError, match="no cross compiler is known for 'riscv64'"):
        cross_compiler("riscv64")


def test_the_emulation_line_says_how_and_the_wall_time() -> None:
    info = PythonInfo(Path("/c/root/usr/bin/python3.11"), "3.11.2", env=(("QEMU_LD_PREFIX", "/c/root"),),
                      emulated="aarch64 under qemu-user, Debian bookworm arm64 sysroot /c/root", arch="aarch64")  # fmt: skip
    line = emulation_line(info, 12.345)
    assert line.startswith("- ran under emulation: CPython 3.11.2 for aarch64 on this ")
    assert "(aarch64 under qemu-user, Debian bookworm arm64 sysroot /c/root)" in line
    assert line.endswith("took 12.3 s wall time")
    assert info.environ({"A": "1"}) == {"A": "1", "QEMU_LD_PREFIX": "/c/root"}


PROBE = {"import": "ok", "python": "3.11", "site": "/v/site", "loaded": [], "libraries": [], "run_check": True,
         "check": {"max_abs_diff": 0.0, "device": "cpu"}}  # fmt: skip


def test_a_library_of_another_cpu_fails_the_run_naming_it() -> None:
    row = rows_by_id()["cpu-py311-aarch64"]
    assert evaluate(row, PROBE).passed
    outcome = evaluate(row, PROBE, other_cpu=[("pkg/libx.so", "x86_64")])
    assert not outcome.passed
    assert (
        "✗ pkg/libx.so is built for x86_64, not for this aarch64 row: no aarch64 interpreter can load it"
        in outcome.lines
    )
    failed_import = evaluate(row, {**PROBE, "import": "OSError: boom"}, other_cpu=[("pkg/libx.so", "x86_64")])
    assert failed_import.lines[0] == "✗ import failed in a fresh venv: OSError: boom"
    assert failed_import.lines[1].startswith("✗ pkg/libx.so is built for x86_64")
