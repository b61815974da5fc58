"""A row's route on this machine, decided once, as data: how it is built, how it is smoke-tested, and with
which tools.

:func:`route` is pure: it takes the row's CPU arch (and the Pythons its smoke runs), the backend the build
uses (``host`` or ``container``: ``auto`` is resolved first, by the engine and image probes of
:func:`release.wheelbuild.engine.choose_backend`) and :class:`MachineFacts`, this machine's facts as a
value, and returns a frozen :class:`Route`:

- build: ``host-native`` (this machine's compilers), ``host-cross`` (its cross compilers for another CPU:
  :mod:`release.wheelbuild.host.cross`), ``container-native`` (the row's builder image of this CPU) or
  ``container-emulated`` (another CPU's image, under qemu-user);
- smoke: ``native``, ``emulated`` (a fresh venv of an emulated CPython: :mod:`release.emulate`) or
  ``cannot``, with the reason and the commands that fix it;
- tools: the cross compilers' triplet and their Debian packages, the qemu-user program, the image's OCI
  platform (all from ``release/resources/cpus.toml``).

:func:`gather_facts` is the one effect: this machine's CPU and, for each other CPU asked about, whether
``binfmt_misc`` hands its programs to qemu-user here, and which emulated CPythons have a recipe. The
build (:mod:`release.wheelbuild.run`) and the release's check of what this machine can build and
smoke-test (:func:`release.pipeline.buildable_here`) read the route; no other module compares CPU
names, save the table's reader (:func:`release.resources.cpus.is_foreign`, for callers that hold only an
arch: the emulated smoke's interpreter, the C++ consumer's target); tests/unit/test_route_guard.py."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import host_arch
from release.wheelbuild.backends import Backend

__all__ = [
    "BUILD_HOWS",
    "SMOKE_HOWS",
    "BuildHow",
    "Emulation",
    "MachineFacts",
    "Route",
    "gather_facts",
    "route",
]

BuildHow = Literal["host-native", "host-cross", "container-native", "container-emulated"]
SmokeHow = Literal["native", "emulated", "cannot"]
BUILD_HOWS: tuple[BuildHow, ...] = get_args(BuildHow)
SMOKE_HOWS: tuple[SmokeHow, ...] = get_args(SmokeHow)


@dataclass(frozen=True)
class Emulation:
    """Whether another CPU's programs run on this machine, and how or why not (from ``binfmt_misc``)."""

    arch: str
    runs: bool
    reason: str  # how they run, or why they do not
    fix: tuple[str, ...] = ()  # commands (as root) that make them run


@dataclass(frozen=True)
class MachineFacts:
    """This machine, as the route needs it: its CPU, the other CPUs it emulates, the emulated CPythons."""

    arch: str  # "x86_64"
    emulation: tuple[Emulation, ...] = ()  # one per other CPU asked about
    pythons: frozenset[tuple[str, str]] = frozenset()  # (arch, "3.11"): an emulated CPython with a recipe
    python_problems: tuple[tuple[str, str, str], ...] = ()  # (arch, version, why not)

    def emulation_of(self, arch: str) -> Emulation:
        found = next((e for e in self.emulation if e.arch == arch), None)
        return found or Emulation(
            arch, False, f"whether {arch} programs run on this {self.arch} machine was not asked"
        )


@dataclass(frozen=True)
class Route:
    """How one row is built and smoke-tested on this machine, and with which tools."""

    arch: str  # the row's CPU
    host: str  # this machine's
    backend: Backend  # the backend that builds it (the registry's name)
    build: BuildHow
    smoke: SmokeHow
    smoke_reason: str  # how the smoke runs, or why it cannot
    triplet: str | None = None  # the cross compilers' GNU triplet of a host-cross build
    cross_packages: tuple[str, ...] = ()  # their Debian packages
    qemu: str | None = None  # the qemu-user program of an emulated smoke or container build
    oci: str = ""  # the OCI platform of the row's builder image
    fix: tuple[str, ...] = field(default=())  # what makes a "cannot" smoke possible

    @property
    def foreign(self) -> bool:
        """The row is another CPU's than this machine's."""
        return self.arch != self.host

    @property
    def cross(self) -> bool:
        return self.build == "host-cross"

    @property
    def cross_gxx(self) -> str | None:
        return None if self.triplet is None else f"{self.triplet}-g++"

    def describe(self) -> str:
        """``aarch64 row on this x86_64 machine: built host-cross, smoke-tested emulated (...)``."""
        return (
            f"{self.arch} row on this {self.host} machine: built {self.build}, smoke-tested {self.smoke} "
            f"({self.smoke_reason})"
        )


_BUILDS: dict[tuple[str, bool], BuildHow] = {  # (backend, another CPU's row) -> how it is built
    ("host", False): "host-native",
    ("host", True): "host-cross",
    ("container", False): "container-native",
    ("container", True): "container-emulated",
}


def route(arch: str, backend: Backend, facts: MachineFacts, pythons: Sequence[str] = ()) -> Route:
    """The route of a row of CPU ``arch`` built by ``backend`` on the machine of ``facts``; ``pythons``:
    the Pythons its smoke runs (each needs an emulated CPython on another CPU). Pure."""
    host = facts.arch
    cpu = cpu_arch(arch)
    foreign = arch != host
    build = _BUILDS[(backend, foreign)]
    crossing = cpu is not None and build == "host-cross"
    triplet = cpu.triplet if crossing and cpu is not None else None
    packages = cpu.cross_packages if crossing and cpu is not None else ()
    qemu = cpu.qemu if cpu is not None and foreign else None
    oci = cpu.oci if cpu is not None else f"linux/{arch}"

    def made(smoke: SmokeHow, reason: str, fix: tuple[str, ...] = ()) -> Route:
        return Route(arch, host, backend, build, smoke, reason, triplet, packages, qemu, oci, fix)

    if not foreign:
        return made("native", f"{arch} is this machine's own CPU")
    emulation = facts.emulation_of(arch)
    if not emulation.runs:
        steps = "; ".join(f"`{c}`" for c in emulation.fix)
        why = f"{emulation.reason}; to run them, as root: {steps}" if steps else emulation.reason
        return made("cannot", why, emulation.fix)
    problems = [why for a, v, why in facts.python_problems if a == arch and v in pythons]
    missing = [v for v in pythons if (arch, v) not in facts.pythons]
    if problems:
        return made("cannot", problems[0])
    if missing:
        return made("cannot", f"no emulated CPython {', '.join(missing)} for {arch} is known here")
    return made("emulated", emulation.reason)


def gather_facts(
    pythons: Iterable[tuple[str, str]] = (), *, arches: Iterable[str] = (), host: str | None = None
) -> MachineFacts:
    """This machine's facts for rows of ``arches`` and the (arch, version) CPythons their smoke runs:
    reads ``/proc/sys/fs/binfmt_misc`` and the emulated CPythons' recipes; makes no sysroot and runs
    nothing. The one effect of this module."""
    from release.core.errors import ToolError
    from release.emulate import binfmt
    from release.emulate.recipes import load

    host = host or host_arch()
    wanted = list(pythons)
    others = sorted({*arches, *(a for a, _ in wanted)} - {host})
    emulation = []
    for arch in others:
        cap = binfmt.capability(arch)
        emulation.append(Emulation(arch, cap.runs, cap.reason, cap.fix))
    found: set[tuple[str, str]] = set()
    problems: list[tuple[str, str, str]] = []
    recipes = load() if any(a != host for a, _ in wanted) else None
    for arch, version in wanted:
        if arch == host or recipes is None:
            continue
        try:
            recipes.for_python(version, arch)
        except ToolError as exc:
            problems.append((arch, version, str(exc)))
        else:
            found.add((arch, version))
    return MachineFacts(host, tuple(emulation), frozenset(found), tuple(problems))
