"""release/resources/cpus.py: the CPU table read once, validated on load; a broken table is refused by name."""

from __future__ import annotations

import importlib.resources

import pytest

from release.binary import ldd
from release.binary.elf import MACHINE_NAMES
from release.resources import cpus as cpus_module
from release.resources.cpus import CpuTableError, cpus, parse

TEXT = importlib.resources.files("release.resources").joinpath("cpus.toml").read_text(encoding="utf-8")


def test_the_packaged_table_holds_every_fact_the_stages_ask_for() -> None:
    table = cpus()
    arm = table.by_name["aarch64"]
    assert (arm.triplet, arm.debian, arm.oci, arm.qemu, arm.cuda_target) == (
        "aarch64-linux-gnu",
        "arm64",
        "linux/arm64",
        "qemu-aarch64",
        "sbsa-linux",
    )
    assert (
        arm.cross_gxx == "aarch64-linux-gnu-g++"
        and arm.platform_tag("manylinux_2_28") == "manylinux_2_28_aarch64"
    )
    x86 = table.by_name["x86_64"]
    assert (x86.elf_machine, x86.elf_class, x86.little_endian, x86.cuda_target) == (
        62,
        64,
        True,
        "x86_64-linux",
    )
    assert x86.qemu is None  # emulation is offered for aarch64 only
    assert table.manylinux == ("x86_64", "aarch64", "ppc64le", "s390x", "i686", "armv7l")
    assert table.normalize("AMD64") == "x86_64" and table.normalize("arm64") == "aarch64"
    assert table.normalize("mips") == "mips"  # unknown: as given
    assert table.of_platform_tag("manylinux_2_17_ppc64le") is table.by_name["ppc64le"]
    assert table.of_platform_tag("linux_ppc64") is table.by_name["ppc64"]
    assert table.of_platform_tag("any") is None
    assert cpus() is cpus()  # read once


def test_the_elf_readers_name_arches_by_the_table() -> None:
    assert MACHINE_NAMES[183] == "aarch64" and MACHINE_NAMES[190] == "cuda"
    assert ldd._ARCH[(21, 64, False)] == "ppc64" and ldd._ARCH[(3, 32, True)] == "i686"
    assert ldd._X86_LEVELS == ("x86_64", "x86_64_v2", "x86_64_v3", "x86_64_v4")


def test_host_arch_goes_through_the_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("release.resources.cpus._platform.machine", lambda: "arm64")
    assert cpus_module.host_arch() == "aarch64"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda t: t.replace('debian = "arm64"\n', ""), "arch.aarch64: missing debian"),
        (
            lambda t: t.replace("machine = 183", "machine = 62"),
            "the same ELF machine, class and byte order as x86_64",
        ),
        (lambda t: t.replace('aliases = ["arm64"]', 'aliases = ["amd64"]'), "'amd64' already names x86_64"),
        (lambda t: t.replace('byteorder = "little" }', 'byteorder = "middle" }', 1), "arch.x86_64.elf"),
        (
            lambda t: t.replace("manylinux = true", 'manylinux = "yes"', 1),
            "arch.x86_64.manylinux: must be true or false",
        ),
        (lambda t: t.replace("schema_version = 1", "schema_version = 2"), "schema_version: must be 1"),
        (
            lambda t: t.replace('qemu = "qemu-aarch64"', 'qemu = "qemu-aarch64"\nqemu_flags = "-L"'),
            "unknown key qemu_flags",
        ),
    ],
)
def test_a_broken_table_is_refused_by_key(change: object, said: str) -> None:
    assert callable(change)
    with pytest.raises(CpuTableError, match="fix the table") as info:
        parse(change(TEXT), "cpus.toml")
    assert said in str(info.value) and str(info.value).startswith("cpus.toml: ")
    assert info.value.return_code == 3


def test_the_unchanged_text_passes() -> None:
    assert parse(TEXT).by_name.keys() == cpus().by_name.keys()
