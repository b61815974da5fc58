"""Builders for the audit's unit tests (no tests here): synthetic libraries, fatbinaries and wheels.

The values are the same frozen dataclasses the real readers return; no file is read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from release.audit.model import AbiReport, Contents, Expectation, Library, Member, WheelFile
from release.binary.elf import ElfInfo
from release.binary.fatbin import Fatbinary, FatbinEntry
from release.policy.archs import parse_arch_list
from release.policy.model import CudaPackage

RUNTIME = CudaPackage(
    "nvidia-cuda-runtime", ("cuda-toolkit[cudart]",), ("libcudart.so.13",), "nvidia/cu13/lib"
)
RPATH = "$ORIGIN/../../nvidia/cu13/lib"


def entry(name: str) -> FatbinEntry:
    """``sm_90a`` / ``compute_120`` / ``lto_80`` -> an entry."""
    prefix, _, rest = name.partition("_")
    kind = {"sm": "sass", "compute": "ptx", "lto": "ltoir"}[prefix]
    variant = rest[-1] if rest[-1] in "af" else ""
    arch = int(rest.rstrip("af"))
    return FatbinEntry(kind, arch, variant)  # type: ignore[arg-type]


def fatbin(*names: str) -> Fatbinary:
    return Fatbinary(0, tuple(entry(n) for n in names))


def elf(
    *,
    needed: tuple[str, ...] = ("libcudart.so.13", "libc.so.6"),
    runpath: tuple[str, ...] = (RPATH,),
    rpath: tuple[str, ...] = (),
    soname: str | None = None,
    elf_type: int = 3,
) -> ElfInfo:
    return ElfInfo("x", 64, "little", elf_type, 62, (), needed, rpath, runpath, soname)


def lib(
    path: str = "pkg/lib/libk.so",
    *fatbins: Fatbinary,
    info: ElfInfo | None = None,
    error: str | None = None,
    fatbin_error: str | None = None,
    device: bool | None = None,
    sha: bytes | None = None,
) -> Library:
    has = bool(fatbins) or fatbin_error is not None if device is None else device
    return Library(
        path,
        Path("/nonexistent") / path,
        sha if sha is not None else path.encode(),
        None if error else (info or elf()),
        error,
        has,
        tuple(fatbins),
        fatbin_error,
    )


def wheel(
    files: tuple[str, ...] = (),
    *,
    metadata: str | None = "Name: pkg\nVersion: 1.0\n",
    platform_tags: tuple[str, ...] = ("manylinux_2_28_x86_64",),
    size: int = 1000,
    root: Path = Path("/nonexistent"),
) -> WheelFile:
    members = tuple(Member(f, 1, b"x", None, "file") for f in files)
    return WheelFile(
        path=root / "pkg.whl",
        filename="pkg-1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        size=size,
        sha256="0" * 64,
        name="pkg",
        version="1.0+cu130",
        local="cu130",
        python_tags=("cp312",),
        platform_tags=platform_tags,
        root=root,
        members=members,
        issues=(),
        dist_info="pkg-1.0+cu130.dist-info",
        metadata=metadata,
    )


def contents(*libs: Library, abi: AbiReport | None = None, **wheel_kw: Any) -> Contents:
    files = tuple(lib.path for lib in libs) + tuple(wheel_kw.pop("files", ()))
    return Contents(wheel(files, **wheel_kw), libs, abi)


def cuda(
    archs: str | None = "8.0;9.0+PTX",
    *,
    extra: str = "reject",
    packages: tuple[CudaPackage, ...] = (RUNTIME,),
) -> Expectation:
    return Expectation(
        variant="cu130",
        train="13.0",
        gpu_archs=parse_arch_list(archs) if archs else (),
        cuda_packages=packages,
        extra_variants=extra,
    )


CPU = Expectation(variant="cpu", train=None, gpu_archs=(), cuda_packages=())


def abi(
    *,
    honest: bool = True,
    overall: str = "manylinux_2_17_x86_64",
    tag: str = "manylinux_2_28_x86_64",
    pure: bool = False,
    error: str | None = None,
    limited_by: tuple[str, ...] = (),
    files: dict[str, Any] | None = None,
    libs_to_eliminate: tuple[str, ...] = (),
) -> AbiReport:
    return AbiReport(
        auditwheel_version="6.8.2",
        mode="extracted-tree",
        pure=pure,
        error=error,
        overall_tag=overall,
        sym_tag=overall,
        component_tags={"symbol versions": overall},
        tags={
            tag: {
                "policy": tag,
                "honest": honest,
                "limited_by": list(limited_by),
                "libs_to_eliminate": list(libs_to_eliminate),
                "blacklisted_symbols": {},
            }
        },
        files=files or {},
        external_libs={},
        excluded=(),
        seconds=0.1,
    )
