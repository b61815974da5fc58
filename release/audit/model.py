"""The audit's data: what a wheel is held to, what was found in it, and the verdicts.

Frozen values only. Effects (unzipping, reading ELF files, running g++) live in
:mod:`release.audit.reading.archive`, :mod:`release.audit.abi.analysis`, :mod:`release.audit.cpp.consumer`
and :mod:`release.audit.run`; rendering lives in :mod:`release.audit.report.render`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from release.policy.archs import Arch, Support

if TYPE_CHECKING:  # types only: keeps this module's imports light
    from release.binary.elf import ElfInfo
    from release.binary.embedded import EmbeddedImage
    from release.binary.fatbin import Fatbinary
    from release.policy.matrix import Row
    from release.policy.model import CudaPackage, Policy, WheelTags
    from release.resources.cuda import CudaRelease

CPU_RULES = "CPU wheel: held to the CPU rules"


@dataclass(frozen=True)
class Finding:
    """One verdict of one check. ``ok=False`` fails the audit."""

    check: str
    ok: bool
    message: str
    library: str | None = None  # wheel-relative path of the library the finding is about
    details: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check,
            "ok": self.ok,
            "message": self.message,
            "library": self.library,
            "details": dict(self.details),
        }


@dataclass(frozen=True)
class Check:
    """What a check module declares about itself (its ``SPEC``): the one entry of the check registry,
    :mod:`release.audit.registry`, that the runner, the reports and the ``--checks`` parser read."""

    name: str  # "loader": the findings' ``check``, the ``--checks`` word
    title: str  # "loader (RPATH/RUNPATH)": the heading in the text report and the HTML page
    function: Callable[..., list[Finding]]  # most: check(contents, expectation) -> findings
    needs_claim: bool = True  # False: it judges a wheel audited with no claim (standalone, partial)


def ok(check: str, message: str, library: str | None = None, /, **details: object) -> Finding:
    return Finding(check, True, message, library, details)


def fail(check: str, message: str, library: str | None = None, /, **details: object) -> Finding:
    return Finding(check, False, message, library, details)


_VARIANT_RE = re.compile(r"^cu(\d{2})(\d)$")


# what a row and the claim its audit checks name alike (Row attribute = Expectation field)
ROW_FIELDS = (
    "variant", "train", "gpu_archs", "cuda_packages", "extra_variants", "platform_tag", "python_tag",
    "python", "wheel_tags", "channels", "provided_libraries", "embedded_device_code",
)  # fmt: skip


@dataclass(frozen=True)
class Expectation:
    """What a wheel must match: a row of the policy, or a variant and arch list given by hand."""

    variant: str  # "cpu" | "cu130"
    train: str | None  # "13.0"; None for CPU
    gpu_archs: tuple[Arch, ...]  # empty for CPU; empty for CUDA = no arch list (fails closed)
    cuda_packages: tuple[CudaPackage, ...]
    extra_variants: str = "reject"  # "reject" | "allow": a/f device code the list did not ask for
    platform_tag: str | None = None  # the row's tag ("manylinux_2_28_x86_64"); None: not checked
    python_tag: str | None = None  # the row's "cp312"; None: not checked
    row_id: str | None = None
    max_wheel_mib: int | None = None  # the target index's per-file limit; None: no limit
    policy_sha256: str | None = None  # sha256 of the policy file the expectation came from
    # --- claims beyond one arch list (release.audit.claim builds them)
    library_archs: tuple[tuple[str, tuple[Arch, ...]], ...] = ()  # per library: (name or glob, list)
    runs_on: tuple[tuple[int, int], ...] = ()  # "must run on these GPUs" (native or JIT)
    driver: CudaRelease | None = None  # predict for this driver (--driver, or the train's oldest)
    driver_source: str | None = None  # where the driver came from, for messages ("--driver 13.0")
    embedded_device_code: str = "reject"  # "reject" | "allow": device code embedded as data
    checks: tuple[str, ...] | None = None  # only these checks (--checks); None: every check
    standalone: bool = False  # no policy: train and package rules come from the wheel itself
    train_source: str | None = None  # how a standalone audit told the train ("its local version label")
    overrides: tuple[str, ...] = ()  # command-line options that loosened the row ("--allow ..."): no record
    python: str | None = None  # the row's "3.12": with wheel_tags, what the wheel's tags must serve
    wheel_tags: WheelTags = "cpython"  # project.wheel_tags: "cpython" | "abi3" | "py3-none"
    channels: tuple[str, ...] = ()  # the row's dependency channels (torch): they bring the CUDA runtime
    # sonames the row's dependencies provide ([[dependency]].libraries): not manylinux's business
    provided_libraries: tuple[str, ...] = ()
    # why the wheel carries no device code by design (NVIDIA's own NVRTC, runtime, nvJitLink...: host
    # code that loads, compiles or links device code at run time); set by release.audit.standalone.by_design
    by_design: str | None = None

    @property
    def is_cuda(self) -> bool:
        return self.variant != "cpu"

    def archs_for(self, path: str) -> tuple[Arch, ...]:
        """The arch list a library is held to: its own (by wheel path or its end, file name, or a glob of
        either), else the list."""
        import fnmatch

        name = path.rsplit("/", 1)[-1]
        for pattern, archs in self.library_archs:
            if pattern in (path, name) or path.endswith("/" + pattern.lstrip("/")):
                return archs
            if fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(name, pattern):
                return archs
        return self.gpu_archs

    @property
    def has_arch_claim(self) -> bool:
        return bool(self.gpu_archs or self.library_archs)

    def runs(self, check: str) -> bool:
        return self.checks is None or check in self.checks

    @property
    def arch_labels(self) -> list[str]:
        """The claimed SASS architectures as the messages write them: ['80', '90a']."""
        return arch_labels(self.gpu_archs)

    @classmethod
    def from_row(cls, row: Row, *, max_wheel_mib: int | None = None) -> Expectation:
        """The row's claim: the fields the two share (:data:`ROW_FIELDS`), its id, the index's file
        limit; a train's ``oldest_driver`` makes the predictions for that driver (checked at load,
        so it parses here)."""
        from release.resources.cuda import cuda

        driver = cuda().driver_named(row.oldest_driver) if row.oldest_driver else None
        return cls(
            **{name: getattr(row, name) for name in ROW_FIELDS},
            row_id=row.id,
            max_wheel_mib=max_wheel_mib,
            driver=driver,
            driver_source=f'train."{row.train}".oldest_driver = {row.oldest_driver}' if driver else None,
        )

    @classmethod
    def for_variant(cls, variant: str, gpu_archs: tuple[Arch, ...], policy: Policy | None) -> Expectation:
        """``--variant cu130 --gpu-archs ...``: the train's packages come from the policy.

        ValueError (the caller turns it into an InputError) for a variant the policy
        does not define, or an arch list on a CPU variant.
        """
        if variant == "cpu":
            if gpu_archs:
                raise ValueError("a CPU wheel carries no device code; drop --gpu-archs for --variant cpu")
            extra = policy.extra_variants if policy is not None else "reject"
            return cls("cpu", None, (), (), extra_variants=extra)
        if not _VARIANT_RE.match(variant):
            raise ValueError(f"--variant {variant!r} is not 'cpu' or a CUDA variant like 'cu130'")
        if policy is None:
            raise ValueError(f"--variant {variant} needs a policy file for the train's CUDA packages")
        for train in policy.trains:
            if train.variant == variant:
                return cls(
                    variant=variant,
                    train=train.version,
                    gpu_archs=gpu_archs,
                    cuda_packages=train.cuda_packages,
                    extra_variants=policy.extra_variants,
                )
        known = ", ".join(t.variant for t in policy.trains) or "none"
        raise ValueError(f"{policy.path} defines no train with variant {variant!r} (it has: {known})")


def sorted_archs(archs: tuple[Arch, ...]) -> list[Arch]:
    return sorted(archs, key=lambda a: (a.cc, a.variant))


def arch_labels(archs: tuple[Arch, ...]) -> list[str]:
    """The SASS architectures of a list as the messages write them: ['80', '90a']."""
    return [f"{a.cc}{a.variant}" for a in sorted_archs(archs) if a.ships_sass]


def arch_label(cc: int, variant: str) -> str:
    return f"{cc}{variant}"


def label_sort_key(label: str) -> tuple[int, str]:
    m = re.match(r"^(\d+)(.*)$", label)
    return (int(m[1]), m[2]) if m else (0, label)


# --------------------------------------------------------------------------- wheel contents

MemberKind = Literal["file", "directory", "symlink", "special"]


@dataclass(frozen=True)
class Member:
    """One zip entry, as read in the single streaming pass.

    Every file member is read and hashed. It is written to ``path`` when a check reads
    it from disk (ELF files and anything named like a shared library, the .dist-info
    files); C++ headers are kept in memory (``data``) for the C++ consumer check, which
    writes the few a program includes; everything else is hashed only.
    """

    name: str  # as written in the zip
    size: int  # uncompressed bytes read (declared size when not read)
    sha256: bytes | None  # digest of the bytes read; None when not read
    path: Path | None  # the extracted file; None when refused or not written
    kind: MemberKind
    is_elf: bool = False
    problem: str | None = None  # why it was refused, or why reading it failed
    data: bytes | None = field(default=None, repr=False, compare=False)  # kept in memory (headers)
    digests: Mapping[str, bytes] = field(default_factory=dict, hash=False)  # RECORD's other algorithms
    build_paths: tuple[str, ...] = ()  # lines of a text member naming a build machine's path

    @property
    def extracted(self) -> bool:
        return self.path is not None

    @property
    def read(self) -> bool:
        """Read and hashed in the pass (whether or not it was written)."""
        return self.sha256 is not None


@dataclass(frozen=True)
class ZipIssue:
    """Something wrong with the archive itself: an unsafe name, a link, a corrupt member."""

    kind: Literal["unsafe-path", "symlink", "special-file", "duplicate", "corrupt", "conflict"]
    name: str
    message: str


@dataclass(frozen=True)
class WheelFile:
    """An opened wheel: its identity, its members and where they were extracted."""

    path: Path
    filename: str
    size: int
    sha256: str  # hex digest of the wheel file
    name: str  # distribution name from the filename
    version: str
    local: str | None  # local version label: "cu130"; None for CPU wheels
    python_tags: tuple[str, ...]
    platform_tags: tuple[str, ...]
    root: Path  # the extracted tree: site-packages root of the installed layout
    members: tuple[Member, ...]
    issues: tuple[ZipIssue, ...]
    dist_info: str | None  # "pkg-1.0.dist-info"
    metadata: str | None  # METADATA text, None when absent or unreadable

    def member(self, name: str) -> Member | None:
        for m in self.members:
            if m.name == name:
                return m
        return None

    @property
    def files(self) -> tuple[Member, ...]:
        return tuple(m for m in self.members if m.kind == "file")


@dataclass(frozen=True)
class Library:
    """An ELF file of the wheel (or a file named like a shared library), inspected once."""

    path: str  # wheel-relative
    file: Path  # the extracted file
    sha256: bytes | None
    elf: ElfInfo | None  # None when the file could not be read as ELF
    error: str | None  # ElfError message: truncated, not ELF (text .so), corrupt
    has_device_code: bool  # a non-empty .nv_fatbin section with file bytes
    fatbins: tuple[Fatbinary, ...]
    fatbin_error: str | None  # FatbinError/ElfError message while reading .nv_fatbin
    # the functions of release/resources/cuda.toml's ``defines`` it exports (cuDriverGetVersion: the driver)
    defines: frozenset[str] = frozenset()
    # the run-time lookup (dlsym) and kernel interface (ioctl) functions it imports, read only for a file
    # exporting a driver function: a shim forwarding to libcuda.so.1 looks it up and never calls ioctl
    imports: frozenset[str] = frozenset()
    relocatable: tuple[Fatbinary, ...] = ()  # __nv_relfatbin: device-link input, not what runs
    unit_kernels: tuple[bool | None, ...] = ()  # per fatbin: holds kernels? None: could not tell
    kernels_unknown: str | None = None  # why some unit could not be looked into
    toolkits: tuple[tuple[int, int], ...] = ()  # ptxas releases its cubins name
    link_needs: tuple[str, ...] = ()  # __cudaRegisterLinkedBinary_* it needs and does not define
    embedded: tuple[EmbeddedImage, ...] = ()  # device code images embedded as data
    device_file: str | None = None  # "cubin" | "fatbin" | "ptx": a device code file, not a library

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def kernel_units(self) -> tuple[Fatbinary, ...]:
        """The fatbinaries that hold kernels (or might: could not be looked into); SASS/PTX only."""
        out = []
        for i, fb in enumerate(self.fatbins):
            if not any(e.kind in ("sass", "ptx") for e in fb.entries):
                continue
            if i < len(self.unit_kernels) and self.unit_kernels[i] is False:
                continue
            out.append(fb)
        return tuple(out)

    @property
    def stub_units(self) -> tuple[Fatbinary, ...]:
        """Fatbinaries without a kernel: the link step's own, or a unit of host code and device data."""
        return tuple(
            fb
            for i, fb in enumerate(self.fatbins)
            if i < len(self.unit_kernels) and self.unit_kernels[i] is False
        )

    @property
    def inspected(self) -> bool:
        return self.elf is not None and self.fatbin_error is None

    @property
    def cannot_load(self) -> bool:
        """Relocatable device code never device-linked: the loader stops at an undefined symbol."""
        return bool(self.link_needs)

    @property
    def why_cannot_load(self) -> str | None:
        """Why the CUDA runtime cannot load this library (None when nothing stops it)."""
        if not self.link_needs:
            return None
        more = f" (and {len(self.link_needs) - 1} more)" if len(self.link_needs) > 1 else ""
        return (
            f"relocatable device code never device-linked: its host code calls {self.link_needs[0]}{more}, "
            "which neither it nor a library it loads (its NEEDED closure) defines, so loading it fails with "
            "'undefined symbol'"
        )

    @property
    def is_shared_library(self) -> bool:
        return is_library_name(self.name) or (self.elf is not None and self.elf.soname is not None)


def is_library_name(name: str) -> bool:
    """``libfoo.so``, ``libfoo.so.13``, ``_ext.cpython-312-x86_64-linux-gnu.so``."""
    return name.endswith(".so") or ".so." in name


@dataclass(frozen=True)
class AbiReport:
    """The platform-tag analysis of the wheel's ELF files, by auditwheel's policies and rules
    (see :mod:`release.audit.abi.analysis`)."""

    auditwheel_version: str  # whose policies graded the wheel
    mode: str  # "elf-reader": wheelwright's ELF reader on this audit's extracted tree
    pure: bool  # auditwheel found no platform ELF file
    error: str | None  # auditwheel could not analyse the wheel
    overall_tag: str | None  # the best tag the wheel is consistent with
    sym_tag: str | None  # from symbol versions alone
    component_tags: Mapping[str, str]  # "symbols", "blacklist", "machine", "external libs", ...
    tags: Mapping[str, Mapping[str, Any]]  # each platform tag of the wheel: policy, honest
    files: Mapping[str, Mapping[str, Any]]  # per ELF: tag its symbols allow, versions needed
    external_libs: Mapping[str, str | None]
    excluded: tuple[str, ...]  # sonames left to declared packages (CUDA libraries)
    seconds: float
    policies: str = "all"  # "claimed": graded from the claimed tag on (older tags not examined)
    # soname -> symbol versions the wheel needs from it (auditwheel show's versioned_symbols)
    versioned_symbols: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "auditwheel_version": self.auditwheel_version,
            "mode": self.mode,
            "pure": self.pure,
            "error": self.error,
            "overall_tag": self.overall_tag,
            "sym_tag": self.sym_tag,
            "component_tags": dict(self.component_tags),
            "tags": {k: dict(v) for k, v in self.tags.items()},
            "files": {k: dict(v) for k, v in self.files.items()},
            "external_libs": dict(self.external_libs),
            "excluded": list(self.excluded),
            "policies": self.policies,
            "versioned_symbols": {k: list(v) for k, v in self.versioned_symbols.items()},
        }


@dataclass(frozen=True)
class Contents:
    """Everything the checks read: the wheel, its inspected libraries, auditwheel's analysis."""

    wheel: WheelFile
    libraries: tuple[Library, ...]
    abi: AbiReport | None = None  # None until the analysis finished (only hygiene reads it)

    @property
    def device_libraries(self) -> tuple[Library, ...]:
        return tuple(lib for lib in self.libraries if lib.has_device_code)


@dataclass(frozen=True)
class GpuRow:
    """One named GPU of :mod:`release.resources.cuda` and how each library runs on it."""

    name: str
    major: int
    minor: int
    claimed: bool  # the expectation claims this exact capability
    libraries: Mapping[str, Support]  # wheel-relative library path -> support
    wheel: Support  # the worst over libraries: a model needs all of them
    # the oldest driver each library's path needs on this GPU ("CUDA 13.2 (driver branch not known
    # here)"); absent where it runs on none, or nothing beyond the library's CUDA major is needed
    needs: Mapping[str, str] = field(default_factory=dict)
    units: Mapping[str, Mapping[str, int]] = field(
        default_factory=dict
    )  # per library: kernel units per support
    driver: str | None = None  # the driver the table predicts for ("13.0"); None: any new enough

    @property
    def cc(self) -> str:
        return f"{self.major}.{self.minor}"

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.name,
            "cc": self.cc,
            "claimed": self.claimed,
            "libraries": dict(self.libraries),
            "wheel": self.wheel,
            "needs_driver": dict(self.needs),
            "kernel_units": {k: dict(v) for k, v in self.units.items()},
            "driver": self.driver,
        }


@dataclass(frozen=True)
class AuditResult:
    """All findings for one wheel. ``passed`` when no finding fails."""

    wheel: str  # file name
    wheel_path: Path
    sha256: str
    expectation: Expectation
    findings: tuple[Finding, ...]
    gpu_table: tuple[GpuRow, ...]
    arch_list_found: str | None  # the device code found, as a claim that passes when fed back
    timings: Mapping[str, float] = field(default_factory=dict, hash=False)
    inventory: tuple[Mapping[str, Any], ...] = field(default=(), hash=False)  # per library with device code
    checks_run: tuple[str, ...] = ()  # the checks that ran (the runner fills it in)
    partial: bool = False  # only some checks ran (--checks): never a record publish may trust

    @property
    def passed(self) -> bool:
        return all(f.ok for f in self.findings)

    @property
    def failures(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if not f.ok)

    def failed_checks(self) -> tuple[str, ...]:
        seen: list[str] = []
        for f in self.failures:
            if f.check not in seen:
                seen.append(f.check)
        return tuple(seen)
