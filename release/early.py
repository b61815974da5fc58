"""What a wheelwright process starts before it imports its commands (about 0.1 s of Python on one
core, the other one idle meanwhile).

``audit W.whl ...``: the first wheel's sha256 (:func:`release.core.hashing.hash_early`), so that
its audit need not hash the wheel beside the extraction. Only a hint: the audit takes the digest
for that same file, unchanged, and hashes the file itself otherwise. Imports only the standard
library and :mod:`release.core.hashing`: ``python -m release`` calls it first thing, and
:func:`release.cli.main` again (the console script; a second call starts nothing new).
"""

from __future__ import annotations

from collections.abc import Sequence

from release.core import hashing

__all__ = ["start"]


def start(argv: Sequence[str]) -> None:
    words = [a for a in argv if not a.startswith("-")]
    if words[:1] == ["audit"]:
        hashing.hash_early([a for a in words[1:] if a.endswith(".whl")][:1])
