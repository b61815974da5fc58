"""A row's arch list against its GPU dependency's device code (pure).

Over the row's population (:mod:`release.coverage.predict`), with the dependency's support on each GPU
(its libraries read by the audit's reader; the GPU counts as served by the dependency when one of its
libraries runs there, natively or by JIT, in any translation unit):

* ``lost``: GPUs the dependency runs on and the row's list does not: their users get a wheel that
  installs and then fails at the first kernel launch;
* ``dead``: architectures of the row's list whose GPUs the dependency serves none of (code nobody runs);
* ``disjoint``: the row serves no GPU its dependency serves.

``taken`` is the list the seed would have chosen: the plain SASS capabilities the dependency carries
(over its libraries' translation units with kernels), the newest also as PTX where the row's own newest
ships PTX. The policy's ``gpu_coverage`` ("report", "fail", "take") decides what happens with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from release.audit.checks.gpus import cell
from release.audit.model import Expectation, Library
from release.coverage.dependency import DependencyCode
from release.coverage.predict import RowCoverage, row_coverage
from release.policy.archs import Arch, Support
from release.resources.cuda import Gpu, cuda

__all__ = [
    "DependencyCoverage",
    "GpuCoverageMode",
    "carried_targets",
    "compare",
    "gpu_support",
    "taken_list",
    "target_key",
]

GpuCoverageMode = Literal["report", "fail", "take"]
_BARE = Expectation("cuda", None, (), ())


def _support(lib: Library, gpu: Gpu) -> Support:
    return cell(lib, gpu, _BARE).without_driver


def gpu_support(code: DependencyCode, gpu: Gpu) -> Support:
    """How the dependency runs on ``gpu``: the best of its readable libraries (by the GPU's own rule)."""
    levels = [_support(lib, gpu) for lib in code.libraries if lib.fatbin_error is None]
    return next((s for s in ("native", "ptx-jit", "partial") if s in levels), "none")


def carried_targets(lib: Library) -> tuple[str, ...]:
    """Every SASS and PTX target of the library's executable fatbins, as cuobjdump names them
    (``sm_90a``, ``compute_90``), sorted by capability."""
    entries = {
        (e.arch, e.variant, e.kind) for fb in lib.fatbins for e in fb.entries if e.kind in ("sass", "ptx")
    }
    ordered = sorted(entries, key=lambda t: (t[0], t[1], t[2] != "sass"))
    return tuple(
        f"{'sm' if kind == 'sass' else 'compute'}_{arch}{variant}" for arch, variant, kind in ordered
    )


def target_key(target: str) -> tuple[int, str]:
    digits = target.split("_", 1)[1]
    return int(digits.rstrip("af")), digits[-1] if digits[-1] in "af" else ""


def taken_list(code: DependencyCode, row_archs: Sequence[Arch]) -> tuple[Arch, ...]:
    """The plain SASS capabilities the dependency's kernel units carry, oldest first; the newest with
    ``+PTX`` when the row's own newest ships PTX."""
    known = set(cuda().capabilities)
    caps = sorted(
        {
            divmod(e.arch, 10)
            for lib in code.libraries
            for fb in (lib.kernel_units or lib.fatbins)
            for e in fb.entries
            if e.kind == "sass" and e.variant == "" and divmod(e.arch, 10) in known
        }
    )
    if not caps:
        return ()
    ptx = bool(row_archs) and max(row_archs, key=lambda a: (a.major, a.minor)).ptx
    return tuple(Arch(major, minor, ptx=ptx and (major, minor) == caps[-1]) for major, minor in caps)


@dataclass(frozen=True)
class DependencyCoverage:
    """One row against one dependency wheel."""

    package: str
    wheel: str
    mode: GpuCoverageMode
    support: tuple[tuple[Gpu, Support, str], ...]  # (GPU, dependency's support, the row's coverage)
    lost: tuple[Gpu, ...]
    dead: tuple[str, ...]  # arch labels of the row's list ("8.7")
    disjoint: bool
    taken: tuple[Arch, ...]
    carried: tuple[tuple[str, tuple[str, ...]], ...]  # per library: its targets
    taken_coverage: RowCoverage | None = None  # mode "take": the row's coverage with the taken list
    jetson: tuple[tuple[Gpu, str], ...] = ()  # per Tegra GPU the row reaches: the seed's Jetson answer
    source: str = ""  # the wheel read: package, version, file name and sha256 (DependencyCode.source)

    @property
    def failed(self) -> bool:
        """Mode ``fail`` and a GPU lost, or nothing in common: the plan fails."""
        return self.mode == "fail" and (bool(self.lost) or self.disjoint)

    @property
    def taken_text(self) -> str:
        return ";".join(str(a) for a in self.taken)

    @property
    def carried_text(self) -> str:
        """What the dependency carries over its libraries: ``SASS sm_75, ..., sm_120a; PTX none``."""
        targets = {t for _, ts in self.carried for t in ts}
        key = target_key
        sass = sorted((t for t in targets if t.startswith("sm_")), key=key)
        ptx = sorted((t for t in targets if t.startswith("compute_")), key=key)
        return f"SASS {', '.join(sass) or 'none'}; PTX {', '.join(ptx) or 'none'}"

    def to_json(self) -> dict[str, Any]:
        return {
            "package": self.package,
            "wheel": self.wheel,
            "source": self.source,
            "gpu_coverage": self.mode,
            "gpus": [
                {"gpu": g.name, "cc": g.cc, "dependency": dep, "row": row} for g, dep, row in self.support
            ],
            "lost": [f"{g.name} ({g.cc})" for g in self.lost],
            "dead": list(self.dead),
            "disjoint": self.disjoint,
            "dependency_carries": self.carried_text,
            "dependency_gpu_archs": self.taken_text,
            "taken": self.taken_text if self.mode == "take" else None,
            "carried": {path: list(targets) for path, targets in self.carried},
            "failed": self.failed,
            "jetson": [{"gpu": g.name, "cc": g.cc, "verdict": v} for g, v in self.jetson],
        }


def compare(
    row: RowCoverage, archs: Sequence[Arch], code: DependencyCode, mode: GpuCoverageMode
) -> DependencyCoverage:
    """The row (its coverage and its list) against the dependency's device code."""
    readable = [lib for lib in code.libraries if lib.fatbin_error is None]
    support: list[tuple[Gpu, Support, str]] = []
    for g in row.gpus:
        support.append((g.gpu, gpu_support(code, g.gpu), g.support))
    serves = {id(gpu) for gpu, dep, _ in support if dep != "none"}
    lost = tuple(gpu for gpu, dep, mine in support if dep != "none" and mine == "none")
    dead: list[str] = []
    for a in archs:
        if not a.ships_sass:
            continue
        runs = [g.gpu for g in row.gpus if g.gpu.runs_sass(a.cc, a.variant)]
        if not any(id(g) in serves for g in runs):
            dead.append(f"{a.major}.{a.minor}{a.variant}")
    disjoint = not any(dep != "none" and mine != "none" for _, dep, mine in support)
    taken = taken_list(code, archs)
    taken_cov = row_coverage(row.row_id, row.cpu, row.train, taken) if mode == "take" and taken else None
    carried = tuple((lib.path, carried_targets(lib)) for lib in readable)
    jetson = tuple((gpu, _jetson(code, gpu, dep, mine)) for gpu, dep, mine in support if gpu.tegra)
    return DependencyCoverage(
        code.package, code.wheel, mode, tuple(support), lost, tuple(dead), disjoint, taken, carried, taken_cov,
        jetson, code.source,
    )  # fmt: skip


def _jetson(code: DependencyCode, gpu: Gpu, dep: Support, mine: str) -> str:
    """The seed's Jetson answer, per Tegra GPU: a row for it only where the dependency has code for it."""
    who = f"{code.package} {code.version}"
    if dep != "none" and mine != "none":
        return f"served: {who} and the row both run on it"
    if dep != "none":
        return f"lost: {who} runs on it ({dep}); add {gpu.cc} to the row's list"
    if mine != "none":
        return f"dead: {who} has no device code for {gpu.cc}; the row's code for it never runs beside {code.package}"
    return f"no row for it: {who} has no device code for {gpu.cc}: a wheel for it would install and then fail"
