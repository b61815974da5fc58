"""``python -m release trains [--check]``: the policy's CUDA trains, and the newer ones pip's index offers.

The decision is :mod:`release.policy.newer_trains` (pure); this module asks pip (the effect,
:func:`release.core.pip.index_versions`, with this machine's pip configuration) and prints.
It never writes the policy: adding a train is a person's change (docs/adding-a-train.md).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from typing import Any

from release.core import log
from release.core.errors import ToolError
from release.policy.load import DEFAULT_POLICY, default_policy

__all__ = ["add_parser", "offered_versions", "run"]

FIX = (
    "pip found no {name} on the index it is configured for, so it reached none, or its index does not "
    "serve NVIDIA's CUDA toolchain. Point pip at an index that does (PIP_INDEX_URL, or "
    "`pip config set global.index-url URL`; `pip config list` shows what it uses now), or give it a "
    "route to one (HTTPS_PROXY), then run this again"
)


def add_parser(subparsers: argparse._SubParsersAction[Any]) -> argparse.ArgumentParser:
    """Add the ``trains`` command to ``subparsers`` (from ``parser.add_subparsers()``)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "trains",
        help="list the policy's CUDA trains; --check: which newer CUDA releases pip's index offers",
        description="List the policy's CUDA trains. With --check, ask pip's index (this machine's pip "
        "configuration) which CUDA toolchains it offers, and say which CUDA releases are newer than the "
        "newest train, what each would add (GPU architectures release/resources/cuda.toml knows) and the "
        "toolchain pins a [train] for it would take. Exit 0 with a notice; the policy is never changed "
        "(docs/adding-a-train.md). Exit 3 when pip reaches no index that serves the toolchain.",
    )
    p.add_argument(
        "--policy",
        default=default_policy(os.environ),
        help=f"policy file (default: $WHEELWRIGHT_POLICY, else {DEFAULT_POLICY}; here: %(default)s)",
    )
    p.add_argument("--check", action="store_true", help="compare the trains with pip's index")
    p.set_defaults(func=run)
    return p


def offered_versions(packages: Sequence[str], env: Mapping[str, str]) -> dict[str, tuple[str, ...]]:
    """What pip's index offers of each toolchain part (the effect); ToolError naming the fix when it
    offers no nvcc (the first part) at all."""
    from release.core.pip import index_versions

    offered: dict[str, tuple[str, ...]] = {}
    for i, name in enumerate(packages):
        versions, stderr = index_versions(name, env=env)
        if versions is None and i == 0:
            tail = "\n".join(stderr.strip().splitlines()[-5:])
            raise ToolError(FIX.format(name=name) + (f"\npip said:\n{tail}" if tail else ""))
        offered[name] = versions or ()
    return offered


def run(args: argparse.Namespace) -> int:
    from release.policy.load import load_policy
    from release.policy.newer_trains import check_trains, render, toolchain_packages
    from release.resources.cuda import cuda

    policy = load_policy(args.policy)
    if not policy.trains:
        print(f"{policy.path}: no CUDA train (a CPU-only policy); nothing to compare")
        return 0
    if not args.check:
        for t in policy.trains:
            nvcc = next(
                (p for p in t.pypi_toolchain if p.startswith("nvidia-cuda-nvcc==")), "no PyPI toolchain"
            )
            images = ", ".join(f"{arch}: {image}" for arch, image in sorted(t.builder_images.items()))
            print(f"CUDA {t.version} ({t.variant}): {nvcc}; {images}")
        return 0
    versions = [t.version for t in policy.trains]
    packages = toolchain_packages({t.version: t.pypi_toolchain for t in policy.trains}, versions)
    log.info(f"asking pip's index for {', '.join(packages)}")
    result = check_trains(versions, offered_versions(packages, os.environ), cuda(), packages=packages)
    for line in render(result, policy.path):
        print(line)
    if result.newer:
        log.annotate(
            "newer CUDA releases",
            f"pip's index offers CUDA {', '.join(n.label for n in result.newer)}; {policy.path}'s newest "
            f"train is {result.trains[-1]} (docs/adding-a-train.md)",
            level_name="notice",
        )
    return 0
