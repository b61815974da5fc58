"""GPU architectures: the spellings a policy uses and the forms builds and audits need.

``"7.5;8.0;12.0+PTX"`` (TORCH_CUDA_ARCH_LIST form) <-> ``Arch`` values <->
``sm_75`` / ``compute_120`` / CMake's ``75-real;120-real;120-virtual``.
Pure functions: no processes. The compute capabilities that exist come from
:mod:`release.resources.cuda` (read once).

Two syntaxes parse into ``Arch`` values:

* the policy's (:func:`parse_arch_list`): ``X.Y``, ``X.Ya``, ``X.Yf``, each maybe ``+PTX``: SASS
  for the capability (and PTX with ``+PTX``); what a row builds;
* an audit claim's (:func:`parse_claim_list`), a superset: also nvcc's own names, ``sm_90a``
  (SASS only) and ``compute_90`` (PTX only). ``X.Y`` promises more than ``sm_XY``: every
  translation unit with kernels runs natively on a GPU of compute capability X.Y (the audit's
  ``gpus`` check holds it to that); ``sm_XY`` says only that the library carries that SASS
  (some kernels may be built for newer GPUs alone, as cuBLAS's are).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from release.resources.cuda import cuda
from release.resources.cuda_gpus import desktop_sass_runs_on
from release.resources.cuda_gpus import ptx_runs_on as _ptx_runs_on

Variant = Literal["", "a", "f"]

_ARCH_RE = re.compile(r"\A(?P<major>\d{1,2})\.(?P<minor>\d)(?P<variant>[af]?)(?P<ptx>\+PTX)?\Z", re.ASCII)


class ArchSyntaxError(ValueError):
    """A spelling that is not an architecture; the message says how to write one."""


@dataclass(frozen=True, order=True)
class Arch:
    """One entry of an arch list: a compute capability, maybe a/f variant, maybe +PTX.

    ``ships_sass=False`` is PTX only (``compute_90``); ``strict=False`` (nvcc's ``sm_90`` spelling in a
    claim) carries the SASS without promising that every kernel runs natively on that GPU.
    """

    major: int
    minor: int
    variant: Variant = ""
    ptx: bool = False
    ships_sass: bool = True
    strict: bool = True

    @property
    def cc(self) -> int:
        """Compute capability as cuobjdump and the fatbin write it: 9.0 -> 90, 12.0 -> 120."""
        return self.major * 10 + self.minor

    @property
    def virtual(self) -> str:
        return f"compute_{self.cc}{self.variant}"

    def __str__(self) -> str:
        if not self.ships_sass:
            return self.virtual
        if not self.strict:
            return self.sass if not self.ptx else f"{self.sass};{self.virtual}"
        return f"{self.major}.{self.minor}{self.variant}{'+PTX' if self.ptx else ''}"

    @property
    def sass(self) -> str:
        return f"sm_{self.cc}{self.variant}"

    @property
    def policy_form(self) -> bool:
        """Spelled the policy's way (``9.0a+PTX``): what TORCH_CUDA_ARCH_LIST can say."""
        return self.ships_sass and self.strict


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


_NVCC_RE = re.compile(r"\A(?P<kind>sm|compute)_(?P<cc>\d{2,3})(?P<variant>[af]?)\Z", re.ASCII)


def parse_claim_arch(text: str) -> Arch:
    """One entry of an audit claim: the policy's spelling, or nvcc's ``sm_90a`` / ``compute_120``."""
    m = _NVCC_RE.match(text) if isinstance(text, str) else None
    if m is None:
        if isinstance(text, str) and re.fullmatch(r"(?i:sm|compute)_\d+[a-z]*", text, flags=re.ASCII):
            raise ArchSyntaxError(
                f"{text!r} is not an nvcc architecture; write sm_XY or compute_XY with an optional "
                "a or f suffix, in lower case (sm_90a, compute_120)"
            )
        return parse_arch(text)
    cc = int(m["cc"])
    major, minor = divmod(cc, 10)
    if (major, minor) not in cuda().capabilities:
        known = ", ".join(f"{a}{b}" for a, b in cuda().capabilities)
        raise ArchSyntaxError(f"{text!r} is not a real compute capability; known: {known}")
    variant: Variant = "a" if m["variant"] == "a" else "f" if m["variant"] == "f" else ""
    if m["kind"] == "sm":
        return Arch(major, minor, variant, ptx=False, ships_sass=True, strict=False)
    return Arch(major, minor, variant, ptx=True, ships_sass=False, strict=False)


def parse_claim_list(text: str) -> tuple[Arch, ...]:
    """An audit claim's arch list: ``"7.5;8.0;sm_90a;compute_120"`` (``;`` or spaces)."""
    parts = [p for p in re.split(r"[;\s]+", text.strip()) if p]
    if not parts:
        raise ArchSyntaxError("the arch list is empty; name at least one architecture")
    return tuple(parse_claim_arch(p) for p in parts)


def claim_text(archs: tuple[Arch, ...]) -> str:
    """The claim spelling of a list: ``7.5;8.0;9.0a;sm_100;compute_120`` (reads back with
    :func:`parse_claim_list` to the same entries)."""
    return ";".join(str(a) for a in archs)


def torch_cuda_arch_list(archs: tuple[Arch, ...]) -> str:
    """``TORCH_CUDA_ARCH_LIST`` value: ``7.5;8.0;12.0+PTX``. ArchSyntaxError for an entry the
    policy syntax cannot say (PTX only, nvcc spelling): PyTorch's list has no form for it."""
    odd = [str(a) for a in archs if not a.policy_form]
    if odd:
        raise ArchSyntaxError(f"TORCH_CUDA_ARCH_LIST cannot express {odd}: it builds SASS for every entry")
    return ";".join(str(a) for a in archs)


def _targets(archs: tuple[Arch, ...]) -> list[tuple[Arch, bool]]:
    """(arch, is PTX) for each code a list asks nvcc for: its SASS, then its PTX, in list order."""
    return [(a, ptx) for a in archs for ptx, wanted in ((False, a.ships_sass), (True, a.ptx)) if wanted]


def cmake_cuda_architectures(archs: tuple[Arch, ...]) -> str:
    """``CMAKE_CUDA_ARCHITECTURES`` value: ``75-real;...;120-real;120-virtual``."""
    return ";".join(f"{a.cc}{a.variant}-{'virtual' if ptx else 'real'}" for a, ptx in _targets(archs))


def nvcc_gencode_flags(archs: tuple[Arch, ...]) -> tuple[str, ...]:
    """The ``-gencode`` flags an nvcc build of this list uses."""
    return tuple(
        f"-gencode=arch={a.virtual},code={a.virtual if ptx else a.sass}" for a, ptx in _targets(archs)
    )


# How a library runs on a GPU, over its translation units with kernels: all native; all run, some by
# PTX JIT; some run and some have no code for it ("partial"); none runs.
Support = Literal["native", "ptx-jit", "partial", "none"]


def sass_runs_on(cc: int, variant: Variant, gpu_major: int, gpu_minor: int) -> bool:
    """CUDA's SASS rule for a cubin built for ``sm_<cc><variant>`` on a DISCRETE GPU (the one rule, kept in
    release/resources/cuda_gpus.py). A Tegra GPU (Orin, Thor) runs only its own SASS: ask the GPU's entry
    (``cuda().gpu(major, minor).runs_sass``) wherever the GPU may be one."""
    return desktop_sass_runs_on(cc, variant, gpu_major, gpu_minor)


def ptx_runs_on(cc: int, variant: Variant, gpu_major: int, gpu_minor: int) -> bool:
    """PTX for ``compute_<cc>`` JITs on any GPU at least that capability (a: its own only, f: its family);
    the one rule, kept in release/resources/cuda_gpus.py."""
    return _ptx_runs_on(cc, variant, gpu_major, gpu_minor)
