"""What the container tests share: podman (or docker) configured as the stand-in images need
(builder/containers.conf through CONTAINERS_CONF), the engine that works here, and a module-level
skip that says why where none works."""

from __future__ import annotations

import os
from pathlib import Path

import make_builder_image as mbi
import pytest

from release.core.machine import default_cache_dir
from release.wheelbuild.engine import detect_engine

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "rows.toml"
PROJECT = ROOT / "examples" / "tinyaxpy"
CACHE = default_cache_dir(os.environ)
ENV = {k: v for k, v in mbi.engine_env(os.environ).items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}
PROBE = detect_engine(ENV)


def skip_without_engine(still_runs: str) -> None:
    """Skip the calling test module where no container engine works, naming why and ``still_runs``
    (what covers the same row without a container)."""
    if PROBE.engine is None:
        pytest.skip(
            f"the container backend cannot run: no container engine works here ({PROBE.explain()}); "
            f"{still_runs}",
            allow_module_level=True,
        )
