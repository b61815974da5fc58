"""The named GPUs of ``cuda.toml`` (``[gpu].named``): which CPUs each lives beside, its kind, and the rule
that says which device code runs on it. Read by :mod:`release.resources.cuda`; a broken entry is refused
through the reader's ``fail`` (it names the file and the key)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, cast

__all__ = [
    "GPU_KINDS",
    "STACKS",
    "Gpu",
    "GpuKind",
    "JetPack",
    "desktop_sass_runs_on",
    "gpu_entry",
    "ptx_runs_on",
]

Version = tuple[int, int]
Fail = Callable[[str, str], Exception]
_CC = re.compile(r"^(\d{1,2})\.(\d)$")
_VERSION = re.compile(r"^(\d{1,2})\.(\d{1,2})$")

GpuKind = Literal["discrete", "integrated", "tegra"]
GPU_KINDS: tuple[GpuKind, ...] = ("discrete", "integrated", "tegra")
Stack = Literal["l4t", "sbsa"]
STACKS: tuple[Stack, ...] = ("l4t", "sbsa")


@dataclass(frozen=True)
class JetPack:
    """One JetPack release that runs on a Jetson GPU: its CUDA and the CUDA stack it ships."""

    jetpack: str  # "6.2"
    cuda: str  # "12.6", or "13" where only the major is known
    stack: Stack  # "l4t": Jetson Linux's own CUDA; "sbsa": the server-ARM stack generic aarch64 wheels target

    @property
    def cuda_major(self) -> int:
        return int(self.cuda.split(".")[0])


@dataclass(frozen=True)
class Gpu:
    name: str  # "H100 / H200"
    major: int
    minor: int
    since: tuple[int, int] | None = None  # the first CUDA release whose driver knows it; None: older
    cpus: tuple[str, ...] = ()  # the CPUs it lives beside (a row's platform); (): any
    kind: GpuKind = "discrete"
    jetpack: tuple[JetPack, ...] = ()  # tegra only: the JetPack releases that run on it

    @property
    def tegra(self) -> bool:
        return self.kind == "tegra"

    @property
    def cc(self) -> str:
        return f"{self.major}.{self.minor}"

    def runs_sass(self, arch: int, variant: str) -> bool:
        """Whether SASS built for ``sm_<arch><variant>`` runs here: CUDA's desktop rule
        (:func:`desktop_sass_runs_on`) on a discrete or non-Tegra GPU; on a Tegra GPU only SASS built for
        its own capability (the CUDA C++ Programming Guide: no binary compatibility for Tegra)."""
        if self.tegra:
            return divmod(arch, 10) == (self.major, self.minor)
        return desktop_sass_runs_on(arch, variant, self.major, self.minor)

    def runs_ptx(self, arch: int, variant: str) -> bool:
        """Whether PTX for ``compute_<arch><variant>`` JIT-compiles here (the same rule on every GPU)."""
        return ptx_runs_on(arch, variant, self.major, self.minor)

    def serves(self, cpu: str | None, cuda_major: int | None) -> bool:
        """Whether a wheel for ``cpu`` (a row's platform; None: not known) of CUDA ``cuda_major`` (None:
        not known) can reach this GPU: it lives beside that CPU, and a Jetson runs a JetPack whose CUDA
        stack is the generic (SBSA) one of that major."""
        if cpu is not None and self.cpus and cpu not in self.cpus:
            return False
        if self.tegra and cuda_major is not None:
            return any(j.stack == "sbsa" and j.cuda_major == cuda_major for j in self.jetpack)
        return True


def desktop_sass_runs_on(arch: int, variant: str, gpu_major: int, gpu_minor: int) -> bool:
    """CUDA's SASS rule on a discrete GPU: ``sm_XYa`` on X.Y only; plain and family (``f``) cubins on the
    same major, minor at least the cubin's (release.policy.archs.sass_runs_on says the same)."""
    major, minor = divmod(arch, 10)
    if variant == "a":
        return (gpu_major, gpu_minor) == (major, minor)
    return gpu_major == major and gpu_minor >= minor


def ptx_runs_on(arch: int, variant: str, gpu_major: int, gpu_minor: int) -> bool:
    """PTX for ``compute_<arch>`` JITs on any GPU at least that capability (a: its own only, f: its family)."""
    major, minor = divmod(arch, 10)
    if variant == "a":
        return (gpu_major, gpu_minor) == (major, minor)
    if variant == "f":
        return gpu_major == major and gpu_minor >= minor
    return (gpu_major, gpu_minor) >= (major, minor)


_GPU_KEYS = {"name", "cc", "cpus", "kind", "jetpack"}


def _str(value: object, where: str, fail: Fail) -> str:
    if not isinstance(value, str) or not value:
        raise fail(where, f"must be a non-empty string, not {value!r}")
    return value


def _capability(text: object, where: str, fail: Fail) -> Version:
    m = _CC.match(_str(text, where, fail))
    if m is None:
        raise fail(where, f"{text!r} is not a compute capability like '9.0'")
    return int(m[1]), int(m[2])


def gpu_entry(entry: object, where: str, capabilities: tuple[Version, ...], since: object, fail: Fail) -> Gpu:
    """``{ name, cc, cpus, kind?, jetpack? }``: one named GPU; ``since``: the table ``gpu.since``."""
    if not isinstance(entry, dict) or not {"name", "cc", "cpus"} <= set(entry) <= _GPU_KEYS:
        raise fail(
            where, f"must be {{ name, cc, cpus }} and optionally kind and jetpack ({sorted(_GPU_KEYS)})"
        )
    major, minor = _capability(entry["cc"], f"{where}.cc", fail)
    if (major, minor) not in capabilities:
        raise fail(f"{where}.cc", f"{entry['cc']!r} is not in gpu.capabilities")
    cpus = entry["cpus"]
    if not isinstance(cpus, list) or not cpus:
        raise fail(f"{where}.cpus", "must be a non-empty list of CPUs, as a row's platform names them")
    kind = entry.get("kind", "discrete")
    if kind not in GPU_KINDS:
        raise fail(f"{where}.kind", f"{kind!r} is not one of {list(GPU_KINDS)}")
    raw = entry.get("jetpack", [])
    if not isinstance(raw, list):
        raise fail(f"{where}.jetpack", "must be a list of { jetpack, cuda, stack }")
    if kind == "tegra" and not raw:
        raise fail(f"{where}.jetpack", "a tegra GPU names the JetPack releases that run on it")
    if kind != "tegra" and raw:
        raise fail(f"{where}.jetpack", "only a tegra GPU runs JetPack")
    jetpack = tuple(_jetpack(j, f"{where}.jetpack[{i}]", fail) for i, j in enumerate(raw))
    return Gpu(
        _str(entry["name"], f"{where}.name", fail),
        major,
        minor,
        _since(since, entry["cc"], fail),
        tuple(_str(c, f"{where}.cpus", fail) for c in cpus),
        cast(GpuKind, kind),
        jetpack,
    )


def _jetpack(raw: object, where: str, fail: Fail) -> JetPack:
    if not isinstance(raw, dict) or set(raw) != {"jetpack", "cuda", "stack"}:
        raise fail(where, "must be { jetpack, cuda, stack }")
    cuda = _str(raw["cuda"], f"{where}.cuda", fail)
    if not re.fullmatch(r"\d{1,2}(\.\d{1,2})?", cuda):
        raise fail(f"{where}.cuda", f"{cuda!r} is not a CUDA version like '12.6' or a major like '13'")
    if raw["stack"] not in STACKS:
        raise fail(f"{where}.stack", f"{raw['stack']!r} is not one of {list(STACKS)}")
    return JetPack(_str(raw["jetpack"], f"{where}.jetpack", fail), cuda, cast(Stack, raw["stack"]))


def _since(table: object, cc: str, fail: Fail) -> Version | None:
    """``gpu.since["9.0"]``: the first release whose driver knows the GPU."""
    if table is None:
        return None
    if not isinstance(table, dict):
        raise fail("gpu.since", "must map compute capabilities to CUDA releases")
    if cc not in table:
        return None
    m = _VERSION.match(_str(table[cc], f'gpu.since."{cc}"', fail))
    if m is None:
        raise fail(f'gpu.since."{cc}"', f"{table[cc]!r} is not a version like '13.0'")
    return int(m[1]), int(m[2])
