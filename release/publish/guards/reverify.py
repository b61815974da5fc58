"""Publish re-verifies, it does not trust: the audit again on the bytes it sends, GPU evidence.

A record beside a wheel is a cache and a report, never a permission: anyone who can write
``dist/`` can write ``"passed": true``, or a whole record with the right sha256. So before
any upload publish

- copies every wheel into its private staging folder (outside dist/, mode 0700:
  :mod:`release.publish.staging`), checks the copy is the bytes the records name, and runs the
  audit again on that copy (the very file twine will send) against the current rows.toml, cold:
  without the C++ consumer's cache and without the auditwheel policies' cache
  (:func:`release.audit.abi.manylinux_cache.cold`: the installed auditwheel's own), whose files
  anyone with this user's rights can edit (:func:`stage_and_reaudit`). Any failing finding refuses the wheel, naming the finding.
  The copy is hashed again after the audit and made read-only; :mod:`release.publish.guards.seal`
  hashes it before and after each upload;
- for a non-rehearsal target, needs per CUDA variant one smoke record whose evidence shows a
  passing run on a GPU (:func:`gpu_evidence_problem`): the probe's whole report, with the GPU
  count, name and driver, judged again by the smoke stage's own rules and consistent with the
  record's verdict, bound to the wheel's sha256 and the run's time. Editing ``"executed": true``
  into a record fails; writing a whole consistent fake report does not fail here: in CI the
  records are attested (docs/publishing.md says what a local edit can and cannot forge).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from release import records
from release.audit.abi import manylinux_cache
from release.audit.model import AuditResult, Expectation
from release.audit.run import audit_wheel
from release.core.errors import InputError, StepFailed
from release.core.hashing import sha256_file
from release.policy.matrix import Row
from release.policy.model import Project
from release.publish.guards import seal
from release.publish.guards.plan import LocalWheel, Log, ruled
from release.records import SmokeRecord
from release.smoke.evaluate import evaluate

MAX_FINDINGS_SHOWN = 3
CLOCK_SKEW_S = 300  # a smoke run's time may be this far ahead of this machine's clock
GPU_KEYS = ("gpus", "gpu_name", "driver_version")  # what the probe reports about the GPU it used


@dataclass(frozen=True)
class Reaudited:
    """A wheel publish may send: ``wheel.path`` is the staged copy that was audited again."""

    wheel: LocalWheel
    source: Path  # the wheel in dist/ the copy was made from
    audit_digest: str  # records.digest of the fresh audit's findings
    checks: int  # how many findings the fresh audit made


def findings_json(result: AuditResult) -> list[dict[str, object]]:
    return [f.to_json() for f in result.findings]


def reaudit_problem(filename: str, result: AuditResult) -> str | None:
    """Why the fresh audit of the bytes publish would send refuses them; None when it passes. Pure."""
    failed = result.failures
    if not failed:
        return None
    shown = "; ".join(f"[{f.check}] {f.message}" for f in failed[:MAX_FINDINGS_SHOWN])
    more = f" (and {len(failed) - MAX_FINDINGS_SHOWN} more)" if len(failed) > MAX_FINDINGS_SHOWN else ""
    return ruled(
        "re-audit",
        f"{filename}: publish ran the audit again on the exact bytes it would upload (sha256 "
        f"{result.sha256}) against this rows.toml, and they fail {len(failed)} finding(s): {shown}{more}. "
        "Its audit record says it passed: the record was edited, forged, or written for other bytes; "
        "a record is a report, never a permission. Fix the wheel and audit it again",
    )


def stage(wheel: LocalWheel, folder: Path) -> Path:
    """Copy the wheel into the private ``folder`` (made 0700 when missing); the copy's path.

    The uploader reads a sealed memfd copy of it (:mod:`release.publish.guards.seal`), whose bytes
    are hashed before each upload; the copy's path is hashed again after.
    """
    staged = folder / wheel.filename
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        staged.unlink(missing_ok=True)  # an earlier prepare's copy in this session
        with wheel.path.open("rb") as src:
            fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except OSError as exc:
        raise StepFailed(f"{wheel.filename}: cannot stage for upload in {folder}: {exc.strerror}") from None
    return staged


def stage_and_reaudit(
    wheels: Sequence[LocalWheel],
    *,
    staging: Path,
    expectation_for: Callable[[LocalWheel], Expectation],
    log: Log,
) -> tuple[list[Reaudited], list[str]]:
    """Stage every wheel and audit each staged copy again; the verified wheels and every problem.

    A copy whose sha256 is not the recorded one (the file changed while it was copied), or whose
    fresh audit has a failing finding, is refused, naming the finding.
    """
    done: list[Reaudited] = []
    problems: list[str] = []
    for wheel in wheels:
        staged = stage(wheel, staging)
        sha = sha256_file(staged)
        if sha != wheel.sha256:
            problems.append(
                ruled(
                    "re-audit",
                    f"{wheel.filename}: changed while publish copied it (sha256 now {sha}, audited "
                    f"{wheel.sha256}); audit it again",
                )
            )
            continue
        log(f"  re-auditing {wheel.filename} (the staged copy publish will upload)")
        try:
            # a cache is no permission: neither the C++ consumer's nor auditwheel's policies'
            with manylinux_cache.cold():
                result = audit_wheel(staged, expectation_for(wheel), remember=False)
        except InputError as exc:  # not a readable wheel, whatever its record says
            problems.append(
                ruled(
                    "re-audit",
                    f"{wheel.filename}: the audit cannot read the bytes publish would upload: {exc}",
                )
            )
            continue
        problem = reaudit_problem(wheel.filename, result) or seal.seal_problem(
            wheel.filename, wheel.sha256, seal.current_sha256(staged), "after the re-audit"
        )
        if problem is None and result.sha256 != wheel.sha256:  # the audit hashed other bytes
            problem = seal.seal_problem(wheel.filename, wheel.sha256, result.sha256, "after the re-audit")
        if problem is not None:
            problems.append(problem)
            continue
        seal.seal(staged)
        done.append(
            Reaudited(
                dataclasses.replace(wheel, path=staged),
                wheel.path,
                records.digest(findings_json(result)),
                len(result.findings),
            )
        )
    return done, problems


# --------------------------------------------------------------------------- GPU evidence


def _utc(text: str) -> dt.datetime | None:
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def gpu_evidence_problem(
    row: Row,
    smoke: SmokeRecord,
    *,
    now: dt.datetime,
    built_at: str | None = None,
    project: Project | None = None,
) -> str | None:
    """Why ``smoke`` (already bound to the wheel's bytes, row and policy by the chain) does not show
    a passing run of ``row``'s wheel on a GPU; None when it does. Pure."""
    name = smoke.wheel
    if not smoke.executed:
        return f"{name}: its smoke run was not executed on a GPU ({smoke.skipped_reason})"
    ev = smoke.evidence
    if ev is None:
        return (
            f"{name}: its smoke record says it ran on a GPU but carries no evidence of the run (the "
            "probe's report); a record's word is not enough: run the GPU smoke job again"
        )
    probe: Mapping[str, object] = ev["probe"]
    gpus, gpu_name, driver = (probe.get(k) for k in GPU_KEYS)
    if not (
        isinstance(gpus, int)
        and not isinstance(gpus, bool)
        and gpus >= 1
        and isinstance(gpu_name, str)
        and gpu_name.strip()
        and isinstance(driver, str)
        and driver.strip()
    ):
        return (
            f"{name}: the probe's report names no GPU and driver (gpus={gpus!r}, gpu_name={gpu_name!r}, "
            f"driver_version={driver!r}); a GPU run reports all three"
        )
    outcome = evaluate(row, probe, project=project)  # the policy's tolerance for the check
    if not (outcome.executed and outcome.passed):
        why = next((line for line in outcome.lines if line.startswith("✗")), "the run was not executed")
        return f"{name}: the probe's report does not show a passing GPU run: {why}"
    missing = [line for line in outcome.lines if line not in smoke.lines]
    if missing or outcome.libcudart != smoke.libcudart:
        shown = missing[0] if missing else f"libcudart {outcome.libcudart!r}"
        return f"{name}: the record's verdict is not the one its probe's report gives ({shown}); the record was edited"
    when = _utc(smoke.at)
    if when is None:
        return f"{name}: the smoke run's time {smoke.at!r} is not a UTC time"
    if (when - now).total_seconds() > CLOCK_SKEW_S:
        return f"{name}: the smoke run's time {smoke.at} is in the future"
    built = _utc(built_at) if built_at else None
    if built is not None and when < built:
        return f"{name}: smoke-tested at {smoke.at}, before the wheel was built ({built_at})"
    return None


def gpu_gate_problems(
    cuda_variants: Sequence[str],
    candidates: Sequence[tuple[Row, SmokeRecord, str | None]],
    *,
    now: dt.datetime,
    project: Project | None = None,
) -> list[str]:
    """Per CUDA variant, one ``(row, smoke record, built_at)`` must pass :func:`gpu_evidence_problem`;
    the problems of each variant with none (pure)."""
    out: list[str] = []
    for variant in cuda_variants:
        why: list[str] = []
        for row, smoke, built_at in candidates:
            if row.variant != variant:
                continue
            problem = gpu_evidence_problem(row, smoke, now=now, built_at=built_at, project=project)
            if problem is None:
                break
            why.append(problem)
        else:
            detail = "; ".join(why) if why else "no wheel of it is in this release"
            out.append(
                ruled(
                    "gpu-evidence",
                    f"no wheel of {variant} was smoke-tested on a GPU with evidence of the run: {detail}; "
                    "run the GPU smoke job and bring its records into dist/",
                )
            )
    return out
