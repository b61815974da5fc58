"""Which CUDA releases newer than the policy's newest train a package index offers (pure).

``python -m release trains --check`` asks pip's index which versions of the CUDA toolchain's
packages exist (the effect, in :mod:`release.commands.trains`) and hands them here: this module decides,
from the policy's trains, those versions and the CUDA facts (``release/resources/cuda.toml``), which
newer CUDA releases exist, what each would add (GPU architectures the GPU table says that release's
driver is the first to know) and what a ``[train]`` for it would pin. Nothing here reads a file, runs
a process or touches the policy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from release.policy.versions import KNOWN_CUDA_TRAINS
from release.resources.cuda import CudaFacts

NVCC = "nvidia-cuda-nvcc"
# The parts of a PyPI CUDA toolchain, pinned together (rows.toml's pypi_toolchain): used when no
# train of the policy pins one to copy the names from.
TOOLCHAIN_PACKAGES: tuple[str, ...] = (
    "nvidia-cuda-nvcc",
    "nvidia-cuda-crt",
    "nvidia-nvvm",
    "nvidia-cuda-runtime",
    "nvidia-cuda-cccl",
)

Release = tuple[int, int]


@dataclass(frozen=True)
class NewerRelease:
    """One CUDA release the index offers that is newer than every train of the policy."""

    release: Release  # (13, 3)
    pins: tuple[str, ...]  # a pypi_toolchain for it: each part's newest version of that release
    missing: tuple[str, ...]  # toolchain parts the index has no version of that release of
    new_gpus: tuple[str, ...]  # "12.1 (DGX Spark)": GPUs whose first driver is this release's
    known_to_cuda_toml: bool  # release/resources/cuda.toml has [release."X.Y"] (PTX ISA, driver)
    known_to_policy: bool = True  # release/policy/versions.py's KNOWN_CUDA_TRAINS names it (else refused)

    @property
    def label(self) -> str:
        return f"{self.release[0]}.{self.release[1]}"


@dataclass(frozen=True)
class TrainsCheck:
    trains: tuple[str, ...]  # the policy's trains, oldest first
    newest_offered: str | None  # the index's newest nvcc version ("13.5.37"); None: it offers none
    newer: tuple[NewerRelease, ...]  # oldest first; empty: the policy is current


def _release_of(version: str) -> tuple[Release, Version] | None:
    """``13.3.73`` -> ((13, 3), Version); pre-releases, dev releases and bad versions: None."""
    try:
        v = Version(version)
    except InvalidVersion:
        return None
    if v.is_prerelease or v.is_devrelease or len(v.release) < 2:
        return None
    return (v.release[0], v.release[1]), v


def newest_per_release(versions: Sequence[str]) -> dict[Release, str]:
    """The newest final version of each CUDA release among ``versions``, as written."""
    best: dict[Release, tuple[Version, str]] = {}
    for text in versions:
        parsed = _release_of(text)
        if parsed is None:
            continue
        release, v = parsed
        if release not in best or v > best[release][0]:
            best[release] = (v, text)
    return {r: text for r, (_, text) in sorted(best.items())}


def toolchain_packages(pins_by_train: Mapping[str, Sequence[str]], trains: Sequence[str]) -> tuple[str, ...]:
    """The toolchain parts to ask about: the newest train's ``pypi_toolchain`` names that has one,
    nvcc first; :data:`TOOLCHAIN_PACKAGES` when no train pins one."""
    for train in sorted(trains, key=_train_key, reverse=True):
        pins = pins_by_train.get(train) or ()
        if pins:
            names = [canonicalize_name(Requirement(p).name) for p in pins]
            return (NVCC, *(n for n in names if n != NVCC))
    return TOOLCHAIN_PACKAGES


def _train_key(train: str) -> Release:
    major, _, minor = train.partition(".")
    return int(major), int(minor)


def _gpus_first_known_by(facts: CudaFacts, after: Release, upto: Release) -> tuple[str, ...]:
    return tuple(
        f"{g.major}.{g.minor} ({g.name})"
        for g in facts.gpus
        if g.since is not None and after < g.since <= upto
    )


def check_trains(
    trains: Sequence[str],
    offered: Mapping[str, Sequence[str]],
    facts: CudaFacts,
    *,
    packages: Sequence[str] = TOOLCHAIN_PACKAGES,
    known_trains: Sequence[str] = KNOWN_CUDA_TRAINS,
) -> TrainsCheck:
    """Every CUDA release whose nvcc the index offers and that is newer than the newest train.

    ``offered`` maps a package's canonical name to the versions the index has (``pip index
    versions``); ``packages`` are the toolchain's parts, nvcc first. A release's new GPUs are those
    whose first driver (cuda.toml ``[gpu].since``) is newer than the previous newer release (or
    the newest train) and at most this one: each GPU is named once, at the release that adds it.
    """
    if not trains:
        raise ValueError("the policy has no CUDA train to compare")
    newest = max(_train_key(t) for t in trains)
    nvcc = newest_per_release(offered.get(NVCC, ()))
    by_package = {p: newest_per_release(offered.get(p, ())) for p in packages}
    newer: list[NewerRelease] = []
    previous = newest
    for release in sorted(r for r in nvcc if r > newest):
        pins = tuple(f"{p}=={by_package[p][release]}" for p in packages if release in by_package[p])
        missing = tuple(p for p in packages if release not in by_package[p])
        newer.append(
            NewerRelease(
                release=release,
                pins=pins,
                missing=missing,
                new_gpus=_gpus_first_known_by(facts, previous, release),
                known_to_cuda_toml=facts.release(release) is not None,
                known_to_policy=f"{release[0]}.{release[1]}" in known_trains,
            )
        )
        previous = release
    newest_offered = nvcc[max(nvcc)] if nvcc else None
    ordered = tuple(sorted(trains, key=_train_key))
    return TrainsCheck(trains=ordered, newest_offered=newest_offered, newer=tuple(newer))


def render(check: TrainsCheck, policy: str) -> list[str]:
    """What the command prints: one paragraph per newer release, or that the policy is current."""
    newest = check.trains[-1]
    head = f"{policy}: CUDA trains {', '.join(check.trains)} (newest {newest})"
    if not check.newer:
        offered = f"nvidia-cuda-nvcc {check.newest_offered}" if check.newest_offered else "no newer nvcc"
        return [head, f"✓ current: pip's index offers no CUDA release newer than {newest} ({offered})"]
    labels = ", ".join(n.label for n in check.newer)
    out = [
        head,
        f"notice: pip's index offers {len(check.newer)} newer CUDA release(s) than {newest}: {labels} "
        f"(nvidia-cuda-nvcc up to {check.newest_offered})",
    ]
    for n in check.newer:
        adds = (
            f"adds GPU architecture(s) {', '.join(n.new_gpus)}"
            if n.new_gpus
            else "adds no GPU architecture the GPU table knows (release/resources/cuda.toml [gpu].since)"
        )
        out.append(f"  CUDA {n.label}: {adds}")
        if not n.known_to_cuda_toml:
            out.append(
                f'    release/resources/cuda.toml has no [release."{n.label}"] (its PTX ISA, its oldest driver): '
                "add it with the train"
            )
        if not n.known_to_policy:
            out.append(
                f"    release/policy/versions.py's KNOWN_CUDA_TRAINS does not name {n.label}: a policy naming it "
                "is refused until it does"
            )
        if n.missing:
            out.append(
                f"    no {n.label} release on the index of: {', '.join(n.missing)} (a pypi_toolchain pins every "
                "part; until then the train needs a host toolkit or its builder image)"
            )
        out.append(f"    pypi_toolchain = [{', '.join(repr(p).replace(chr(39), chr(34)) for p in n.pins)}]")
    out.append(f"{policy} was not changed; adding a train: docs/adding-a-train.md")
    return out
