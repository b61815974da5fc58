"""release/wheelbuild/host/link_check.py over the linkers' own words (pure; the real cross linker's
cases are in tests/integration/test_idioms_link.py)."""

from __future__ import annotations

from release.wheelbuild.host.link_check import link_diagnosis, wrong_machine_files

GOLD = "/usr/bin/aarch64-linux-gnu-ld.gold: error: /gone/libtorch.so: incompatible target\n"
LLD = "ld.lld: error: /gone/libc10.so is incompatible with elf64-littleaarch64\n"
BFD = (
    "/usr/bin/aarch64-linux-gnu-ld: /gone/k.o: Relocations in generic ELF (EM: 62)\n"
    "/usr/bin/aarch64-linux-gnu-ld: /gone/k.o: error adding symbols: file in wrong format\n"
)


def test_gold_and_lld_shapes_name_the_file() -> None:
    assert wrong_machine_files(GOLD)[0][0] == "/gone/libtorch.so"
    assert wrong_machine_files(LLD)[0][0] == "/gone/libc10.so"
    diagnosis = link_diagnosis(GOLD + LLD, "aarch64") or ""
    assert "libtorch.so (/gone/libtorch.so)" in diagnosis  # gone: its machine cannot be read
    assert "libc10.so" in diagnosis


def test_one_file_in_two_shapes_is_named_once_with_the_machine_the_linker_printed() -> None:
    assert wrong_machine_files(BFD) == [("/gone/k.o", None, "x86_64")]


def test_a_log_without_those_shapes_has_no_diagnosis() -> None:
    assert (
        link_diagnosis("undefined reference to `cudaMalloc'\ncollect2: error: ld returned 1\n", "aarch64")
        is None
    )
