"""Upload one staged wheel and, when that fails, say exactly what the index holds and what to do next.

:func:`upload_one` sends a sealed memfd copy of the staged file (:func:`release.publish.guards.seal.sealed_upload`:
the sealed bytes hashed before, the staged path hashed again after): with twine reading only that
memfd (:mod:`release.publish.sealed_twine`), one file per call, under the upload's deadline
(:mod:`release.publish.guards.deadlines`) and killed with its parent, or, for a ``file://`` upload
URL, as a copy of it into a static index folder (:mod:`release.publish.index.static`). On any failure it
reads the index back: the file there with the audited sha256 is ours (or someone else's, when the
index refused ours); another file under that name is diagnosed (:mod:`release.publish.guards.conflicts`);
none is a StepFailed that says how to resume. :func:`done_so_far` is the line every such message
ends with. The run it belongs to is :func:`release.publish.upload.execute_publish`'s.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit
from urllib.request import url2pathname

from release.core import proc
from release.core.errors import CheckFailed, StepFailed
from release.policy.targets import IndexTarget
from release.publish.guards import seal
from release.publish.guards.conflicts import describe_conflict
from release.publish.guards.deadlines import dies_with_parent
from release.publish.guards.plan import (
    LocalWheel,
    Log,
    credential_env_names,
    file_key,
    plan_publish,
    ruled,
    twine_command,
    twine_env,
)
from release.publish.index.static import add_sealed, write_static_index
from release.publish.prepared import PreparedPublish

Outcome = Literal["uploaded", "raced"]


def done_so_far(uploaded: Sequence[str], p: PreparedPublish) -> str:
    """The line a publish failure ends with: what this run uploaded so far, what was already there."""
    done = ", ".join(uploaded) if uploaded else "none"
    return (
        f"done so far on {p.where}: {len(uploaded)} of {len(p.plan.to_upload)} file(s) uploaded by this "
        f"run ({done}), {len(p.plan.skip_same)} already there"
    )


def _add_to_static(fd: int, filename: str, index: IndexTarget) -> None:
    """A ``file://`` upload URL is a static index folder: add the sealed copy under the wheel's
    name, rewrite the pages."""
    root = Path(url2pathname(urlsplit(index.upload_url).path))
    add_sealed(root, filename, Path(f"/proc/self/fd/{fd}"))
    write_static_index(root)


def sealed_twine_command(wheel: LocalWheel, fd: int, p: PreparedPublish) -> list[str]:
    """twine's upload of the sealed copy ``fd`` (:mod:`release.publish.sealed_twine`, run as a script
    with ``-P``: no folder of this checkout on its path), killed with this process: the options of
    ``twine upload``, the staged path (for its name: never opened) and the audited sha256."""
    twine = twine_command(p.index, wheel.path)
    options = twine[twine.index("upload") + 1 : -1]  # the options, not the staged path
    script = str(Path(__file__).with_name("sealed_twine.py"))
    pid = os.getpid()
    return dies_with_parent(
        [sys.executable, "-P", script, str(pid), str(fd), str(wheel.path), wheel.sha256, *options], pid
    )


def _run_twine(wheel: LocalWheel, fd: int, p: PreparedPublish) -> tuple[bool, str, float | None]:
    """(ok, output, the deadline when twine was killed at it)."""
    limit = p.deadlines.for_upload(wheel.size)
    command = sealed_twine_command(wheel, fd, p)
    try:
        result = proc.run(command, env=twine_env(p.environ, p.creds), check=False, timeout=limit)
    except StepFailed as exc:
        if isinstance(exc.__cause__, subprocess.TimeoutExpired):
            return False, "", limit
        return False, str(exc), None
    return result.returncode == 0, result.stdout + "\n" + result.stderr, None


def _send(wheel: LocalWheel, fd: int, p: PreparedPublish) -> tuple[bool, str, float | None]:
    """One upload of the sealed copy ``fd``: twine, or a copy into a static index folder."""
    if p.index.upload_url.startswith("file://"):
        _add_to_static(fd, wheel.filename, p.index)
        return True, "", None
    return _run_twine(wheel, fd, p)


def upload_one(wheel: LocalWheel, p: PreparedPublish, uploaded: Sequence[str], say: Log) -> Outcome:
    """Upload one staged wheel's sealed copy (:func:`release.publish.guards.seal.sealed_upload`); on any failure read the index back and say exactly what is there."""
    try:
        ok, output, killed_at = seal.sealed_upload(
            wheel.path, wheel.filename, wheel.sha256, lambda fd: _send(wheel, fd, p)
        )
    except CheckFailed as exc:
        raise CheckFailed(f"{exc}\n{done_so_far(uploaded, p)}") from None
    if ok:
        return "uploaded"
    red = p.redactor
    tail = "\n".join(red(output).strip().splitlines()[-15:])
    if killed_at is not None:
        what = ruled(
            "deadline",
            f"uploading {wheel.filename} to {p.where} did not finish within its {killed_at:g} s deadline "
            "(the upload deadline, WHEELWRIGHT_UPLOAD_DEADLINE_S); twine was stopped",
        )
    else:
        what = f"uploading {wheel.filename} to {p.where} failed:\n{tail}"
    so_far = done_so_far(uploaded, p)
    try:
        files = p.remote.files()
    except StepFailed as exc:
        raise StepFailed(
            f"{what}\nthe index could not be read back ({exc}), so whether {wheel.filename} arrived is "
            f"unknown\n{so_far}; rerun the same command: it reads the index first and uploads only "
            "what is missing"
        ) from None
    by_key = {file_key(n): f for n, f in files.items()}
    there = by_key.get(file_key(wheel.filename))
    if there is not None and there.sha256 == wheel.sha256:
        if re.search(r"HTTPError: 4\d\d\b", output):  # the index refused ours: someone else's copy
            say(
                f"  = {wheel.filename} was uploaded by someone else meanwhile (same sha256); not counted as ours"
            )
            return "raced"
        say(f"  ! {what.splitlines()[0]}; but the index holds {wheel.filename} with the audited sha256")
        return "uploaded"
    if there is not None:
        plan = plan_publish([wheel], {n: str(f.sha256) for n, f in files.items()})
        diagnosis = describe_conflict(
            plan.conflicts[0],
            staged=wheel.path,
            remote=there,
            index=p.index,
            local_folder=p.local_folder,
            auth=p.remote.auth,
            timeout=p.remote.timeout,
            redactor=red,
        )
        raise CheckFailed(f"{what}\n{diagnosis}\n{so_far}")
    resume = f"{so_far}; the index does not hold {wheel.filename}: rerun the same command to resume"
    if re.search(r"\b(401|403)\b", output):
        source = p.creds.source if p.creds else "twine's keyring (no credential variable is set)"
        user_var, pass_var = credential_env_names(p.index.variant)
        resume = (
            f"the index refused the upload credentials from {source}; set {user_var}/{pass_var} "
            f"(or TWINE_USERNAME/TWINE_PASSWORD) to an account allowed to upload\n{resume}"
        )
    raise StepFailed(f"{what}\n{resume}")
