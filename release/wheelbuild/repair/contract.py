"""The CUDA repair: the row's contract applied to whatever wheel the build produced.

rows.toml already states what a wheel of a row must be; a package written without
wheelwright in mind states none of it. After the build and ``auditwheel repair`` (host and
container builds alike), this step holds the wheel to the row and fixes what it can:

- the version's local label: ``+cu130`` for a CUDA row (none for a CPU row), in the wheel's
  file name, the ``.dist-info`` (and ``.data``) folder name and ``METADATA``'s ``Version``;
- ``Requires-Dist`` on the train's CUDA packages (``nvidia-cuda-runtime==13.0.*``), or, for a
  row with a dependency channel (``[[dependency]]``, e.g. torch), on that package, which
  brings the CUDA runtime itself;
- a ``RUNPATH`` from each library that needs a CUDA library to the folder where that
  library's pip package installs it (``$ORIGIN/../nvidia/cu13/lib``), computed from the
  library's place in the wheel; absolute and non-``$ORIGIN`` entries are dropped;
- ``RECORD`` rewritten; members in a fixed order, timestamps from ``SOURCE_DATE_EPOCH``
  (:mod:`release.wheelbuild.repair.wheelfile`).

A wheel that already satisfies the contract is left alone, byte for byte. What cannot be
fixed stops the build naming the library: a statically linked CUDA runtime where the row
wants the shared one from its package, a CUDA library no package provides for the row's
CUDA major (or of another major), a CPU wheel that needs a CUDA library or carries device
code, a label of another variant.

:func:`decide` is pure (facts in, a :class:`Fix` out); :func:`read_facts` and
:func:`apply_fix` are the effects (reading the zip and ELF headers; patchelf, rewriting).
"""

from __future__ import annotations

import dataclasses
import email.parser
import posixpath
import shutil
import zipfile
from collections.abc import Sequence
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from release.binary.elf import ElfError, is_elf, read_elf
from release.core import proc
from release.core.errors import InputError, StepFailed
from release.policy.matrix import Row
from release.policy.model import CudaPackage, Dependency
from release.resources import cuda
from release.runpath import origin_entry, runpath_for
from release.wheelbuild.repair.wheelfile import install_path, rewrite

PATCHELF_TIMEOUT_S = 300.0
# The host-side registration of device code that only the CUDA runtime serves.
REGISTRATION_SECTION = ".nvFatBinSegment"
# Bytes only the CUDA runtime's own code holds (its shared-memory name): found in a library
# that does not load libcudart.so, the runtime was linked in statically.
STATIC_RUNTIME_MARK = b"/cudart.shm."
_SCAN_CHUNK = 1 << 20


class ContractError(StepFailed):
    """The wheel cannot be brought to the row's contract; the message names each library."""


# --------------------------------------------------------------------------- the row's side


@dataclasses.dataclass(frozen=True)
class RowContract:
    """What a wheel of one row must be."""

    row_id: str
    label: str | None  # "cu130"; None for a CPU row
    train: str | None  # "13.0"
    packages: tuple[CudaPackage, ...]
    channels: tuple[str, ...]  # dependency channel packages that bring the CUDA runtime (torch)

    @property
    def cuda_major(self) -> int | None:
        return None if self.train is None else int(self.train.split(".")[0])

    @property
    def shared_runtime(self) -> bool:
        """The row wants the CUDA runtime shared, from a package (it lists one's libcudart)."""
        return any(_is_runtime(lib) for p in self.packages for lib in p.libraries)

    def describe(self) -> tuple[str, ...]:
        if self.label is None:
            return (
                "version without a local label; no CUDA Requires-Dist",
                "no library needs a CUDA library or carries device code (else the build stops naming it)",
            )
        if self.channels:
            requires = f"Requires-Dist on the dependency channel {', '.join(self.channels)} (it brings the CUDA runtime)"
        else:
            requires = "Requires-Dist " + ", ".join(requirement_text(p, self.train) for p in self.packages)
        places = ", ".join(f"{lib} -> {p.installs_to}" for p in self.packages for lib in p.libraries)
        return (
            f"version label +{self.label} (file name, .dist-info folder, METADATA)",
            requires + " (added where the wheel declares none)",
            f"RUNPATH $ORIGIN/<relative> from each library that needs a CUDA library to where its package "
            f"installs it ({places}; other CUDA libraries from release/resources/cuda.toml)",
            "the CUDA runtime shared (a library that links it statically stops the build)"
            if self.shared_runtime
            else "the CUDA runtime as the build linked it (no runtime package in the policy)",
            "a wheel that already satisfies all of it is kept byte for byte",
        )


def channels_for(row: Row, dependencies: Sequence[Dependency]) -> tuple[str, ...]:
    """The dependency-channel packages of a CUDA row (pure; the same rule as the channel check)."""
    if not row.is_cuda:
        return ()
    return tuple(
        d.package
        for d in dependencies
        if (not d.variants or row.variant in d.variants) and (not d.platforms or row.platform in d.platforms)
    )


def row_contract(row: Row, dependencies: Sequence[Dependency] = ()) -> RowContract:
    return RowContract(
        row.id, row.local_version, row.train, row.cuda_packages, channels_for(row, dependencies)
    )


def _is_runtime(soname: str) -> bool:
    lib = cuda.library(soname)
    return lib is not None and lib.kind == "runtime"


def requirement_text(package: CudaPackage, train: str | None) -> str:
    """The Requires-Dist added for a package: the runtime pinned to the train (its versions
    follow CUDA's), any other package by name (their versions do not)."""
    if train is not None and any(_is_runtime(lib) for lib in package.libraries):
        return f"{package.name}=={train}.*"
    return package.name


# --------------------------------------------------------------------------- the wheel's side (facts)


@dataclasses.dataclass(frozen=True)
class Library:
    member: str  # its name in the wheel
    installs_to: str | None  # relative to site-packages; None for .data/scripts, headers, data
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]
    registers_device_code: bool  # has the CUDA runtime's registration section
    has_device_code: bool  # has a .nv_fatbin section
    runtime_inside: bool  # holds the CUDA runtime's own code (statically linked)


@dataclasses.dataclass(frozen=True)
class WheelFacts:
    filename: str
    dist_info: str  # "pkg-0.1.0.dist-info"
    data_dir: str | None  # "pkg-0.1.0.data", if the wheel has one
    metadata: str
    libraries: tuple[Library, ...]


@dataclasses.dataclass(frozen=True)
class Fix:
    """What the contract changes in one wheel (nothing: the wheel is kept as it is)."""

    version: str | None  # the new version, when the label is added
    requires: tuple[str, ...]  # Requires-Dist lines to add
    runpaths: tuple[tuple[str, tuple[str, ...]], ...]  # (member, new RUNPATH)
    notes: tuple[str, ...]  # one line per change, for the log

    @property
    def needed(self) -> bool:
        return bool(self.version or self.requires or self.runpaths)


# --------------------------------------------------------------------------- decisions (pure)


def _declared(metadata: str) -> list[Requirement]:
    out: list[Requirement] = []
    for text in email.parser.Parser().parsestr(metadata, headersonly=True).get_all("Requires-Dist") or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and "extra" in str(req.marker):
            continue  # an optional extra does not bring anything by default
        out.append(req)
    return out


def _satisfies(declared: list[Requirement], package: CudaPackage) -> bool:
    forms = [Requirement(package.name), *(Requirement(a) for a in package.also_accepted)]
    for req in declared:
        for form in forms:
            if canonicalize_name(req.name) == canonicalize_name(form.name) and form.extras <= req.extras:
                return True
    return False


def required_entry(installs_to: str, lib_installs_to: str) -> str:
    """``$ORIGIN/<relative path>`` from a library's folder to a package's folder (pure; the rule is
    :func:`release.runpath.origin_entry`)."""
    return origin_entry(lib_installs_to, posixpath.dirname(installs_to))


def _cuda_home_of(soname: str, contract: RowContract, library: str) -> tuple[str | None, str | None]:
    """(folder the soname's package installs it to, problem)."""
    for package in contract.packages:
        if soname in package.libraries:
            return package.installs_to, None
    lib = cuda.library(soname)
    assert lib is not None and contract.cuda_major is not None
    majors = lib.cuda_majors_of(soname)
    if majors and contract.cuda_major not in majors:
        which = " or ".join(str(m) for m in majors)
        return None, (
            f"{library} needs {lib.describe(soname)}, of CUDA {which}, but row {contract.row_id} is CUDA "
            f"{contract.train}: the build used another CUDA than the row's"
        )
    shipping = lib.shipped_for(contract.cuda_major)
    if shipping is None or (shipping.soname is not None and not shipping.ships(soname)):
        return None, (
            f"{library} needs {soname} ({lib.title}), which no pip package provides for CUDA "
            f"{contract.cuda_major}: link it statically, or ship without it"
        )
    return shipping.installs_to, None


def _runtime_problem(lib: Library, contract: RowContract) -> str | None:
    if not contract.shared_runtime or any(_is_runtime(n) for n in lib.needed):
        return None
    if lib.runtime_inside or lib.registers_device_code:
        runtime = next(lib_ for p in contract.packages for lib_ in p.libraries if _is_runtime(lib_))
        return (
            f"{lib.member} links the CUDA runtime statically (it registers device code or holds the "
            f"runtime's code without loading {runtime}); row {contract.row_id} wants it shared from its "
            "package: build with CMake's -DCMAKE_CUDA_RUNTIME_LIBRARY=Shared (wheelwright passes it in "
            "CMAKE_ARGS; a CMakeLists.txt that sets it Static overrides that), nvcc -cudart shared, or "
            "meson's dependency('cuda', static: false)"
        )
    return None


def _cpu_problems(lib: Library) -> list[str]:
    problems: list[str] = []
    cuda_needed = [n for n in lib.needed if cuda.is_cuda_library(n)]
    if cuda_needed:
        problems.append(
            f"{lib.member} needs {', '.join(cuda_needed)}, but a CPU wheel needs no CUDA library: the "
            "build found CUDA (a fixed path like /usr/local/cuda?) and built its CUDA variant"
        )
    if lib.has_device_code or lib.runtime_inside:
        problems.append(f"{lib.member} carries device code or the CUDA runtime: a CPU wheel must not")
    return problems


def _version_change(facts: WheelFacts, contract: RowContract) -> tuple[str | None, list[str]]:
    try:
        _name, version, _build, _tags = parse_wheel_filename(facts.filename)
    except InvalidWheelFilename as exc:
        raise InputError(f"{facts.filename} is not a wheel name: {exc}") from None
    local = version.local or None
    if local == contract.label:
        return None, []
    if local is not None:
        want = f"+{contract.label}" if contract.label else "no local label"
        return None, [
            f"{facts.filename}: its version {version} carries +{local}; row {contract.row_id} needs {want} "
            "(a project labels its versions itself only with the row's label)"
        ]
    return f"{version.public}+{contract.label}", []


def decide(facts: WheelFacts, contract: RowContract) -> Fix:
    """What the contract changes in the wheel (pure); ContractError listing every problem."""
    problems: list[str] = []
    notes: list[str] = []
    version, version_problems = _version_change(facts, contract)
    problems += version_problems
    if version:
        notes.append(f"version label: {facts.filename} becomes version {version}")
    requires: list[str] = []
    if contract.label is not None:
        declared = _declared(facts.metadata)
        if contract.channels:
            names = {canonicalize_name(r.name) for r in declared}
            requires = [c for c in contract.channels if canonicalize_name(c) not in names]
        else:
            requires = [
                requirement_text(p, contract.train) for p in contract.packages if not _satisfies(declared, p)
            ]
        notes += [f"Requires-Dist: {r} added" for r in requires]
    runpaths: list[tuple[str, tuple[str, ...]]] = []
    for lib in facts.libraries:
        if contract.label is None:
            problems += _cpu_problems(lib)
            continue
        problem = _runtime_problem(lib, contract)
        if problem:
            problems.append(problem)
        change, lib_problems = _runpath_change(lib, contract)
        problems += lib_problems
        if change is not None:
            runpaths.append((lib.member, change))
            notes.append(f"RUNPATH of {lib.member}: {':'.join(change)}")
    if problems:
        raise ContractError(
            f"row {contract.row_id}: {facts.filename} cannot be brought to the row's contract:\n"
            + "\n".join(f"  - {p}" for p in problems)
        )
    return Fix(version, tuple(requires), tuple(runpaths), tuple(notes))


def _runpath_change(lib: Library, contract: RowContract) -> tuple[tuple[str, ...] | None, list[str]]:
    wanted: list[str] = []
    problems: list[str] = []
    for soname in lib.needed:
        found = cuda.library(soname)
        if found is None or found.is_driver:
            continue
        if lib.installs_to is None:
            problems.append(f"{lib.member} needs {soname} but is not installed into site-packages")
            continue
        home, problem = _cuda_home_of(soname, contract, lib.member)
        if problem:
            problems.append(problem)
        elif home is not None:
            wanted.append(home)
    if not wanted or lib.installs_to is None:
        return None, problems
    # the one rule: the repair writes what the audit's loader check reads (release.runpath)
    return runpath_for(lib.runpath or lib.rpath, posixpath.dirname(lib.installs_to), wanted), problems


def edit_metadata(text: str, version: str | None, requires: Sequence[str]) -> str:
    """METADATA with ``Version`` replaced and ``Requires-Dist`` lines added after the headers'
    last one (pure); the body (the long description) is kept byte for byte."""
    head, sep, body = text.partition("\n\n")
    if not sep:  # headers only (no long description): keep the text's own ending
        stripped = head.rstrip("\n")
        head, sep, body = stripped, head[len(stripped) :], ""
    lines = head.split("\n")
    if version is not None:
        found = [i for i, ln in enumerate(lines) if ln.startswith("Version:")]
        if len(found) != 1:
            raise InputError(f"METADATA has {len(found)} Version headers; a wheel has exactly one")
        lines[found[0]] = f"Version: {version}"
    if requires:
        last = max(
            (i for i, ln in enumerate(lines) if ln.startswith("Requires-Dist:")), default=len(lines) - 1
        )
        lines[last + 1 : last + 1] = [f"Requires-Dist: {r}" for r in requires]
    return "\n".join(lines) + sep + body


# --------------------------------------------------------------------------- effects


def _scan(path: Path, mark: bytes) -> bool:
    tail = b""
    with path.open("rb") as f:
        while chunk := f.read(_SCAN_CHUNK):
            if mark in tail + chunk:
                return True
            tail = chunk[-len(mark) :]
    return False


def _library(member: str, path: Path, data_dir: str | None) -> Library | None:
    try:
        if not is_elf(path):
            return None
        info = read_elf(path)
    except ElfError:
        return None
    names = {s.name for s in info.sections}
    needs_runtime = any(_is_runtime(n) for n in info.needed)
    return Library(
        member=member,
        installs_to=install_path(member, data_dir),
        needed=info.needed,
        runpath=info.runpath,
        rpath=info.rpath,
        registers_device_code=REGISTRATION_SECTION in names,
        has_device_code=".nv_fatbin" in names,
        runtime_inside=not needs_runtime and _scan(path, STATIC_RUNTIME_MARK),
    )


def read_facts(wheel: Path, scratch: Path) -> WheelFacts:
    """Read what the contract looks at; ELF members are extracted into ``scratch``."""
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        dist_infos = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
        if len(dist_infos) != 1:
            raise InputError(
                f"{wheel.name} has {len(dist_infos)} .dist-info folders; a wheel has exactly one"
            )
        dist_info = dist_infos[0]
        data_dirs = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".data")})
        metadata = zf.read(f"{dist_info}/METADATA").decode("utf-8")
        libraries: list[Library] = []
        for index, name in enumerate(sorted(names)):
            base = name.rsplit("/", 1)[-1]
            if name.endswith("/") or not (base.endswith(".so") or ".so." in base):
                continue
            target = scratch / str(index)
            with zf.open(name) as src, target.open("wb") as dst:
                shutil.copyfileobj(src, dst)
            lib = _library(name, target, data_dirs[0] if data_dirs else None)
            if lib is not None:
                libraries.append(lib)
    return WheelFacts(wheel.name, dist_info, data_dirs[0] if data_dirs else None, metadata, tuple(libraries))


def _renamed(folder: str, version: str) -> str:
    stem, _, suffix = folder.rpartition(".")
    name = stem.rsplit("-", 1)[0]
    return f"{name}-{version}.{suffix}"


def apply_fix(
    wheel: Path,
    facts: WheelFacts,
    fix: Fix,
    out_dir: Path,
    *,
    patchelf: Path,
    epoch: int | None,
    scratch: Path,
) -> Path:
    """Write the fixed wheel into ``out_dir`` (its new name); the input is not changed."""
    try:
        _name, version, build, _tags = parse_wheel_filename(wheel.name)
        new_version = Version(fix.version) if fix.version else version
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise InputError(f"{wheel.name}: {exc}") from None
    dist_info = _renamed(facts.dist_info, str(new_version)) if fix.version else facts.dist_info
    renames = {facts.dist_info: dist_info}
    if facts.data_dir and fix.version:
        renames[facts.data_dir] = _renamed(facts.data_dir, str(new_version))
    replace: dict[str, bytes] = {
        f"{dist_info}/METADATA": edit_metadata(facts.metadata, fix.version, fix.requires).encode("utf-8")
    }
    with zipfile.ZipFile(wheel) as zf:
        for index, (member, runpath) in enumerate(fix.runpaths):
            target = scratch / f"patch-{index}"
            target.write_bytes(zf.read(member))
            proc.run(
                [patchelf / "patchelf", "--set-rpath", ":".join(runpath), target],
                timeout=PATCHELF_TIMEOUT_S,
                step=f"setting the RUNPATH of {member}",
            )
            new_member = member
            for old, new in renames.items():
                if member.startswith(old + "/"):
                    new_member = new + member[len(old) :]
            replace[new_member] = target.read_bytes()
    parts = wheel.name[: -len(".whl")].split("-")
    tag_text = "-".join(parts[-3:])  # python-abi-platform, as the build wrote them
    build_part = f"-{build[0]}{build[1]}" if build else ""
    dest = out_dir / f"{parts[0]}-{new_version}{build_part}-{tag_text}.whl"
    rewrite(wheel, dest, dist_info=dist_info, renames=renames, replace=replace, epoch=epoch)
    return dest


def apply_contract(
    wheel: Path, contract: RowContract, *, work: Path, patchelf: Path, epoch: int | None
) -> tuple[Path, Fix]:
    """Hold ``wheel`` to ``contract``: itself when it already satisfies it, else the fixed copy
    written into ``work/contract/``. ContractError for what cannot be fixed."""
    scratch = work / "contract-scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        facts = read_facts(wheel, scratch)
        fix = decide(facts, contract)
        if not fix.needed:
            return wheel, fix
        out = work / "contract"
        out.mkdir(parents=True, exist_ok=True)
        return apply_fix(wheel, facts, fix, out, patchelf=patchelf, epoch=epoch, scratch=scratch), fix
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
