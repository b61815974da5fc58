"""What a wheel is claimed to be, from the command line: arch lists, GPUs it must run on, a driver.

The functions here turn the audit command's options into an :class:`Expectation` (the CLI in
:mod:`release.commands.audit` calls them); every syntax error is an InputError (exit 2) that says how
to write it.

``--gpu-archs``: one list for every library, and lists per library::

    "7.5;8.0;9.0;12.0+PTX"                         every library
    "8.0;compute_90"                               SASS 8.0, PTX only for 9.0
    "sm_80;sm_90a;10.0f+PTX"                       nvcc names; a/f variants
    "7.5;8.0 lib/libgemm.so=8.0;9.0a"              a library of its own (wheel path, file name or glob)

Entries are the policy's (``X.Y``, ``X.Ya``, ``X.Yf``, with ``+PTX``) or nvcc's (``sm_XY``,
``compute_XY``, with ``a``/``f``); see :mod:`release.policy.archs` for what each promises. A
word with ``=`` starts a library's list; words without one continue the list before them.
The audit's read-back (``arch_list_found``) is written in this syntax.

``--runs-on 7.5,8.0,9.0,12.0``: every library must run (natively or by PTX JIT) on each (units
whose kernels are only for other GPUs are noted, not failed).
``--driver 13.0`` or ``--driver 580.159.04``: predict for that driver (PTX newer than it cannot
JIT; a newer CUDA major cannot load). ``--checks device_code,gpus``: run only those checks
(the result is partial: no record a publish may trust). ``--allow embedded-device-code`` and
``--allow extra-variants``: what a row's policy would allow.

No claim and no policy (:func:`unclaimed_expectation`): the wheel is audited standalone with the
checks that need no claim (:data:`NO_CLAIM_CHECKS`), a partial audit that writes no record; its
device code is read and reported (inventory, GPU table, the claim read back), not judged.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import replace

from release.audit.drivers import DriverSyntaxError, parse_driver
from release.audit.model import Expectation
from release.audit.registry import CHECKS, NO_CLAIM_CHECKS, OPTIONAL_CHECKS
from release.core.errors import InputError
from release.policy.archs import Arch, ArchSyntaxError, parse_claim_list
from release.policy.matrix import Row
from release.policy.model import Policy
from release.resources.cuda import cuda

__all__ = [
    "ALLOWABLE",
    "CLAIM_HINT",
    "NO_CLAIM_CHECKS",
    "LibraryArchs",
    "apply_options",
    "claim_expectation",
    "parse_checks",
    "parse_claim",
    "parse_runs_on",
    "row_expectation",
    "unclaimed",
    "unclaimed_expectation",
    "variant_train",
]

LibraryArchs = tuple[tuple[str, tuple[Arch, ...]], ...]
ALLOWABLE = ("embedded-device-code", "extra-variants")
CLAIM_HINT = (
    "--gpu-archs LIST (each audit prints one: 'device code found, as a claim'), --runs-on CCs "
    "[--driver VERSION], or --variant cpu for a wheel without device code"
)
_VARIANT = re.compile(r"\Acu(\d{2,3})\Z")


def parse_claim(text: str) -> tuple[tuple[Arch, ...], LibraryArchs]:
    """``"7.5;8.0 lib/libk.so=9.0+PTX"`` -> (list for every library, per-library lists)."""
    default: list[str] = []
    per: list[tuple[str, list[str]]] = []
    for word in text.split():
        if "=" in word:
            name, _, rest = word.partition("=")
            if not name or "=" in rest:
                raise InputError(f"--gpu-archs: {word!r}: write LIBRARY=ARCHS, e.g. libk.so=8.0;9.0+PTX")
            if any(name == seen for seen, _ in per):
                raise InputError(f"--gpu-archs: {name!r} has two lists; give each library one")
            per.append((name, [rest] if rest else []))
        elif per:
            per[-1][1].append(word)
        else:
            default.append(word)
    try:
        archs = parse_claim_list(";".join(default)) if default else ()
        libraries = tuple((name, parse_claim_list(";".join(words))) for name, words in per)
    except ArchSyntaxError as exc:
        raise InputError(f"--gpu-archs: {exc}") from None
    if not archs and not libraries:
        raise InputError("--gpu-archs: the arch list is empty; name at least one architecture")
    return archs, libraries


def parse_runs_on(text: str) -> tuple[tuple[int, int], ...]:
    """``"7.5,8.0,9.0"`` (commas, semicolons or spaces) -> compute capabilities that exist."""
    known = cuda().capabilities
    out: list[tuple[int, int]] = []
    for part in (p for p in re.split(r"[,;\s]+", text.strip()) if p):
        m = re.fullmatch(r"(\d{1,2})\.(\d)", part)
        if m is None:
            raise InputError(f"--runs-on: {part!r} is not a compute capability; write them like 7.5,8.0,9.0")
        cc = (int(m[1]), int(m[2]))
        if cc not in known:
            listed = ", ".join(f"{a}.{b}" for a, b in known)
            raise InputError(f"--runs-on: {part} is not a real compute capability; known: {listed}")
        if cc not in out:
            out.append(cc)
    if not out:
        raise InputError("--runs-on: name at least one compute capability, e.g. 9.0")
    return tuple(out)


def parse_checks(text: str) -> tuple[str, ...]:
    """``"device_code,gpus"`` -> those checks, in report order."""
    names = [p for p in re.split(r"[,\s]+", text.strip()) if p]
    every = (*CHECKS, *OPTIONAL_CHECKS)
    for name in names:
        if name not in every:
            close = difflib.get_close_matches(name, every, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; checks: {', '.join(every)}"
            raise InputError(f"--checks: no check {name!r}{hint}")
    if not names:
        raise InputError(f"--checks: name at least one of {', '.join(every)}")
    return tuple(c for c in every if c in names)


def variant_train(variant: str) -> str:
    """``cu130`` -> ``13.0``, ``cu128`` -> ``12.8``, ``cu118`` -> ``11.8``. InputError otherwise."""
    m = _VARIANT.match(variant)
    if m is None:
        raise InputError(f"--variant {variant!r} is not 'cpu' or a CUDA variant like 'cu130' or 'cu128'")
    digits = m[1]
    return f"{digits[:-1]}.{digits[-1]}"


def apply_options(
    expectation: Expectation,
    *,
    runs_on: str | None = None,
    driver: str | None = None,
    checks: str | None = None,
    allow: Sequence[str] = (),
) -> Expectation:
    """``--runs-on``, ``--driver``, ``--checks`` and ``--allow`` on top of any expectation (a row's too)."""
    changes: dict[str, object] = {}
    if runs_on is not None:
        if not expectation.is_cuda:
            raise InputError("--runs-on: a CPU wheel runs on no GPU; drop --runs-on for --variant cpu")
        changes["runs_on"] = parse_runs_on(runs_on)
    if driver is not None:
        try:
            changes["driver"] = parse_driver(driver)
        except DriverSyntaxError as exc:
            raise InputError(str(exc)) from None
        changes["driver_source"] = f"--driver {driver.strip()}"
    if checks is not None:
        changes["checks"] = parse_checks(checks)
    for item in allow:
        if item not in ALLOWABLE:
            raise InputError(f"--allow {item!r}: one of {', '.join(ALLOWABLE)}")
        changes["embedded_device_code" if item == "embedded-device-code" else "extra_variants"] = "allow"
    if allow:
        changes["overrides"] = (*expectation.overrides, *(f"--allow {item}" for item in allow))
    return replace(expectation, **changes)  # type: ignore[arg-type]


def row_expectation(
    row: Row, *, policy_sha256: str | None = None, max_wheel_mib: int | None = None
) -> Expectation:
    """What a row's wheel is held to, the one way every step makes it (the pipeline's audit, the audit
    command's ROW, publish's re-audit): the row's claim (:meth:`Expectation.from_row`), the index's
    file limit (None: none, as on a local rehearsal index) and the policy's sha256 that the wheel's
    build record must name (None: not checked). Pure."""
    exp = Expectation.from_row(row, max_wheel_mib=max_wheel_mib)
    return exp if policy_sha256 is None else replace(exp, policy_sha256=policy_sha256)


def claim_expectation(
    *,
    variant: str | None,
    gpu_archs: str | None,
    policy: Policy | None,
    runs_on: str | None = None,
    driver: str | None = None,
    checks: str | None = None,
    allow: Sequence[str] = (),
) -> Expectation:
    """The expectation of ``--variant``/``--gpu-archs``/``--runs-on`` audits.

    With a policy that defines the variant, its train's CUDA packages (as ``--variant`` always
    did); otherwise standalone: the train from the variant (``cu128`` is CUDA 12.8) or, without
    one, from the wheel itself, and the package rules from what the wheel declares
    (:mod:`release.audit.standalone` fills them in when the wheel is read).
    """
    archs: tuple[Arch, ...] = ()
    per: LibraryArchs = ()
    if gpu_archs is not None:
        archs, per = parse_claim(gpu_archs)
    if variant == "cpu":
        if gpu_archs is not None or runs_on is not None:
            raise InputError(
                "a CPU wheel carries no device code; drop --gpu-archs/--runs-on for --variant cpu"
            )
        extra = policy.extra_variants if policy is not None else "reject"
        base = Expectation("cpu", None, (), (), extra_variants=extra, standalone=policy is None)
        return apply_options(base, driver=driver, checks=checks, allow=allow)
    train = variant_train(variant) if variant is not None else None
    from_policy = (
        next((t for t in policy.trains if t.variant == variant), None) if policy and variant else None
    )
    if from_policy is not None and policy is not None:
        base = Expectation(
            variant=from_policy.variant,
            train=from_policy.version,
            gpu_archs=archs,
            cuda_packages=from_policy.cuda_packages,
            extra_variants=policy.extra_variants,
            library_archs=per,
        )
    else:
        base = Expectation(
            variant=variant or "cuda",
            train=train,
            gpu_archs=archs,
            cuda_packages=(),
            extra_variants="reject",
            library_archs=per,
            standalone=True,
        )
    return apply_options(base, runs_on=runs_on, driver=driver, checks=checks, allow=allow)


def unclaimed_expectation(
    *, driver: str | None = None, checks: str | None = None, allow: Sequence[str] = ()
) -> Expectation:
    """No claim and no policy: a standalone audit with the checks that need no claim (``--checks``
    chooses others), its train and packages from the wheel. ``libraries``, ``device_code`` and
    ``gpus`` judge device code against a claim (a CUDA wheel without one fails them closed), so they
    run only when asked for; the device code is still read and reported."""
    base = Expectation("cuda", None, (), (), standalone=True)
    return apply_options(base, driver=driver, checks=checks or ",".join(NO_CLAIM_CHECKS), allow=allow)


def unclaimed(expectation: Expectation) -> bool:
    """The expectation :func:`unclaimed_expectation` makes (before the wheel completes it): standalone,
    with no variant, arch list or GPU to run on."""
    return (
        expectation.standalone
        and expectation.variant == "cuda"
        and expectation.train is None
        and not expectation.has_arch_claim
        and not expectation.runs_on
    )
