"""A ``[[jetson]]`` row decided from its GPU dependencies' device code (pure): the seed's Jetson answer.

A wheel for a Jetson GPU is worth building only where every GPU dependency of the row runs there (SASS
built for that very capability, or PTX the driver can JIT: the Tegra rule of release/resources/cuda.toml).
Then the row is **filled in**: its arch list is the GPU's own capability. Otherwise it is **refused**, with
the reason and the dependency wheel that was read: a wheel there installs and then fails at the first
kernel launch of its dependency, whatever its own code. A row without a GPU dependency is filled in (its
own code is all it runs). A dependency whose wheel was not read leaves the row **undecided**, said.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from release.coverage.compare import carried_targets, gpu_support, target_key
from release.coverage.dependency import DependencyCode
from release.policy.archs import Arch
from release.policy.model import JetsonRow

__all__ = ["JetsonDecision", "decide"]

Verdict = Literal["filled", "refused", "undecided"]


@dataclass(frozen=True)
class JetsonDecision:
    row: JetsonRow
    verdict: Verdict
    gpu_archs: tuple[Arch, ...]  # filled: the GPU's own capability; () otherwise
    reason: str
    read: tuple[str, ...] = ()  # the dependency wheels read (DependencyCode.source)

    @property
    def arch_list(self) -> str:
        return ";".join(str(a) for a in self.gpu_archs)

    def line(self) -> str:
        """One line for ``plan`` and ``coverage``."""
        gpu = f"{self.row.gpu.name} ({self.row.gpu.cc})"
        head = (
            f"{self.row.id}: {gpu}, CUDA {self.row.train}, Python {self.row.python}, {self.row.builder_image}"
        )
        what = f"filled in: gpu archs {self.arch_list}" if self.verdict == "filled" else self.verdict
        return f"{head}: {what}: {self.reason}"

    def to_json(self) -> dict[str, Any]:
        return {
            **self.row.to_json(),
            "verdict": self.verdict,
            "gpu_archs": [str(a) for a in self.gpu_archs],
            "reason": self.reason,
            "read": list(self.read),
        }


def decide(row: JetsonRow, codes: Sequence[DependencyCode], not_read: Sequence[str] = ()) -> JetsonDecision:
    """The row against each dependency's device code (``codes``); ``not_read``: why a dependency's wheel
    was not read (its package and reason), which leaves the row undecided."""
    gpu = row.gpu
    read = tuple(c.source for c in codes)
    if not_read:
        return JetsonDecision(row, "undecided", (), "; ".join(not_read), read)
    lacking: list[str] = []
    serving: list[str] = []
    for code in codes:
        support = gpu_support(code, gpu)
        targets = sorted(
            {t for lib in code.libraries for t in carried_targets(lib)}, key=lambda t: (target_key(t), t)
        )
        if support == "none":
            lacking.append(
                f"{code.package} {code.version} ({code.wheel}) has no device code for {gpu.name} ({gpu.cc}): "
                f"it carries {', '.join(targets) or 'nothing'}, and a Tegra GPU runs only SASS built for its "
                "own capability or PTX"
            )
        else:
            serving.append(f"{code.package} {code.version} runs on it ({support}, {code.wheel})")
    if lacking:
        reason = "; ".join(lacking) + ": a wheel here would install and then fail, so it is not built"
        return JetsonDecision(row, "refused", (), reason, read)
    own = (Arch(gpu.major, gpu.minor),)
    reason = "; ".join(serving) if serving else "no GPU dependency: its own code is all the wheel runs"
    reason += " (planned here: python -m release build does not build [[jetson]] rows yet)"
    return JetsonDecision(row, "filled", own, reason, read)
