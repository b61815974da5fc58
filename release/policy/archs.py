"""GPU architectures: the spellings a policy uses and the forms builds and audits need.

``"7.5;8.0;12.0+PTX"`` (TORCH_CUDA_ARCH_LIST form) <-> ``Arch`` values <->
``sm_75`` / ``compute_120`` / CMake's ``75-real;120-real;120-virtual``.
Pure functions: no processes. The compute capabilities that exist come from
:mod:`release.resources.cuda` (read once).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from release.resources.cuda import cuda

Variant = Literal["", "a", "f"]

_ARCH_RE = re.compile(r"\A(?P<major>\d{1,2})\.(?P<minor>\d)(?P<variant>[af]?)(?P<ptx>\+PTX)?\Z", re.ASCII)


class ArchSyntaxError(ValueError):
    """A spelling that is not an architecture; the message says how to write one."""


@dataclass(frozen=True, order=True)
class Arch:
    """One entry of an arch list: a compute capability, maybe a/f variant, maybe +PTX."""

    major: int
    minor: int
    variant: Variant = ""
    ptx: bool = False

    @property
    def cc(self) -> int:
        """Compute capability as cuobjdump and the fatbin write it: 9.0 -> 90, 12.0 -> 120."""
        return self.major * 10 + self.minor

    @property
    def sass(self) -> str:
        return f"sm_{self.cc}{self.variant}"

    @property
    def virtual(self) -> str:
        return f"compute_{self.cc}{self.variant}"

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}{self.variant}{'+PTX' if self.ptx else ''}"


def parse_arch(text: str) -> Arch:
    """Parse one entry (``8.0``, ``9.0a``, ``12.0+PTX``); raise ArchSyntaxError with a fix."""
    if not isinstance(text, str):
        raise ArchSyntaxError(f'{text!r} is not a string; write archs as strings like "8.0"')
    m = _ARCH_RE.match(text)
    if m is None:
        if re.fullmatch(r"\d{1,2}\.\d[af]?\+ptx", text, flags=re.IGNORECASE | re.ASCII):
            fixed = text[: text.index("+")] + "+PTX"
            raise ArchSyntaxError(f"{text!r}: PTX is spelled '+PTX' in upper case; write {fixed!r}")
        if re.fullmatch(r"\d{2,3}", text, flags=re.ASCII):
            raise ArchSyntaxError(
                f"{text!r} is a CMake/sm number; write compute capabilities as "
                f"'major.minor' (e.g. '{text[:-1]}.{text[-1]}')"
            )
        raise ArchSyntaxError(
            f"{text!r} is not an architecture; write 'major.minor' like '8.0', "
            "optionally 'a' or 'f' ('9.0a'), optionally '+PTX' ('12.0+PTX')"
        )
    major, minor = int(m["major"]), int(m["minor"])
    capabilities = cuda().capabilities
    if (major, minor) not in capabilities:
        known = ", ".join(f"{a}.{b}" for a, b in capabilities)
        raise ArchSyntaxError(f"{text!r} is not a real compute capability; known: {known}")
    variant: Variant = "a" if m["variant"] == "a" else "f" if m["variant"] == "f" else ""
    return Arch(major, minor, variant, m["ptx"] is not None)


def parse_arch_list(text: str) -> tuple[Arch, ...]:
    """Parse ``"7.5;8.0;12.0+PTX"`` (``;`` or spaces). Empty text is an error."""
    parts = [p for p in re.split(r"[;\s]+", text.strip()) if p]
    if not parts:
        raise ArchSyntaxError("the arch list is empty; a CUDA build needs at least one arch")
    return tuple(parse_arch(p) for p in parts)


def torch_cuda_arch_list(archs: tuple[Arch, ...]) -> str:
    """``TORCH_CUDA_ARCH_LIST`` value: ``7.5;8.0;12.0+PTX``."""
    return ";".join(str(a) for a in archs)


def cmake_cuda_architectures(archs: tuple[Arch, ...]) -> str:
    """``CMAKE_CUDA_ARCHITECTURES`` value: ``75-real;...;120-real;120-virtual``."""
    out: list[str] = []
    for a in archs:
        out.append(f"{a.cc}{a.variant}-real")
        if a.ptx:
            out.append(f"{a.cc}{a.variant}-virtual")
    return ";".join(out)


def nvcc_gencode_flags(archs: tuple[Arch, ...]) -> tuple[str, ...]:
    """The ``-gencode`` flags an nvcc build of this list uses."""
    flags: list[str] = []
    for a in archs:
        flags.append(f"-gencode=arch={a.virtual},code={a.sass}")
        if a.ptx:
            flags.append(f"-gencode=arch={a.virtual},code={a.virtual}")
    return tuple(flags)


Support = Literal["native", "ptx-jit", "none"]


def sass_runs_on(cc: int, variant: Variant, gpu_major: int, gpu_minor: int) -> bool:
    """CUDA's SASS compatibility rule for a cubin built for ``sm_<cc><variant>``."""
    major, minor = divmod(cc, 10)
    if variant == "a":
        return (gpu_major, gpu_minor) == (major, minor)
    # plain and family ('f') cubins: same major, minor at least the cubin's
    return gpu_major == major and gpu_minor >= minor


def ptx_runs_on(cc: int, variant: Variant, gpu_major: int, gpu_minor: int) -> bool:
    """PTX for ``compute_<cc>`` JITs on any GPU at least that capability (a/f: its own only)."""
    major, minor = divmod(cc, 10)
    if variant == "a":
        return (gpu_major, gpu_minor) == (major, minor)
    if variant == "f":
        return gpu_major == major and gpu_minor >= minor
    return (gpu_major, gpu_minor) >= (major, minor)
