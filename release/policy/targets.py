"""Where a release goes: a named target holding one index per variant.

The lead parses these from rows.toml (``[target.<name>]``); publishing only reads
them. A target never holds credentials: those come from the environment or a
keyring at upload time (see :mod:`release.publish`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from release.core.errors import InputError


@dataclass(frozen=True)
class IndexTarget:
    """One per-variant index: where wheels are uploaded and where the index is read."""

    variant: str  # "cu130", "cpu"
    upload_url: str  # a URL, or a twine repository name like "pypi"
    simple_url: str  # the index's simple API root (PEP 503/691), ending in /simple/ or similar
    max_wheel_mib: int | None  # the index's per-file limit; None: no limit checked

    @property
    def is_repository_name(self) -> bool:
        """True when ``upload_url`` names a twine repository (``pypi``) instead of a URL."""
        return "://" not in self.upload_url


@dataclass(frozen=True)
class Target:
    """A named destination: ``rehearsal`` targets may receive a partial release."""

    name: str
    rehearsal: bool
    indexes: Mapping[str, IndexTarget]  # variant -> IndexTarget

    def index_for(self, variant: str) -> IndexTarget:
        """The index for ``variant``; an InputError naming the target's variants otherwise."""
        try:
            return self.indexes[variant]
        except KeyError:
            known = sorted(self.indexes)
            close = difflib.get_close_matches(variant, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise InputError(
                f"target {self.name!r} has no index for variant {variant!r} "
                f"(it has: {', '.join(known) or 'none'}){hint}"
            ) from None
