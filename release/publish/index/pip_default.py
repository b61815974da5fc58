"""pip's default index URL, as pip's own command line documents it, so that no registry host name
is written in rows.toml or in wheelwright (:func:`release.publish.index.client.resolve_simple_url`
turns the index name ``pypi`` into it)."""

from __future__ import annotations

import functools
import os
import re
import sys

from release.core import proc
from release.core.errors import StepFailed, ToolError
from release.core.pip import NO_PIP_CONFIG

_PIP_DEFAULT_RE = re.compile(r"--index-url\b[^\n]*?\(default ([a-z][a-z0-9+.-]*://[^\s)]+)\)")


@functools.cache
def pip_default_index() -> str:
    """pip's default index URL, as pip's own command line documents it (``pip install --help``:
    ``--index-url ... (default <url>)``), with every pip configuration ignored (``--isolated``,
    no ``PIP_*`` variable), so a machine's configured mirror is never taken for the default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update({**NO_PIP_CONFIG, "COLUMNS": "1000"})  # one line per option in the help
    try:
        result = proc.run(
            [sys.executable, "-m", "pip", "--isolated", "install", "--help"], env=env, check=True, timeout=60
        )
    except (StepFailed, ToolError) as exc:
        raise ToolError(
            f"cannot ask pip for its default index ({exc}); install pip, or write the index URL instead of 'pypi'"
        ) from None
    found = _PIP_DEFAULT_RE.search(result.stdout)
    if found is None:
        raise ToolError(
            "pip's `install --help` no longer shows the default of --index-url; write the index URL "
            "instead of 'pypi'"
        )
    return found[1].rstrip("/") + "/"
