"""What the build and the audit both ask of a CUDA toolchain: ``nvcc --dryrun``'s plan, and the
manifest of a PyPI toolchain installed into the wheelwright cache.

``nvcc --dryrun -E -x cu`` on an empty file prints the commands nvcc would run, with its real home
(``_HERE_``, so a wrapper script on PATH is seen through) and its include folders (``INCLUDES``,
``SYSTEM_INCLUDES``). :mod:`release.wheelbuild.toolchain` reads the home; the audit's C++ consumer
(:mod:`release.audit.cpp.cuda_headers`) reads the include folders. A PyPI toolchain's folder holds
:data:`MANIFEST` (its pins, full version and ``cuda_home``), written by the build when it installs it.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from release.core import proc
from release.core.errors import StepFailed, ToolError

__all__ = ["MANIFEST", "USER_FLAGS", "dryrun", "read_manifest"]

MANIFEST = "wheelwright-toolchain.json"
MANIFEST_CAP = 64 * 1024  # bytes read of a manifest: wheelwright writes a few hundred


# the shell's own nvcc flags: a build replaces them (release.wheelbuild.environment); a probe of where
# nvcc lives must not stop at one nvcc cannot take with -E (it then named the wrong toolkit home)
USER_FLAGS = ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS")


def dryrun(nvcc: str | Path, env: Mapping[str, str]) -> str:
    """``nvcc --dryrun -E -x cu`` on an empty file: its output (stdout and stderr), "" when it cannot run.
    ``env`` less :data:`USER_FLAGS`: nvcc's home and include folders do not depend on them."""
    probe_env = {k: v for k, v in env.items() if k not in USER_FLAGS}
    with tempfile.TemporaryDirectory(prefix="wheelwright-nvcc-") as tmp:
        (Path(tmp) / "probe.cu").write_text("", encoding="utf-8")
        with contextlib.suppress(ToolError, StepFailed):
            ran = proc.run(
                [nvcc, "--dryrun", "-E", "-x", "cu", "probe.cu"],
                env=probe_env,
                check=False,
                timeout=60,
                cwd=tmp,
            )
            return ran.stdout + ran.stderr
    return ""


def read_manifest(folder: Path) -> dict[str, Any] | None:
    """A PyPI toolchain folder's manifest, or None when it is missing, too big or not a JSON object."""
    try:
        with (folder / MANIFEST).open("rb") as f:
            raw = f.read(MANIFEST_CAP + 1)
        data = json.loads(raw) if len(raw) <= MANIFEST_CAP else None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
