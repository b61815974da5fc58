"""What every build of a row uses, whichever backend builds it: decided before anything runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from release.policy.matrix import Row
from release.wheelbuild.repair.contract import RowContract


@dataclasses.dataclass(frozen=True)
class RowJob:
    """The row, its environment, the project and the caches; a backend's job adds its own."""

    row: Row
    base: Mapping[str, str]  # the environment the build starts from
    project_name: str
    project_dir: Path
    cache_dir: Path
    kernel_cache: Path
    contract: RowContract

    def row_job(self) -> dict[str, Any]:
        """This job's :class:`RowJob` fields, to make a backend's job from (``HostJob(**...)``)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(RowJob)}
