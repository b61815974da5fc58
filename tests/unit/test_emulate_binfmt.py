"""release.emulate.binfmt: whether this machine runs another CPU's programs, and the commands that
make it so, decided from what the kernel shows (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from release.core.errors import ToolError
from release.emulate.binfmt import (
    BinfmtEntry,
    BinfmtState,
    capability,
    decide,
    enable_commands,
    parse_entry,
    read_state,
    require,
)

ENTRY = """enabled
interpreter /usr/libexec/qemu-binfmt/aarch64-binfmt-P
flags: PF
offset 0
magic 7f454c460201010000000000000000000200b700
mask ffffffffffffff00fffffffffffffffffeffffff
"""
GOOD = BinfmtState(
    True, True, BinfmtEntry("qemu-aarch64", True, "/usr/libexec/qemu-binfmt/aarch64-binfmt-P", "PF"), True
)


def test_parse_entry_reads_state_interpreter_and_flags() -> None:
    entry = parse_entry("qemu-aarch64", ENTRY)
    assert entry == BinfmtEntry("qemu-aarch64", True, "/usr/libexec/qemu-binfmt/aarch64-binfmt-P", "PF")
    assert not parse_entry("qemu-aarch64", ENTRY.replace("enabled", "disabled", 1)).enabled


def test_native_needs_nothing() -> None:
    cap = decide("x86_64", "x86_64", BinfmtState(False, False, None, False))
    assert cap.runs and cap.how == "native" and not cap.fix


def test_registered_and_enabled_runs_emulated() -> None:
    cap = decide("aarch64", "x86_64", GOOD)
    assert cap.runs and cap.emulated
    assert "qemu-aarch64" in cap.reason and "flags PF" in cap.reason


@pytest.mark.parametrize(
    ("state", "why", "commands"),
    [
        (
            BinfmtState(True, True, None, False),
            "no qemu-aarch64 entry",
            [
                "apt-get update",
                "apt-get install -y qemu-user-static binfmt-support",
                "update-binfmts --enable qemu-aarch64",
            ],
        ),
        (
            BinfmtState(False, False, None, False),
            "binfmt_misc is not mounted",
            [
                "apt-get update",
                "apt-get install -y qemu-user-static binfmt-support",
                "mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc",
                "update-binfmts --enable qemu-aarch64",
            ],
        ),
        (
            BinfmtState(True, True, BinfmtEntry("qemu-aarch64", False, "/x", "PF"), True),
            "entry in /proc/sys/fs/binfmt_misc is disabled",
            ["update-binfmts --enable qemu-aarch64"],
        ),
        (
            BinfmtState(True, False, GOOD.entry, True),
            "binfmt_misc is disabled",
            ["echo 1 > /proc/sys/fs/binfmt_misc/status"],
        ),
    ],
)
def test_what_is_missing_and_the_exact_commands(state: BinfmtState, why: str, commands: list[str]) -> None:
    cap = decide("aarch64", "x86_64", state)
    assert not cap.runs and cap.how == "no"
    assert why in cap.reason, cap.reason
    assert list(cap.fix) == commands
    assert list(enable_commands("aarch64", state)) == commands


def test_an_unknown_cpu_is_said() -> None:
    cap = decide("riscv64", "x86_64", GOOD)
    assert not cap.runs and "no emulation of riscv64" in cap.reason


def test_read_state_from_a_folder_like_the_kernels(tmp_path: Path) -> None:
    assert read_state("aarch64", tmp_path / "absent") == BinfmtState(False, False, None, False)
    (tmp_path / "status").write_text("enabled\n")
    assert read_state("aarch64", tmp_path) == BinfmtState(True, True, None, False)
    (tmp_path / "qemu-aarch64").write_text(
        ENTRY.replace("/usr/libexec/qemu-binfmt/aarch64-binfmt-P", str(tmp_path / "status"))
    )
    state = read_state("aarch64", tmp_path)
    assert state.entry is not None and state.entry.enabled and state.interpreter_exists


def test_require_names_the_commands(tmp_path: Path) -> None:
    (tmp_path / "status").write_text("enabled\n")
    if capability("aarch64").how == "native":
        pytest.skip("an aarch64 machine runs aarch64 natively")
    with pytest.raises(
        ToolError,
        match=r"cannot run aarch64 programs: no qemu-aarch64 entry.*`apt-get install -y qemu-user-static binfmt-support`",
    ):
        require("aarch64", tmp_path)
