"""Load one ``[train."X.Y"]`` table: variant, builder images, arch lists, CUDA packages, toolchain pins.

Every rule about a train is checked here, at load, against the file being loaded,
including that the PyPI toolchain pins an nvcc of exactly the train's version (the
build relies on it and does not check again).
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from release.policy.archs import Arch, ArchSyntaxError, parse_arch
from release.policy.checker import Checker, brief, join, kind
from release.policy.model import MANYLINUX_ARCHS, SCHEMA, CudaPackage, Train
from release.policy.versions import name_problem, train_variant, version_key
from release.resources.cuda import cuda

NVCC_PACKAGE = "nvidia-cuda-nvcc"


def pypi_nvcc_version(pins: Sequence[str]) -> str | None:
    """The exact ``nvidia-cuda-nvcc`` version the pins name (``13.2.86``), or None."""
    for pin in pins:
        req = Requirement(pin)
        if canonicalize_name(req.name) == NVCC_PACKAGE:
            specs = list(req.specifier)
            if len(specs) == 1 and specs[0].operator == "==":
                return specs[0].version
    return None


def _first_line(exc: Exception) -> str:
    """packaging's message, without the lines that repeat the input under a caret."""
    return (str(exc).splitlines() or [""])[0]


def _same_train(version: str, train: str) -> bool:
    """``13.0.88`` is CUDA 13.0; ``13.2.86`` is not; neither is ``13`` nor ``13.0.88.dev1`` of 12.6."""
    try:
        release = Version(version).release
    except ValueError:  # InvalidVersion, or a part of 5,000 digits that int() refuses
        return False
    major, minor = train.split(".")
    return len(release) >= 2 and release[:2] == (int(major), int(minor))


def _pins(c: Checker, value: object, where: str, version: str) -> tuple[str, ...]:
    pins = c.strings(value, where, nonempty=False)
    names: dict[str, int] = {}
    nvcc: tuple[int, str] | None = None
    for i, pin in enumerate(pins):
        try:
            req = Requirement(pin)
        except InvalidRequirement as exc:
            raise c.fail(f"{where}[{i}]", f"{brief(pin)} is not a requirement: {_first_line(exc)}") from None
        specs = list(req.specifier)
        if len(specs) != 1 or specs[0].operator != "==" or "*" in specs[0].version:
            raise c.fail(
                f"{where}[{i}]",
                f"{brief(pin)} must be pinned to one exact version (name==X.Y.Z); the toolchain parts must match",
            )
        name = canonicalize_name(req.name)
        if name in names:
            raise c.fail(f"{where}[{i}]", f"pins {name} again (first at [{names[name]}]); pin it once")
        names[name] = i
        if name == NVCC_PACKAGE:
            nvcc = (i, specs[0].version)
    if pins and nvcc is None:
        raise c.fail(
            where, f"pins no {NVCC_PACKAGE}==X.Y.Z; a PyPI toolchain needs nvcc pinned with its parts"
        )
    if nvcc is not None and not _same_train(nvcc[1], version):
        raise c.fail(
            f"{where}[{nvcc[0]}]",
            f"pins {NVCC_PACKAGE}=={nvcc[1]}, which is not CUDA {version}; pin a {version}.x nvcc",
        )
    return pins


def _per_platform(
    c: Checker, value: object, where: str, platforms: tuple[str, ...], what: str
) -> dict[str, Any]:
    """A table keyed by CPU arch: the matrix's arches are used; another manylinux arch is unused
    by this matrix (noted, not checked: a policy narrowed to x86_64 keeps its aarch64 keys);
    anything else is an unknown platform. Whether every matrix arch is there is the caller's."""
    if not isinstance(value, dict):
        raise c.fail(where, f"expected a table of platform = {what}, got {kind(value)}")
    unused: list[str] = []
    for p in value:
        if p in platforms:
            continue
        if p in MANYLINUX_ARCHS:
            unused.append(p)
            continue
        close = difflib.get_close_matches(p, platforms, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; platforms are: {', '.join(platforms)}"
        raise c.fail(join(where, p), f"unknown platform {brief(p)}{hint}")
    if unused:
        c.note(
            where,
            f"{', '.join(unused)} not in matrix.platforms ({', '.join(platforms)}): unused by this matrix",
        )
    return value


def load_train(
    c: Checker,
    version: str,
    value: object,
    platforms: tuple[str, ...],
    pythons: tuple[str, ...],
    base: Path,
) -> Train:
    """One train table; ``version`` is already a known CUDA train; ``base`` is the policy
    file's folder (build constraints are relative to it)."""
    where = join("train", version)
    t = c.table(value, where, *SCHEMA["train.X.Y"])
    expected_variant = train_variant(version)
    variant = c.string(t["variant"], f"{where}.variant")
    if variant != expected_variant:
        raise c.fail(
            f"{where}.variant",
            f"{brief(variant)} does not match CUDA {version}; the variant for {version} is {expected_variant!r}",
        )

    images = _per_platform(c, t["builder_image"], f"{where}.builder_image", platforms, "image")
    for p in platforms:
        if p not in images:
            raise c.fail(join(f"{where}.builder_image", p), f"missing required key {p!r}")
    builder_images = {p: c.token(images[p], f"{where}.builder_image.{p}") for p in platforms}

    archs_raw = _per_platform(c, t["gpu_archs"], f"{where}.gpu_archs", platforms, "[archs]")
    gpu_archs: dict[str, tuple[Arch, ...]] = {}
    for p in platforms:
        key = f"{where}.gpu_archs.{p}"
        if p not in archs_raw or archs_raw[p] == []:
            raise c.fail(
                key,
                f"CUDA {version} on {p} has no arch list; write the GPU architectures this row must "
                'carry (e.g. ["8.0", "9.0+PTX"]); wheelwright never falls back to detecting the '
                "builder's GPU",
            )
        gpu_archs[p] = _arch_list(c, archs_raw[p], key)

    packages_raw = t["cuda_packages"]
    if not isinstance(packages_raw, list) or not packages_raw:
        raise c.fail(
            f"{where}.cuda_packages",
            'a CUDA train must list the CUDA packages its wheels declare ([[train."X.Y".cuda_packages]])',
        )
    packages = tuple(_package(c, item, f"{where}.cuda_packages[{i}]") for i, item in enumerate(packages_raw))
    pins = _pins(c, t.get("pypi_toolchain", []), f"{where}.pypi_toolchain", version)
    hint = c.string(t.get("host_toolchain_hint", ""), f"{where}.host_toolchain_hint", nonempty=False)

    train_pythons = pythons
    if "pythons" in t:
        train_pythons = c.strings(t["pythons"], f"{where}.pythons")
        for i, py in enumerate(train_pythons):
            if py not in pythons:
                raise c.fail(
                    f"{where}.pythons[{i}]",
                    f"Python {brief(py)[1:-1]} is outside the allowlist matrix.pythons ({', '.join(pythons)}); "
                    "add it there first",
                )
    constraints = (
        c.relative_files(t["build_constraints"], f"{where}.build_constraints", base)
        if "build_constraints" in t
        else ()
    )
    oldest_driver = None
    if "oldest_driver" in t:
        oldest_driver = c.token(t["oldest_driver"], f"{where}.oldest_driver")
        try:
            driver = cuda().driver_named(oldest_driver)
        except ValueError as exc:
            raise c.fail(f"{where}.oldest_driver", str(exc)) from None
        if driver.version > version_key(version):
            raise c.fail(
                f"{where}.oldest_driver",
                f"CUDA {driver.label} is newer than the train ({version}): its own driver runs its wheels; "
                f"write {version} or older",
            )
    return Train(
        version=version,
        variant=variant,
        builder_images=builder_images,
        gpu_archs=gpu_archs,
        cuda_packages=packages,
        pypi_toolchain=pins,
        host_toolchain_hint=hint,
        pythons=train_pythons,
        build_constraints=constraints,
        oldest_driver=oldest_driver,
    )


def _arch_list(c: Checker, value: object, where: str) -> tuple[Arch, ...]:
    items = c.strings(value, where)
    archs: list[Arch] = []
    for i, item in enumerate(items):
        c.token(item, f"{where}[{i}]")  # ASCII, no trailing newline: before the arch pattern sees it
        try:
            archs.append(parse_arch(item))
        except ArchSyntaxError as exc:
            message = str(exc) if len(item) <= 16 else f"{brief(item)} is not an architecture"
            raise c.fail(f"{where}[{i}]", message) from None
    seen: dict[tuple[int, str], int] = {}
    for i, a in enumerate(archs):
        if (a.cc, a.variant) in seen:
            raise c.fail(f"{where}[{i}]", f"{items[i]!r} repeats {items[seen[(a.cc, a.variant)]]!r}")
        seen[(a.cc, a.variant)] = i
    newest = max(a.cc for a in archs)
    for i, a in enumerate(archs):
        if a.ptx and a.cc != newest:
            raise c.fail(
                f"{where}[{i}]",
                f"'+PTX' is on {items[i]!r} but the newest arch of this row is {newest // 10}.{newest % 10}; "
                "ship PTX for the newest arch only (it is what a newer GPU JIT-compiles)",
            )
    if not any(a.ptx for a in archs):
        i = max(range(len(archs)), key=lambda j: archs[j].cc)
        raise c.fail(
            f"{where}[{i}]",
            f"the newest arch {items[i]!r} must also ship as PTX so newer GPUs can JIT it; write '{items[i]}+PTX'",
        )
    return tuple(archs)


def _package(c: Checker, value: object, where: str) -> CudaPackage:
    t = c.table(value, where, *SCHEMA["train.X.Y.cuda_packages"])
    name = c.string(t["name"], f"{where}.name")
    if name_problem(name) is None:
        try:
            parsed: Requirement | None = Requirement(name)
        except InvalidRequirement:
            parsed = None
    else:
        parsed = None
    if parsed is None or parsed.name != name or parsed.specifier or parsed.extras or parsed.marker:
        raise c.fail(
            f"{where}.name",
            f"{brief(name)} is not a bare distribution name; pins come from the train, other forms go in also_accepted",
        )
    also = c.strings(t.get("also_accepted", []), f"{where}.also_accepted", nonempty=False)
    for i, form in enumerate(also):
        try:
            Requirement(form)
        except InvalidRequirement as exc:
            raise c.fail(
                f"{where}.also_accepted[{i}]", f"{brief(form)} is not a requirement: {_first_line(exc)}"
            ) from None
    libs = c.strings(t["libraries"], f"{where}.libraries")
    for i, lib in enumerate(libs):
        c.token(lib, f"{where}.libraries[{i}]")
    installs_to = c.token(t["installs_to"], f"{where}.installs_to")
    pp = PurePosixPath(installs_to)
    if pp.is_absolute() or ".." in pp.parts:
        raise c.fail(
            f"{where}.installs_to",
            f"{installs_to!r} must be relative to site-packages, like 'nvidia/cu13/lib'",
        )
    return CudaPackage(str(canonicalize_name(name)), also, libs, installs_to)
