"""Which GPUs of a row's CPU an arch list serves, by the rule of each GPU (pure; no wheel read).

For a row (its platform, CUDA train and ``gpu_archs``), each GPU of the row's population
(:meth:`release.resources.cuda.CudaFacts.gpus_for`: the GPUs beside that CPU a generic wheel of that
CUDA major can reach) is ``native`` (SASS of the list runs there: the desktop rule on a discrete GPU,
the GPU's own capability only on a Tegra GPU), ``ptx-jit`` (only the list's PTX serves it: a driver
of the train's release or newer JIT-compiles it on first use) or ``none``. The GPUs of that CPU a
generic wheel cannot reach (a Jetson on JetPack 6's L4T CUDA) are listed apart, with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from release.policy.archs import Arch
from release.resources.cuda import CudaRelease, Gpu, cuda

__all__ = ["Coverage", "GpuCoverage", "RowCoverage", "predict", "row_coverage"]

Coverage = Literal["native", "ptx-jit", "none"]


@dataclass(frozen=True)
class GpuCoverage:
    """How an arch list serves one GPU."""

    gpu: Gpu
    support: Coverage
    via: tuple[str, ...]  # the targets that serve it ("sm_80", "compute_90"); () for none
    claimed: bool  # the list names exactly this capability as SASS
    needs_driver: str | None = None  # ptx-jit: "CUDA 13.0 (driver >= 580.65.06)"

    def to_json(self) -> dict[str, Any]:
        return {
            "gpu": self.gpu.name,
            "cc": self.gpu.cc,
            "kind": self.gpu.kind,
            "support": self.support,
            "via": list(self.via),
            "claimed": self.claimed,
            "needs_driver": self.needs_driver,
        }


@dataclass(frozen=True)
class RowCoverage:
    """One row's coverage: its population's GPUs in table order, and those its CPU holds out of reach."""

    row_id: str
    cpu: str
    train: str | None
    archs: str  # the list as the policy writes it ("8.0;9.0+PTX")
    gpus: tuple[GpuCoverage, ...]
    out_of_reach: tuple[tuple[Gpu, str], ...] = ()

    def served(self) -> tuple[Gpu, ...]:
        return tuple(g.gpu for g in self.gpus if g.support != "none")

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row_id,
            "cpu": self.cpu,
            "train": self.train,
            "gpu_archs": self.archs,
            "gpus": [g.to_json() for g in self.gpus],
            "out_of_reach": [{"gpu": g.name, "cc": g.cc, "why": why} for g, why in self.out_of_reach],
        }


def _sass(archs: Sequence[Arch]) -> list[Arch]:
    return [a for a in archs if a.ships_sass]


def _ptx(archs: Sequence[Arch]) -> list[Arch]:
    return [a for a in archs if a.ptx or not a.ships_sass]


def predict(archs: Sequence[Arch], gpus: Sequence[Gpu], train: str | None) -> tuple[GpuCoverage, ...]:
    """How ``archs`` (a row's list, or what a wheel carries) serves each of ``gpus``, in their order."""
    release = _release(train)
    driver = release.describe() if release is not None else (f"CUDA {train}" if train else None)
    out: list[GpuCoverage] = []
    for gpu in gpus:
        claimed = any((a.major, a.minor) == (gpu.major, gpu.minor) for a in _sass(archs))
        native = [a.sass for a in _sass(archs) if gpu.runs_sass(a.cc, a.variant)]
        if native:
            out.append(GpuCoverage(gpu, "native", tuple(native), claimed))
            continue
        jit = [a.virtual for a in _ptx(archs) if gpu.runs_ptx(a.cc, a.variant)]
        if jit:
            out.append(GpuCoverage(gpu, "ptx-jit", tuple(jit), claimed, driver))
        else:
            out.append(GpuCoverage(gpu, "none", (), claimed))
    return tuple(out)


def _release(train: str | None) -> CudaRelease | None:
    if not train:
        return None
    major, _, minor = train.partition(".")
    if not (major.isdigit() and minor.isdigit()):
        return None
    return cuda().release((int(major), int(minor)))


def row_coverage(row_id: str, cpu: str, train: str | None, archs: Sequence[Arch]) -> RowCoverage:
    """The coverage of one row: ``cpu`` is the row's platform, ``train`` its CUDA train ("13.0")."""
    facts = cuda()
    major = int(train.split(".")[0]) if train else None
    population = facts.gpus_for(cpu, major)
    text = ";".join(str(a) for a in archs)
    return RowCoverage(
        row_id, cpu, train, text, predict(archs, population, train), facts.out_of_reach(cpu, major)
    )
