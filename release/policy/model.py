"""The policy as frozen values: what rows.toml says once it has passed every rule at load."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from release.core.errors import InputError
from release.policy.archs import Arch
from release.policy.targets import IndexTarget, Target
from release.resources.cpus import cpus
from release.resources.cuda_gpus import Gpu

SCHEMA_VERSION = 1
MANYLINUX_ARCHS = cpus().manylinux  # release/resources/cpus.toml
EnableDisable = Literal["enable", "disable"]
RejectAllow = Literal["reject", "allow"]
# How the project tags its wheels: one per CPython (cp312-cp312), CPython's stable ABI
# (cp310-abi3: one wheel for that CPython and newer), or no Python ABI at all (py3-none: a
# package that loads its libraries through ctypes).
WheelTags = Literal["cpython", "abi3", "py3-none"]
WHEEL_TAGS: tuple[WheelTags, ...] = ("cpython", "abi3", "py3-none")
# [[dependency]].gpu_coverage: a row's arch list against the package's device code (release.coverage)
GPU_COVERAGE: tuple[str, ...] = ("report", "fail", "take")

# Every table of the schema: (required keys, optional keys). docs/rows-toml.md documents
# each of them, and tests/unit/test_docs.py checks that the two never drift apart.
SCHEMA: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "top level": (
        ("schema_version", "project", "matrix", "train"),
        ("exclude", "target", "dependency", "jetson"),
    ),
    "project": (
        ("name", "path", "import_name"),
        ("check", "sdk", "rtol", "atol", "wheel_tags", "build_constraints"),
    ),
    "matrix": (
        ("platforms", "pythons", "trains", "cpu_wheel", "manylinux"),
        ("extra_variants", "embedded_device_code"),
    ),
    "train.X.Y": (
        ("variant", "builder_image", "gpu_archs", "cuda_packages"),
        ("pypi_toolchain", "host_toolchain_hint", "pythons", "build_constraints", "oldest_driver"),
    ),
    "train.X.Y.cuda_packages": (("name", "libraries", "installs_to"), ("also_accepted",)),
    "exclude": (("reason",), ("python", "platform")),
    "dependency": (("package", "index"), ("platforms", "variants", "libraries", "gpu_coverage")),
    "jetson": (("gpu", "train", "python", "builder_image"), ()),
    "target.NAME": (("rehearsal",), ("local_server", "index")),
    "target.NAME.index.VARIANT": (("upload_url", "simple_url"), ("max_wheel_mib",)),
}


@dataclass(frozen=True)
class Project:
    name: str
    path: str  # the source folder, relative to the policy file's folder
    import_name: str
    # "module:function": the smoke computation, compared with a CPU reference; None: the smoke
    # step imports the package and loads its libraries only (and its record says so)
    check: str | None
    sdk: str | None  # "module:function" returning include_dir/lib_dir/libraries, if a C++ SDK ships
    rtol: float = 0.0  # the check passes when max_abs_diff <= atol + rtol * max_abs_reference
    atol: float = 0.0  # both 0: exact
    wheel_tags: WheelTags = "cpython"
    build_constraints: tuple[Path, ...] = ()  # absolute; given relative to the policy file's folder

    @property
    def exact(self) -> bool:
        return self.rtol == 0.0 and self.atol == 0.0


@dataclass(frozen=True)
class CudaPackage:
    """A CUDA package a wheel of the train must declare, and where it installs its libraries."""

    name: str  # canonical (normalised) distribution name
    also_accepted: tuple[str, ...]  # requirement forms that count as the same thing
    libraries: tuple[str, ...]  # DT_NEEDED sonames this package provides
    installs_to: str  # site-packages-relative folder holding those libraries


@dataclass(frozen=True)
class Train:
    version: str  # "13.0"
    variant: str  # "cu130"
    builder_images: Mapping[str, str]  # platform -> container image
    gpu_archs: Mapping[str, tuple[Arch, ...]]  # platform -> arch list
    cuda_packages: tuple[CudaPackage, ...]
    pypi_toolchain: tuple[str, ...]  # exact pins; empty: no PyPI toolchain
    host_toolchain_hint: str
    pythons: tuple[str, ...]  # subset of the allowlist
    build_constraints: tuple[Path, ...] = ()  # after the project's; absolute
    # the oldest driver the train's wheels must run on, as written ("13.0" or "580.65.06"): the
    # audit predicts for it and fails a library whose PTX-only GPUs that driver cannot JIT for
    oldest_driver: str | None = None

    @property
    def key(self) -> tuple[int, int]:
        major, minor = self.version.split(".")
        return int(major), int(minor)


@dataclass(frozen=True)
class Exclusion:
    kind: Literal["python", "platform"]
    value: str
    reason: str


@dataclass(frozen=True)
class Dependency:
    """A runtime dependency routed to a channel: checked against that index before any build."""

    package: str
    index: str  # simple index URL, or "pypi"
    platforms: tuple[str, ...]  # empty: every platform
    variants: tuple[str, ...]  # empty: every CUDA variant
    # sonames the package provides at run time (torch: libc10.so, libtorch_cpu.so, ...): a
    # library of the wheel that needs one finds it loaded by the package; never grafted in repair
    libraries: tuple[str, ...] = ()
    # what `coverage` and `plan` do when a row's arch list and this package's device code differ
    # (release.coverage.compare): "report", "fail" the plan, or "take" the package's list
    gpu_coverage: str = "report"

    def applies_to(self, variant: str, platform: str) -> bool:
        """Whether this entry concerns a row (an entry without variants: every row of its platforms)."""
        return (not self.variants or variant in self.variants) and (
            not self.platforms or platform in self.platforms
        )


@dataclass(frozen=True)
class JetsonRow:
    """A ``[[jetson]]`` row (release/policy/jetson.py loads it; release/coverage/jetson.py decides it)."""

    gpu: Gpu  # a Tegra GPU of release/resources/cuda.toml
    train: str  # "13.0"
    variant: str  # the train's: "cu130"
    python: str  # "3.11"
    builder_image: str

    @property
    def platform(self) -> str:
        """The CPU the GPU lives beside (its entry's ``cpus``)."""
        return self.gpu.cpus[0]

    @property
    def id(self) -> str:
        """``cu130-py311-jetson-orin``: the variant, the Python and the GPU's name."""
        slug = re.sub(r"[^a-z0-9]+", "-", self.gpu.name.lower()).strip("-")
        return f"{self.variant}-py{self.python.replace('.', '')}-{slug}"

    def to_json(self) -> dict[str, str]:
        return {
            "id": self.id,
            "gpu": self.gpu.name,
            "cc": self.gpu.cc,
            "platform": self.platform,
            "train": self.train,
            "variant": self.variant,
            "python": self.python,
            "builder_image": self.builder_image,
        }


@dataclass(frozen=True)
class PolicyTarget:
    """Where a release may go. ``local_server``: wheelwright starts a local index (rehearsals)."""

    name: str
    rehearsal: bool
    local_server: bool
    indexes: Mapping[str, IndexTarget]  # variant -> index; empty for a local server

    def to_target(self) -> Target:
        return Target(self.name, self.rehearsal, dict(self.indexes))


@dataclass(frozen=True)
class Policy:
    path: str  # the path as given, for messages
    source: Path  # the absolute path of the file that was read
    sha256: str  # of exactly the bytes that were parsed, computed once at load
    project: Project
    platforms: tuple[str, ...]
    pythons: tuple[str, ...]
    trains: tuple[Train, ...]
    cpu_wheel: bool
    manylinux: str
    extra_variants: RejectAllow
    exclusions: tuple[Exclusion, ...]
    targets: Mapping[str, PolicyTarget] = field(default_factory=dict)
    dependencies: tuple[Dependency, ...] = ()
    notes: tuple[str, ...] = ()  # what the load noticed that is no error (keys unused by this matrix)
    # device code embedded as data (cubin/fatbin images in .rodata): the audit rejects or allows it
    embedded_device_code: RejectAllow = "reject"
    # [[jetson]]: Jetson rows of their own, filled in or refused by coverage (release.coverage.jetson)
    jetsons: tuple[JetsonRow, ...] = ()

    @property
    def variants(self) -> tuple[str, ...]:
        return (("cpu",) if self.cpu_wheel else ()) + tuple(t.variant for t in self.trains)

    def target(self, name: str) -> PolicyTarget:
        if name not in self.targets:
            known = ", ".join(sorted(self.targets)) or "none"
            close = difflib.get_close_matches(name, list(self.targets), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(f"{self.path}: no [target.{name}] (targets: {known}){hint}")
        return self.targets[name]

    def dependencies_for(self, variant: str, platform: str) -> tuple[Dependency, ...]:
        """The dependency entries that concern a row of ``variant`` on ``platform``, in the file's order:
        the one answer the matrix (a row's channels and provided libraries) and coverage ask for."""
        return tuple(d for d in self.dependencies if d.applies_to(variant, platform))

    def build_constraints(self, train: str | None) -> tuple[Path, ...]:
        """The constraints files of a row's build: the project's, then its train's (none for CPU)."""
        extra = self.train(train).build_constraints if train is not None else ()
        return (*self.project.build_constraints, *extra)

    def train(self, version: str) -> Train:
        for t in self.trains:
            if t.version == version:
                return t
        raise KeyError(version)

    def exclusion(self, kind: str, value: str) -> Exclusion | None:
        return next((e for e in self.exclusions if e.kind == kind and e.value == value), None)
