"""Writing a text file atomically: a reader sees the old file or the new one, never part of one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from release.core.errors import StepFailed


def write_atomic(
    target: Path, text: str, *, what: str, mode: int | None = None, parents: bool = False
) -> Path:
    """Write ``text`` into a temporary file beside ``target`` and rename it over ``target``.

    ``mode``: the file's permissions (else the temporary file's 0o600); ``parents``: make the
    folder first. StepFailed (exit 4) "cannot write <what> <target>" when the folder is not
    writable, and no temporary file is left behind.
    """
    tmp: str | None = None
    try:
        if parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        if mode is not None:
            Path(tmp).chmod(mode)
        Path(tmp).replace(target)
    except OSError as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        raise StepFailed(f"cannot write {what} {target}: {exc.strerror or exc}") from None
    return target
