"""The audit command's claim options, for :mod:`release.commands.audit` to add and read.

``--gpu-archs`` (with or without ``--variant``), ``--runs-on``, ``--driver``, ``--checks``,
``--allow``: :func:`add_claim_options` adds them to the ``audit`` parser;
:func:`fixed_expectation` turns the parsed arguments into the expectation every wheel of the
command is held to (None: each wheel's own row, by its file name), and
:func:`row_options` applies the options to a row's expectation. A policy file is needed only
for ``--row``, row ids and file-name audits: ``--variant``/``--gpu-archs``/``--runs-on`` without
one audit standalone (:mod:`release.audit.standalone`), from any folder; wheel files with no
claim and no rows.toml in this folder are audited standalone with the checks that need no claim
(:func:`release.audit.claim.unclaimed_expectation`), and so is another project's wheel under the
rows.toml of this folder (:func:`stranger`). :func:`in_dist`: whether a row's record is written
beside the wheel by default.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypedDict

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from release.audit.claim import ALLOWABLE, apply_options, claim_expectation, unclaimed_expectation
from release.audit.model import Expectation
from release.core.errors import InputError
from release.policy.model import Policy

__all__ = [
    "add_claim_options",
    "fixed_expectation",
    "in_dist",
    "is_wheel_argument",
    "row_options",
    "stranger",
]

PolicyLoader = Callable[[str, bool], tuple[Policy | None, str | None]]


def add_claim_options(p: argparse.ArgumentParser) -> None:
    """``--runs-on``, ``--driver``, ``--checks``, ``--allow`` (``--gpu-archs`` is the parser's own)."""
    p.add_argument(
        "--runs-on",
        metavar="CCS",
        help="GPUs every library must run on, natively or by PTX JIT: compute capabilities, e.g. 7.5,8.0,9.0,12.0 "
        "(units whose kernels are only for other GPUs, such as sm_90a-only ones, are noted, not failed)",
    )
    p.add_argument(
        "--driver",
        metavar="VERSION",
        help="predict for this driver: the CUDA version it supports (13.0, as nvidia-smi prints it) or its "
        "version (580.159.04); PTX newer than it cannot JIT",
    )
    p.add_argument(
        "--checks",
        metavar="LIST",
        help="run only these checks (comma-separated, e.g. device_code,gpus); a partial audit writes no record",
    )
    p.add_argument(  # checked by release.audit.claim.apply_options: a bad value is an InputError, JSON too
        "--allow",
        action="append",
        default=[],
        metavar="{" + ",".join(ALLOWABLE) + "}",
        help="allow what a row's policy can allow: device code embedded as data, a/f variants not claimed "
        "(repeatable)",
    )


def is_wheel_argument(item: str) -> bool:
    """A WHEEL argument that names a file (``*.whl``, or any path that exists), not a row id."""
    return item.endswith(".whl") or Path(item).exists()


def stranger(wheel: str, policy: Policy) -> bool:
    """Whether the wheel file is not the policy's project's (its distribution name is another's), or its
    name does not parse as a wheel's: such a wheel is never judged as one of the policy's rows."""
    try:
        name = parse_wheel_filename(Path(wheel).name)[0]
    except InvalidWheelFilename:
        return True
    return name != canonicalize_name(policy.project.name)


def in_dist(wheel: str, dist: str) -> bool:
    """Whether the wheel lies under the dist folder (``--dist``): only there does an audit against a row
    write its record beside the wheel by default (someone's download folder gets nothing unasked)."""
    return Path(wheel).resolve().is_relative_to(Path(dist).resolve())


def fixed_expectation(
    args: argparse.Namespace, load_policy: PolicyLoader, default_policy: str
) -> tuple[Expectation | None, Policy | None, str | None]:
    """The expectation for every wheel, the policy (if one was read) and its sha256.

    ``--variant``, ``--gpu-archs`` or ``--runs-on`` without ``--row``: a claim, with the policy's
    train packages when ``--policy`` names a policy that defines the variant (or rows.toml is in
    this folder and does), otherwise standalone. No claim, no ``--policy`` (``args.policy`` None), no
    ``default_policy`` in this folder and only wheel files: standalone with the checks that need no
    claim. ``load_policy(path, required)`` is the CLI's.
    """
    if args.row is not None and args.variant is not None:
        raise InputError("--row and --variant: a row brings its own variant; drop one of them")
    # the options' syntax, once for the command (a row's audit applies them per wheel)
    apply_options(Expectation("cuda", None, (), ()), **_options(args))
    if args.row is not None and args.gpu_archs is not None:
        raise InputError("--gpu-archs and --row: a row brings its own arch list; drop one of them")
    claims = args.variant is not None or args.gpu_archs is not None or args.runs_on is not None
    explicit = args.policy is not None  # --policy given; None: default_policy in this folder, if there
    path = args.policy if explicit else default_policy
    if claims and args.row is None:
        policy, digest = load_policy(path, explicit) if explicit or Path(path).is_file() else (None, None)
        if (
            not explicit
            and policy is not None
            and all(is_wheel_argument(w) and stranger(w, policy) for w in args.wheels)
        ):
            policy, digest = None, None  # the rows.toml of this folder is another project's: standalone
        exp = claim_expectation(
            variant=args.variant, gpu_archs=args.gpu_archs, policy=policy, **_options(args)
        )
        return replace(exp, policy_sha256=None if exp.standalone else digest), policy, digest
    no_policy = not explicit and not Path(default_policy).is_file()
    if args.row is None and no_policy and all(is_wheel_argument(w) for w in args.wheels):
        return unclaimed_expectation(driver=args.driver, checks=args.checks, allow=args.allow), None, None
    return None, None, None


def row_options(expectation: Expectation, args: argparse.Namespace) -> Expectation:
    """A row's expectation with ``--runs-on``, ``--driver``, ``--checks`` and ``--allow`` applied."""
    return apply_options(expectation, **_options(args))


class _Options(TypedDict):
    """The keywords :func:`~release.audit.claim.apply_options` takes, as the command line gave them."""

    runs_on: str | None
    driver: str | None
    checks: str | None
    allow: Sequence[str]


def _options(args: argparse.Namespace) -> _Options:
    return {"runs_on": args.runs_on, "driver": args.driver, "checks": args.checks, "allow": args.allow}
