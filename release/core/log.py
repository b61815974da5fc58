"""log: split out of its former module."""

from __future__ import annotations

import sys


def say(row_id: str, message: str) -> None:
    """Progress a person can follow: ``==> [cu130-py312-x86_64] compiling...`` on stderr."""
    print(f"==> [{row_id}] {message}", file=sys.stderr, flush=True)
