"""Which backend builds a row: the container engine, the row's builder image, and the choice.

``--backend auto`` builds in the container only when it can without fetching anything:
an engine answers ``info`` AND the row's builder image is already present locally for
the row's platform (``<engine> image inspect``). Otherwise it builds on the host and says
which backend and why in one line, once per run. It never pulls: cibuildwheel would pull
a missing image (several GB for a CUDA builder) and a machine that cannot reach the
registry would fail a build the host could do. ``--backend container`` asks for the
container: it needs a working engine and lets cibuildwheel pull the image.

:func:`choose_backend` is the pure decision; :func:`detect_engine` and
:func:`probe_image` run the engine, each at most once per process for the same
environment (a 12-row rehearsal asks the engine once, not 12 times).
"""

from __future__ import annotations

import configparser
import dataclasses
import importlib.resources
import shutil
import tomllib
from collections.abc import Mapping
from pathlib import Path

from release.core import log, proc
from release.core.errors import StepFailed, ToolError
from release.policy.matrix import CPU_IMAGE, Row
from release.resources.cpus import arch as cpu_arch
from release.wheelbuild.backends import Backend
from release.wheelbuild.backends import BackendChoice as BackendChoice  # verify and publish import it here

ENGINES: tuple[str, ...] = ("docker", "podman")
PROBE_TIMEOUT_S = 60.0


# --------------------------------------------------------------------------- facts


@dataclasses.dataclass(frozen=True)
class EngineProbe:
    engine: str | None  # "docker" | "podman" | None
    reasons: tuple[str, ...]  # why each other engine does not work

    def explain(self) -> str:
        return "; ".join(self.reasons) or "no engine was tried"


@dataclasses.dataclass(frozen=True)
class ImageProbe:
    """Whether the engine holds ``image`` for ``platform`` locally (``detail``: why not, beyond absence)."""

    image: str
    platform: str  # linux/amd64
    present: bool
    detail: str


@dataclasses.dataclass(frozen=True)
class Unnamed:
    """The row's builder image cannot be named here; ``why`` says so in a clause."""

    why: str


@dataclasses.dataclass(frozen=True)
class BackendDecision:
    backend: Backend
    engine: str | None
    reason: str  # one line: which backend and why; "" when the user chose it


def no_engine_message(probe: EngineProbe) -> str:
    return f"no container engine works here ({probe.explain()}); use --backend host"


# --------------------------------------------------------------------------- the decision (pure)


def choose_backend(
    requested: BackendChoice,
    probe: EngineProbe | None,
    image: ImageProbe | Unnamed | None,
) -> BackendDecision:
    """The backend of one row.

    ``probe`` is the engine probe (None when ``requested`` is ``host``); ``image`` is the
    probe of the row's builder image, or why it cannot be named, or None when it was not
    looked at. Raises ToolError when the container was asked for and no
    engine works.
    """
    if requested == "host":
        return BackendDecision("host", None, "")
    if probe is None:
        raise ValueError(f"--backend {requested} needs the engine probe")
    if requested == "container":
        if probe.engine is None:
            raise ToolError(no_engine_message(probe))
        return BackendDecision("container", probe.engine, "")
    if probe.engine is None:
        return BackendDecision(
            "host", None, f"no container engine works here ({probe.explain()}); building on the host"
        )
    engine = probe.engine
    if not isinstance(image, ImageProbe):
        why = "the row's builder image was not looked at" if image is None else image.why
        return BackendDecision(
            "host",
            None,
            f"{engine} works but {why}; building on the host (--backend container builds in {engine})",
        )
    if not image.present:
        why = f" ({image.detail})" if image.detail else ""
        return BackendDecision(
            "host",
            None,
            f"{engine} has no local {image.platform} copy of {image.image}{why}; building on the host "
            "(auto never pulls; --backend container does)",
        )
    return BackendDecision(
        "container",
        engine,
        f"{engine} holds {image.image} ({image.platform}) locally; building in the container",
    )


# --------------------------------------------------------------------------- the row's image


def _cibuildwheel_default_image(platform: str) -> str | Unnamed:
    """cibuildwheel's pinned default manylinux image for ``platform``, from the data it ships."""
    try:
        resources = importlib.resources.files("cibuildwheel") / "resources"
        defaults = tomllib.loads((resources / "defaults.toml").read_text(encoding="utf-8"))
        policy = defaults["tool"]["cibuildwheel"][f"manylinux-{platform}-image"]
        pins = configparser.ConfigParser(inline_comment_prefixes=("#",))
        pins.read_string((resources / "pinned_docker_images.cfg").read_text(encoding="utf-8"))
        return pins[platform][policy].strip()
    except (ModuleNotFoundError, OSError, KeyError, TypeError, ValueError, configparser.Error) as exc:
        return Unnamed(
            f"cibuildwheel's default {platform} image cannot be named ({type(exc).__name__}: {exc})"
        )


def _sets_an_image(table: object) -> bool:
    if isinstance(table, dict):
        return any(str(k).endswith("-image") or _sets_an_image(v) for k, v in table.items())
    if isinstance(table, list):
        return any(_sets_an_image(v) for v in table)
    return False


def builder_image(row: Row, project_dir: Path) -> str | Unnamed:
    """The image the container build of ``row`` runs in, or why it cannot be named.

    A CUDA row names its image in the policy. A CPU row uses cibuildwheel's pinned default
    unless the project's own ``[tool.cibuildwheel]`` chooses an image (then it is not known
    here and ``auto`` builds on the host).
    """
    if row.builder_image != CPU_IMAGE:
        return row.builder_image
    pyproject = project_dir / "pyproject.toml"
    try:
        data = tomllib.loads(pyproject.read_text(encoding="utf-8")) if pyproject.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        data = {}
    if _sets_an_image(data.get("tool", {}).get("cibuildwheel", {})):
        return Unnamed(f"{pyproject} [tool.cibuildwheel] chooses the CPU row's image")
    return _cibuildwheel_default_image(row.platform)


# --------------------------------------------------------------------------- effects (cached)


def _env_key(env: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    return frozenset(env.items())


_ENGINES: dict[frozenset[tuple[str, str]], EngineProbe] = {}
_IMAGES: dict[tuple[frozenset[tuple[str, str]], str, str, str], ImageProbe] = {}


def _first_error_line(result: proc.Result) -> str:
    lines = [ln.strip() for ln in (result.stderr + result.stdout).splitlines() if ln.strip()]
    return next((ln for ln in lines if "rror" in ln or "annot" in ln), lines[-1] if lines else "")


def detect_engine(env: Mapping[str, str]) -> EngineProbe:
    """The first of docker, podman whose ``info`` works (a CLI without an engine does not).

    Asked once per process for the same environment.
    """
    key = _env_key(env)
    if key in _ENGINES:
        return _ENGINES[key]
    reasons: list[str] = []
    found: str | None = None
    for engine in ENGINES:
        if shutil.which(engine, path=env.get("PATH", "")) is None:
            reasons.append(f"{engine}: not installed")
            continue
        try:
            result = proc.run(
                [engine, "info"], env=env, check=False, timeout=PROBE_TIMEOUT_S, step=f"{engine} info"
            )
        except ToolError as exc:
            reasons.append(f"{engine} info: {exc}")
            continue
        except StepFailed as exc:  # timed out; the message names the step
            reasons.append(str(exc))
            continue
        if result.returncode == 0:
            found = engine
            break
        reasons.append(f"{engine} info: exit {result.returncode}: {_first_error_line(result)}".rstrip(": "))
    _ENGINES[key] = EngineProbe(found, tuple(reasons))
    return _ENGINES[key]


def probe_image(engine: str, image: str, platform: str, env: Mapping[str, str]) -> ImageProbe:
    """Whether ``engine`` holds ``image`` for ``platform`` locally: ``image inspect``, no network."""
    # cibuildwheel pulls unless the local image is of the row's platform (its --pull=never test)
    cpu = cpu_arch(platform)
    oci = cpu.oci if cpu is not None else f"linux/{platform}"
    key = (_env_key(env), engine, image, oci)
    if key in _IMAGES:
        return _IMAGES[key]
    try:
        result = proc.run(
            [engine, "image", "inspect", image, "--format", "{{.Os}}/{{.Architecture}}"],
            env=env,
            check=False,
            timeout=PROBE_TIMEOUT_S,
            step=f"asking {engine} for the local image {image}",
        )
    except (ToolError, StepFailed) as exc:
        found = ImageProbe(image, oci, False, str(exc))
    else:
        got = result.stdout.strip().splitlines()
        if result.returncode != 0:
            error = _first_error_line(result)
            missing = any(s in error.lower() for s in ("no such image", "image not known", "not found"))
            found = ImageProbe(
                image, oci, False, "" if missing else f"image inspect: exit {result.returncode}: {error}"
            )
        elif got and got[0].strip() == oci:
            found = ImageProbe(image, oci, True, "")
        else:
            found = ImageProbe(
                image, oci, False, f"the local copy is {got[0].strip() if got else 'of no platform'}"
            )
    _IMAGES[key] = found
    return found


def decide_backend(
    requested: BackendChoice, row: Row, *, project_dir: Path, env: Mapping[str, str]
) -> BackendDecision:
    """Probe what ``requested`` needs (engine, then image) and choose; say ``auto``'s choice once."""
    if requested == "host":
        return choose_backend("host", None, None)
    probe = detect_engine(env)
    image: ImageProbe | Unnamed | None = None
    if requested == "auto" and probe.engine is not None:
        named = builder_image(row, project_dir)
        image = named if isinstance(named, Unnamed) else probe_image(probe.engine, named, row.platform, env)
    decision = choose_backend(requested, probe, image)
    if decision.reason:
        say_once(env, decision.reason)
    return decision


def say_once(env: Mapping[str, str], line: str) -> None:
    """Say ``line`` the first time this process meets it for the same environment."""
    log.once(f"==> {line}", key=f"backend\0{hash(_env_key(env))}\0{line}")
