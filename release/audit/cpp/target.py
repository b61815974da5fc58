"""The C++ consumer check's target: the CPU architecture a consumer of the wheel builds for, and the C and
C++ compilers on this machine that build for it.

pip installs a wheel only where its platform tag says, so a consumer of a ``manylinux_2_27_aarch64`` wheel
compiles and links on aarch64, with an aarch64 toolchain: on an aarch64 machine the native ``gcc``/``g++``,
on an x86_64 machine (where the audit runs in CI) a cross toolchain, Debian's ``aarch64-linux-gnu-gcc`` and
``aarch64-linux-gnu-g++`` (packages ``g++-aarch64-linux-gnu`` and ``libc6-dev-arm64-cross``). The wheel's
architecture is its platform tag's (:func:`tag_arch`); a tag that names none, or several, leaves it to the
ELF machine (``e_machine``) of the SDK's libraries (:func:`decide`). A library of another architecture than
the target is a finding of its own, told without any tool (:func:`foreign_libraries`): no consumer on the
target can link it.

A compiler of the wrong architecture never gives a verdict: a compiler is used only after it has
linked a small program whose ELF machine is the target's (:func:`toolchain`, once per process; the native
``g++`` too, which under qemu-user emulation is the real machine's and builds its arch, so there the
target's cross compilers are taken instead); without one the check cannot run here and says so, naming the package to install (:class:`ToolError`, exit 3,
the way a missing ``g++`` stops the audit).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from release.audit.cpp.tools import Sdk
from release.audit.model import Finding, fail
from release.audit.reading.limits import first_few
from release.binary.elf import ElfError, ElfInfo, read_elf
from release.binary.ldd import platform_of
from release.core import proc
from release.core.errors import ToolError
from release.core.sandbox import Sandbox, run_limited
from release.core.sizes import GIB, MIB
from release.resources.cpus import arch as cpu_arch
from release.resources.cpus import host_arch, is_foreign

__all__ = [
    "Target",
    "Toolchain",
    "decide",
    "elf_arch",
    "for_sdk",
    "foreign_finding",
    "foreign_libraries",
    "native",
    "tag_arch",
    "tool_names",
    "toolchain",
]

# A manylinux/musllinux tag's CPU architecture (auditwheel's names; their triplets and cross
# compilers' Debian packages: release/resources/cpus.toml)
_TAG = re.compile(r"^(?:manylinux\d+|manylinux_\d+_\d+|musllinux_\d+_\d+|linux)_(?P<arch>.+)$")
# the probe: a C program linked, a C++ file compiled (a second or two of a cross compiler at most)
PROBE = Sandbox(
    cpu_seconds=60, memory_bytes=2 * GIB, file_bytes=64 * MIB, output_chars=64 * 1024, wall_seconds=120
)


def tag_arch(platform_tags: Iterable[str]) -> str | None:
    """The one CPU architecture the platform tags name (``manylinux_2_27_aarch64``: aarch64); None when
    they name none (``any``) or several. Pure."""
    found = {
        m["arch"]
        for t in platform_tags
        if (m := _TAG.match(t)) is not None and cpu_arch(m["arch"]) is not None
    }
    return found.pop() if len(found) == 1 else None


def elf_arch(info: ElfInfo | None) -> str | None:
    """auditwheel's name of an ELF file's architecture (``aarch64`` for EM_AARCH64); None: unknown."""
    return platform_of(info).base if info is not None else None


@dataclass(frozen=True)
class Target:
    """The architecture a consumer of the wheel builds for, and how it was told (in words)."""

    arch: str
    how: str  # "its platform tag manylinux_2_27_aarch64", "its libraries' ELF machine"


def decide(
    platform_tags: Iterable[str], library_archs: Iterable[str | None], host: str | None = None
) -> Target:
    """The consumer's architecture: the platform tag's (where pip installs the wheel), else the one ELF
    architecture of the SDK's libraries, else this machine's. Pure (``host``: this machine's)."""
    tags = tuple(platform_tags)
    arch = tag_arch(tags)
    if arch is not None:
        named = [t for t in tags if t.endswith(f"_{arch}")]
        return Target(arch, f"its platform tag {named[0]}")
    archs = {a for a in library_archs if a is not None}
    if len(archs) == 1:
        return Target(archs.pop(), "its libraries' ELF machine (its platform tag names no one architecture)")
    here = host or host_arch()
    return Target(here, "this machine's (neither its platform tag nor its libraries name one architecture)")


def foreign_libraries(
    target: Target, libraries: Iterable[tuple[str, ElfInfo | None]]
) -> list[tuple[str, str]]:
    """``(wheel path, architecture)`` of each library built for another architecture than ``target``'s.
    Pure."""
    out = []
    for path, info in libraries:
        arch = elf_arch(info)
        if arch is not None and arch != target.arch:
            out.append((path, arch))
    return out


def for_sdk(check: str, sdk: Sdk, platform_tags: Iterable[str]) -> tuple[Target, Finding | None]:
    """The target of ``sdk``'s consumer (:func:`decide`), and the failing finding when some of its libraries
    are built for another architecture (:func:`foreign_finding`). Pure: the libraries' ELF headers are read."""
    target = decide(platform_tags, [elf_arch(lib.elf) for lib in sdk.libraries])
    foreign = foreign_libraries(target, [(lib.path, lib.elf) for lib in sdk.libraries])
    return target, foreign_finding(check, sdk, target, foreign) if foreign else None


def foreign_finding(check: str, sdk: Sdk, target: Target, foreign: list[tuple[str, str]]) -> Finding:
    """The failing finding for ``sdk``'s libraries built for another architecture than ``target``'s (from
    :func:`foreign_libraries`): no consumer where pip installs the wheel can link them."""
    path, arch = foreign[0]
    more = f" ({len(foreign)} libraries so: {first_few([p for p, _ in foreign])})" if len(foreign) > 1 else ""
    return fail(
        check,
        f"{path} is built for {arch} (its ELF machine), but the wheel is for {target.arch} ({target.how}): a C++ "
        f"program on {target.arch}, where pip installs the wheel, cannot link it{more}; build the SDK's libraries "
        f"for {target.arch}, or tag the wheel for {arch}",
        include_dir=sdk.include_dir,
        libraries=[lib.path for lib in sdk.libraries],
        foreign_libraries=dict(foreign),
        target={"arch": target.arch, "how": target.how},
        repeatable=True,
    )


@dataclass(frozen=True)
class Toolchain:
    """The compilers that build for ``arch`` here: the native ones, or a cross toolchain."""

    arch: str
    gcc: str
    gxx: str
    cross: bool

    def describe(self) -> str:
        kind = "a cross toolchain" if self.cross else "the native toolchain"
        return f"{kind} for {self.arch}: {Path(self.gcc).name}, {Path(self.gxx).name}"

    def to_json(self) -> dict[str, object]:
        return {"arch": self.arch, "gcc": self.gcc, "g++": self.gxx, "cross": self.cross}


def tool_names(arch: str | None, host: str | None = None) -> tuple[str, str, str]:
    """The names of the C compiler, the C++ compiler and the linker for ``arch`` (None: this machine's),
    as PATH finds them: ``gcc``, ``g++``, ``ld`` natively; ``aarch64-linux-gnu-gcc``, ... across. Pure."""
    here = host or host_arch()
    if arch is None or not is_foreign(arch, here):
        return ("gcc", "g++", "ld")
    cpu = cpu_arch(arch)
    triplet = cpu.triplet if cpu is not None else f"{arch}-linux-gnu"
    return (f"{triplet}-gcc", f"{triplet}-g++", f"{triplet}-ld")


def native() -> Toolchain:
    """This machine's own gcc and g++ (ToolError, exit 3, when either is missing)."""
    return toolchain(decide((), ()))


def toolchain(target: Target, *, host: str | None = None, path: str | None = None) -> Toolchain:
    """The compilers for ``target`` on this machine (``path``: the search path, PATH by default).
    ToolError (exit 3) when there are none, or when a cross compiler does not build for the target."""
    here = host or host_arch()
    search = os.environ.get("PATH", os.defpath) if path is None else path
    gcc_name, gxx_name, _ld = tool_names(target.arch, here)
    if not is_foreign(target.arch, here):
        native_gcc, native_gxx = proc.which(gcc_name, path=search), proc.which(gxx_name, path=search)
        own = cpu_arch(target.arch)
        if own is None or _probe(native_gcc, native_gxx, target.arch) is None:
            return Toolchain(target.arch, native_gcc, native_gxx, False)
        # "this machine" is an emulated one (qemu-user runs this Python, the PATH's g++ is the real
        # machine's): its gcc builds another arch, so the target's cross compilers, probed, or nothing
        gcc_name, gxx_name = own.cross_gcc, own.cross_gxx
    cpu = cpu_arch(target.arch)
    packages = " ".join(cpu.cross_packages) if cpu is not None and cpu.cross_packages else None
    install = (
        f"install Debian's {packages} (apt-get install {packages})"
        if packages is not None
        else f"no cross toolchain for {target.arch} is known to wheelwright"
    )
    why = (
        f"the C++ consumer check cannot run here: the wheel is for {target.arch} ({target.how}) and this "
        f"machine is {here}, so a consumer's program must be compiled and linked by a toolchain for "
        f"{target.arch}, never by this machine's {here} compilers"
    )
    gcc, gxx = shutil.which(gcc_name, path=search), shutil.which(gxx_name, path=search)
    if gcc is None or gxx is None:
        missing = " and ".join(n for n, f in ((gcc_name, gcc), (gxx_name, gxx)) if f is None)
        raise ToolError(f"{why}; {missing} {'is' if ' and ' not in missing else 'are'} not on PATH: {install}, "
                        f"or audit the wheel on an {target.arch} machine")  # fmt: skip
    problem = _probe(gcc, gxx, target.arch)
    if problem is not None:
        raise ToolError(f"{why}; {problem}: {install}, or audit the wheel on an {target.arch} machine")
    return Toolchain(target.arch, gcc, gxx, True)


@functools.cache
def _probe(gcc: str, gxx: str, arch: str) -> str | None:
    """Why ``gcc``/``gxx`` cannot build for ``arch``: a C program they cannot link (no C library for it), or
    output of another architecture; None when both build ``arch`` ELF files. Once per process."""
    with tempfile.TemporaryDirectory(prefix="wheelwright-cpp-probe-") as tmp:
        scratch = Path(tmp)
        (scratch / "probe.c").write_text("int main(void) { return 0; }\n", encoding="utf-8")
        (scratch / "probe.cpp").write_text("int probe() { return 0; }\n", encoding="utf-8")
        runs = (
            (gcc, [gcc, "probe.c", "-o", "probe"], "probe", "link a C program"),
            (gxx, [gxx, "-c", "probe.cpp", "-o", "probe_cpp.o"], "probe_cpp.o", "compile a C++ file"),
        )
        for tool, argv, output, what in runs:
            name = Path(tool).name
            try:
                ran = run_limited(argv, cwd=scratch, sandbox=PROBE)
            except OSError as exc:
                return f"{name} cannot run ({exc})"
            if not ran.ok:
                said = " ".join(ran.stderr.split())[-300:]
                return f"{name} cannot {what} ({ran.why(PROBE)}: {said})"
            try:
                built = elf_arch(read_elf(scratch / output))
            except (ElfError, OSError) as exc:
                return f"{name} wrote no readable ELF file ({exc})"
            if built != arch:
                return f"{name} builds {built or 'an unknown architecture'}, not {arch}"
    return None
