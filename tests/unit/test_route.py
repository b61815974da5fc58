"""release/route.py: a row's route on this machine, every combination, from facts given as values (pure);
and gather_facts, the one effect, on this machine."""

from __future__ import annotations

import pytest

from release.resources.cpus import host_arch
from release.route import BUILD_HOWS, SMOKE_HOWS, Emulation, MachineFacts, gather_facts, route

X86 = MachineFacts("x86_64")
QEMU_ARM = Emulation(
    "aarch64", True, "aarch64 programs run under qemu-user (qemu-aarch64: /usr/bin/qemu-aarch64)"
)
NO_QEMU = Emulation(
    "aarch64",
    False,
    "x86_64 cannot run aarch64 programs: no qemu-aarch64 entry in /proc/sys/fs/binfmt_misc",
    ("apt-get update", "apt-get install -y qemu-user-static binfmt-support"),
)
X86_EMULATING = MachineFacts("x86_64", (QEMU_ARM,), frozenset({("aarch64", "3.11"), ("aarch64", "3.12")}))


def test_a_native_row_builds_and_smokes_natively() -> None:
    r = route("x86_64", "host", X86, ("3.12",))
    assert (r.build, r.smoke, r.backend, r.foreign, r.cross) == (
        "host-native",
        "native",
        "host",
        False,
        False,
    )
    assert r.triplet is None and r.cross_gxx is None and r.oci == "linux/amd64"
    assert r.smoke_reason == "x86_64 is this machine's own CPU"


def test_an_aarch64_row_on_x86_64_with_binfmt_is_cross_built_and_smoked_emulated() -> None:
    r = route("aarch64", "host", X86_EMULATING, ("3.11", "3.12"))
    assert (r.build, r.smoke, r.foreign, r.cross) == ("host-cross", "emulated", True, True)
    assert (r.triplet, r.cross_gxx, r.qemu, r.oci) == (
        "aarch64-linux-gnu",
        "aarch64-linux-gnu-g++",
        "qemu-aarch64",
        "linux/arm64",
    )
    assert r.cross_packages == ("g++-aarch64-linux-gnu", "libc6-dev-arm64-cross")
    assert "built host-cross, smoke-tested emulated" in r.describe()


def test_an_aarch64_row_on_x86_64_without_binfmt_cannot_be_smoked_and_says_the_fix() -> None:
    r = route("aarch64", "host", MachineFacts("x86_64", (NO_QEMU,)), ("3.12",))
    assert (r.build, r.smoke) == ("host-cross", "cannot")
    assert r.smoke_reason == (
        "x86_64 cannot run aarch64 programs: no qemu-aarch64 entry in /proc/sys/fs/binfmt_misc; to run them, as "
        "root: `apt-get update`; `apt-get install -y qemu-user-static binfmt-support`"
    )
    assert r.fix == NO_QEMU.fix


def test_an_aarch64_row_whose_python_has_no_emulated_cpython_cannot_be_smoked() -> None:
    facts = MachineFacts(
        "x86_64", (QEMU_ARM,), frozenset(), (("aarch64", "3.13", "no recipe for CPython 3.13"),)
    )
    r = route("aarch64", "host", facts, ("3.13",))
    assert (r.smoke, r.smoke_reason) == ("cannot", "no recipe for CPython 3.13")
    unasked = route("aarch64", "host", MachineFacts("x86_64", (QEMU_ARM,)), ("3.10",))
    assert unasked.smoke == "cannot" and "no emulated CPython 3.10 for aarch64" in unasked.smoke_reason


def test_emulation_never_asked_about_is_not_assumed() -> None:
    r = route("aarch64", "host", X86, ())
    assert r.smoke == "cannot" and "was not asked" in r.smoke_reason


@pytest.mark.parametrize(
    ("arch", "facts", "build"),
    [("x86_64", X86, "container-native"), ("aarch64", X86_EMULATING, "container-emulated")],
)
def test_a_container_build_is_native_or_emulated_by_the_rows_cpu(
    arch: str, facts: MachineFacts, build: str
) -> None:
    r = route(arch, "container", facts, ("3.12",))
    assert r.build == build and r.backend == "container" and not r.cross and r.triplet is None


def test_on_an_aarch64_machine_aarch64_is_native_and_x86_64_is_foreign() -> None:
    arm = MachineFacts("aarch64")
    r = route("aarch64", "host", arm, ("3.12",))
    assert (r.build, r.smoke, r.oci) == ("host-native", "native", "linux/arm64")
    x = route("x86_64", "host", arm, ("3.12",))
    assert (x.build, x.triplet, x.smoke) == ("host-cross", "x86_64-linux-gnu", "cannot")
    assert x.qemu is None  # no x86_64 emulation is offered (cpus.toml names no qemu for it)


def test_every_route_is_one_of_the_named_ones() -> None:
    seen = {
        (route(a, b, f, ("3.12",)).build, route(a, b, f, ("3.12",)).smoke)
        for a in ("x86_64", "aarch64")
        for b in ("host", "container")
        for f in (X86, X86_EMULATING, MachineFacts("aarch64"))
    }
    assert {b for b, _ in seen} == set(BUILD_HOWS) and {s for _, s in seen} <= set(SMOKE_HOWS)


def test_gather_facts_reads_this_machine() -> None:
    """The one effect: this machine's CPU, and for another CPU what binfmt_misc says (no sysroot made)."""
    facts = gather_facts(arches=("x86_64", "aarch64"))
    assert facts.arch == host_arch()
    (other,) = facts.emulation
    assert other.arch != host_arch() and other.reason
    assert gather_facts().emulation == ()
