"""engine: split out of its former module."""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Mapping

from release.core import proc
from release.core.errors import StepFailed, ToolError

# --------------------------------------------------------------------------- container engine


@dataclasses.dataclass(frozen=True)
class EngineProbe:
    engine: str | None  # "docker" | "podman" | None
    reasons: tuple[str, ...]  # why each other engine does not work

    def explain(self) -> str:
        return "; ".join(self.reasons) or "no engine was tried"


def detect_engine(env: Mapping[str, str]) -> EngineProbe:
    """The first of docker, podman whose ``info`` works (a CLI without an engine does not)."""
    reasons: list[str] = []
    for engine in ("docker", "podman"):
        if shutil.which(engine, path=env.get("PATH", "")) is None:
            reasons.append(f"{engine}: not installed")
            continue
        try:
            result = proc.run([engine, "info"], env=env, check=False, timeout=60)
        except (ToolError, StepFailed) as exc:
            reasons.append(f"{engine} info: {exc}")
            continue
        if result.returncode == 0:
            return EngineProbe(engine, tuple(reasons))
        lines = [ln.strip() for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
        detail = next((ln for ln in lines if "rror" in ln or "annot" in ln), lines[-1] if lines else "")
        reasons.append(f"{engine} info: exit {result.returncode}: {detail}".rstrip(": "))
    return EngineProbe(None, tuple(reasons))


def no_engine_message(probe: EngineProbe) -> str:
    return f"no container engine works here ({probe.explain()}); use --backend host"
