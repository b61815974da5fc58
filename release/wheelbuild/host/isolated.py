"""Isolated build environments for host builds: the project's own ``[build-system]``, pinned.

A host build runs the project's build backend in an environment made only from what the
project asks for, as ``python -m build`` does: its ``[build-system].requires`` (PEP 517's
default ``setuptools>=40.8.0`` without one), the ``build`` frontend that drives the backend,
and whatever the backend asks for through ``get_requires_for_build_wheel`` (scikit-build-core
asks for ``cmake``/``ninja`` where the machine has none recent enough). Every install is
constrained by :data:`BASE_CONSTRAINTS` (wheelwright's pins) and any constraints files of
the project or row, merged so that a later file that names a package replaces the earlier
lines for it (:func:`merge_constraints`).

Unlike ``python -m build`` the environment is kept and reused: it is named by a hash of the
interpreter, the requirements and the merged constraints (:func:`env_key`), made once under
a lock at its final path (console scripts such as ``cmake`` or ``meson`` keep working: a
venv cannot be moved), and marked complete last. A build of torch's ``cpp_extension`` needs
``torch`` in its build environment (several GB with its CUDA packages): made once, not once
per build.

Pure: :func:`read_build_system`'s validation, :func:`merge_constraints`, :func:`env_key`,
:func:`unresolvable_message`. Effects: :func:`ensure_build_env` (venv, pip, a lock).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.resources
import json
import os
import re
import shutil
import sys
import tomllib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from release.core import proc
from release.core.errors import InputError, StepFailed
from release.core.locks import exclusive
from release.core.log import detail, say
from release.core.machine import PythonInfo
from release.core.pip import NO_PIP_CONFIG

MARKER = "wheelwright-build-env.json"
MARKER_VERSION = 1
VENV_TIMEOUT_S = 300.0
PIP_TIMEOUT_S = 1800.0  # torch and its CUDA packages are several GB
# PEP 517: a project without [build-system] builds with setuptools' legacy backend.
DEFAULT_REQUIRES: tuple[str, ...] = ("setuptools>=40.8.0",)
DEFAULT_BACKEND = "setuptools.build_meta:__legacy__"
# What the environment needs besides the project's requirements: the frontend
# (release/wheelbuild/host/frontend.py runs build's ProjectBuilder). Versions come from the constraints.
FRONTEND_REQUIRES: tuple[str, ...] = (
    "build",
    "pyproject_hooks",
    "packaging",
    'tomli; python_version < "3.11"',
)
BASE_CONSTRAINTS_NAME = "build-constraints.txt"
_OPTION_LINE = re.compile(r"^\s*-")


def base_constraints() -> Path:
    """wheelwright's own constraints file (``release/resources/build-constraints.txt``)."""
    return Path(str(importlib.resources.files("release.resources").joinpath(BASE_CONSTRAINTS_NAME)))


# --------------------------------------------------------------------------- the project's build system


@dataclasses.dataclass(frozen=True)
class BuildSystem:
    """The project's ``[build-system]``: what its backend needs and which backend it is."""

    source: str  # "examples/x/pyproject.toml [build-system]" (or why the default applies)
    requires: tuple[str, ...]
    backend: str

    @property
    def backend_name(self) -> str:
        """``scikit_build_core.build`` -> ``scikit_build_core``; ``mesonpy`` -> ``mesonpy``."""
        return self.backend.split(":")[0].split(".")[0]


def parse_build_system(text: str, where: str) -> BuildSystem:
    """The ``[build-system]`` of a ``pyproject.toml``'s text (pure); InputError naming the key."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML: {exc}") from None
    system = data.get("build-system")
    if system is None:
        return BuildSystem(
            f"{where} (no [build-system]: PEP 517's default)", DEFAULT_REQUIRES, DEFAULT_BACKEND
        )
    if not isinstance(system, dict):
        raise InputError(f"{where}: [build-system] must be a table")
    requires = system.get("requires")
    if not isinstance(requires, list) or not all(isinstance(r, str) for r in requires):
        raise InputError(f"{where}: [build-system].requires must be a list of strings")
    for index, text_ in enumerate(requires):
        try:
            Requirement(text_)
        except InvalidRequirement as exc:
            raise InputError(
                f"{where}: [build-system].requires[{index}] {text_!r} is not a PEP 508 requirement: {exc}"
            ) from None
    backend = system.get("build-backend", DEFAULT_BACKEND)
    if not isinstance(backend, str) or not backend:
        raise InputError(f"{where}: [build-system].build-backend must be a non-empty string")
    return BuildSystem(f"{where} [build-system]", tuple(requires), backend)


def read_build_system(project_dir: Path) -> BuildSystem:
    pyproject = project_dir / "pyproject.toml"
    if not pyproject.is_file():
        return BuildSystem(
            f"{project_dir} (no pyproject.toml: PEP 517's default)", DEFAULT_REQUIRES, DEFAULT_BACKEND
        )
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{pyproject}: cannot read it: {exc}") from None
    return parse_build_system(text, str(pyproject))


# --------------------------------------------------------------------------- constraints


@dataclasses.dataclass(frozen=True)
class Constraint:
    text: str  # the line as written, without its comment
    name: str  # canonical
    source: str  # "file:line"


@dataclasses.dataclass(frozen=True)
class Constraints:
    """The merged constraints of one build: wheelwright's, then the project's or row's files."""

    files: tuple[Path, ...]
    lines: tuple[Constraint, ...]  # sorted by name, then text

    def text(self) -> str:
        header = "# merged by wheelwright from: " + ", ".join(str(f) for f in self.files)
        return "\n".join([header, *(c.text for c in self.lines)]) + "\n"

    def for_name(self, name: str) -> tuple[Constraint, ...]:
        key = canonicalize_name(name)
        return tuple(c for c in self.lines if c.name == key)


def parse_constraints(text: str, source: str) -> tuple[Constraint, ...]:
    """One requirement per line; ``#`` comments and blank lines skipped (pure).

    pip options (``-r``, ``-c``, ``--index-url``) are refused: a constraints file of a
    release only pins versions. InputError names the file and line.
    """
    out: list[Constraint] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].strip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        where = f"{source}:{number}"
        if _OPTION_LINE.match(line):
            raise InputError(
                f"{where}: {line!r}: only requirements go in a build constraints file, no pip options"
            )
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise InputError(f"{where}: {line!r} is not a PEP 508 requirement: {exc}") from None
        if req.url:
            raise InputError(f"{where}: {line!r}: a URL is not a version pin; write name==version")
        out.append(Constraint(str(req), canonicalize_name(req.name), where))
    return tuple(out)


def merge_constraints(layers: Sequence[tuple[Constraint, ...]]) -> tuple[Constraint, ...]:
    """Merge constraint layers, earliest first: a layer that names a package replaces every
    earlier line for that package (pure). Sorted by name, then text."""
    merged: dict[str, list[Constraint]] = {}
    for layer in layers:
        named = {c.name for c in layer}
        for name in named:
            merged[name] = []
        for c in layer:
            merged[c.name].append(c)
    return tuple(sorted((c for cs in merged.values() for c in cs), key=lambda c: (c.name, c.text)))


def read_constraints(files: Sequence[Path]) -> Constraints:
    """Read and merge constraints files, wheelwright's first (:func:`base_constraints`)."""
    layers: list[tuple[Constraint, ...]] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"{path}: cannot read this build constraints file: {exc}") from None
        layers.append(parse_constraints(text, str(path)))
    return Constraints(tuple(files), merge_constraints(layers))


# --------------------------------------------------------------------------- the environment (pure parts)


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """One isolated build environment: made from ``requires`` under ``constraints`` for ``python``."""

    python: PythonInfo
    requires: tuple[str, ...]  # the project's, then what its backend asked for
    constraints: Constraints
    folder: Path

    @property
    def bin_dir(self) -> Path:
        return self.folder / "bin"

    @property
    def interpreter(self) -> Path:
        return self.bin_dir / "python"

    def describe(self) -> str:
        return f"{', '.join(self.requires)} (+ build) for {self.python.describe()}"


def env_key(python: PythonInfo, requires: Sequence[str], constraints: Constraints) -> str:
    """What names an environment: interpreter, requirements (order-free), merged pins (pure)."""
    data = {
        "version": MARKER_VERSION,
        "python": [str(python.path), python.version],
        "requires": sorted(set(requires)),
        "frontend": list(FRONTEND_REQUIRES),
        "constraints": [c.text for c in constraints.lines],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def env_spec(
    python: PythonInfo, requires: Sequence[str], constraints: Constraints, cache_dir: Path
) -> EnvSpec:
    key = env_key(python, requires, constraints)
    tag = f"cp{''.join(python.version.split('.')[:2])}-{python.version}"
    folder = cache_dir / "build-envs" / f"{tag}-{key[:16]}"
    return EnvSpec(python, tuple(dict.fromkeys(requires)), constraints, folder)


def unpinned(installed: Mapping[str, str], constraints: Constraints) -> tuple[str, ...]:
    """``name==version`` of what was installed that no constraint pins exactly (pure)."""
    pinned = {c.name for c in constraints.lines if "==" in c.text}
    return tuple(f"{n}=={v}" for n, v in sorted(installed.items()) if canonicalize_name(n) not in pinned)


def unresolvable_message(spec: EnvSpec, system: BuildSystem, pip_output: str) -> str:
    """Say which requirement could not be installed, where it comes from, and what pins it (pure)."""
    errors = [ln.strip() for ln in pip_output.splitlines() if ln.strip().startswith("ERROR")]
    named: list[str] = []
    for text in spec.requires:
        name = canonicalize_name(Requirement(text).name)
        pattern = "[-_.]".join(re.escape(part) for part in name.split("-"))
        mentioned = any(re.search(rf"(?i)\b{pattern}\b", e) for e in errors)
        if not mentioned:
            continue
        origin = (
            system.source if text in system.requires else "the build backend (get_requires_for_build_wheel)"
        )
        pins = spec.constraints.for_name(name)
        pin_text = "; ".join(f"{c.text} ({c.source})" for c in pins) or "no constraint"
        named.append(f"  - {text!r} from {origin}; constrained by: {pin_text}")
    lines = [f"the isolated build environment for {spec.python.describe()} cannot be installed:"]
    lines += named or [f"  - requirements: {', '.join(spec.requires)} ({system.source})"]
    lines.append("  constraints files: " + ", ".join(str(f) for f in spec.constraints.files))
    lines += [f"  pip: {e}" for e in errors[-6:]] or ["  pip printed no ERROR line (see above)"]
    lines.append(
        "to fix: change the requirement in the project's [build-system].requires, or the pin in a "
        "constraints file of the project or row (a later file's pin replaces wheelwright's)"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- effects


def read_marker(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("version") == MARKER_VERSION else None


def env_ready(spec: EnvSpec) -> bool:
    marker = read_marker(spec.folder)
    return bool(
        marker is not None
        and marker.get("key") == env_key(spec.python, spec.requires, spec.constraints)
        and spec.interpreter.exists()
    )


def _pip_list(spec: EnvSpec, env: Mapping[str, str]) -> dict[str, str]:
    result = proc.run(
        [sys.executable, "-m", "pip", "--python", spec.interpreter, "list", "--format=json"],
        env=env,
        timeout=VENV_TIMEOUT_S,
        step=f"listing what {spec.folder} holds",
    )
    return {str(p["name"]): str(p["version"]) for p in json.loads(result.stdout or "[]")}


def ensure_build_env(spec: EnvSpec, system: BuildSystem, *, env: Mapping[str, str], row_id: str) -> EnvSpec:
    """Make ``spec``'s environment unless a complete one is there; under a lock, at its final path."""
    if env_ready(spec):
        return spec
    what = f"making {spec.folder}"
    with exclusive(
        spec.folder.with_name(spec.folder.name + ".lock"),  # <folder>.lock, as every release took it
        holder=f"row {row_id}: {what}",
        waiting=lambda _held: say(row_id, f"waiting for another wheelwright process to finish {what}"),
    ):
        if env_ready(spec):
            return spec
        say(row_id, f"making the isolated build environment {spec.folder}: {', '.join(spec.requires)}")
        shutil.rmtree(spec.folder, ignore_errors=True)
        pip_env = {**env, **NO_PIP_CONFIG}
        try:
            proc.run(
                [spec.python.path, "-m", "venv", "--without-pip", spec.folder],
                env=pip_env,
                timeout=VENV_TIMEOUT_S,
                step=f"row {row_id}: creating {spec.folder}",
            )
            constraints_file = spec.folder / "wheelwright-constraints.txt"
            constraints_file.write_text(spec.constraints.text(), encoding="utf-8")
            result = proc.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "--python",
                    spec.interpreter,
                    "install",
                    "--isolated",
                    "--no-input",
                    "--disable-pip-version-check",
                    "--constraint",
                    constraints_file,
                    *FRONTEND_REQUIRES,
                    *spec.requires,
                ],
                env=pip_env,
                check=False,
                timeout=PIP_TIMEOUT_S,
                step=f"row {row_id}: installing {', '.join(spec.requires)} into {spec.folder}",
            )
            if result.returncode != 0:
                message = unresolvable_message(spec, system, result.stderr + result.stdout)
                named = "constrained by" in message
                raise (InputError if named else StepFailed)(f"row {row_id}: {message}")
            installed = _pip_list(spec, pip_env)
            loose = unpinned(installed, spec.constraints)
            if loose:
                detail(
                    f"[{row_id}] not pinned by any constraint (newest at install time): {', '.join(loose)}"
                )
            marker = {
                "version": MARKER_VERSION,
                "key": env_key(spec.python, spec.requires, spec.constraints),
                "python": spec.python.describe(),
                "requires": list(spec.requires),
                "constraints_files": [str(f) for f in spec.constraints.files],
                "installed": dict(sorted(installed.items())),
                "unpinned": list(loose),
            }
            tmp = spec.folder / f".{MARKER}.{os.getpid()}.tmp"
            tmp.write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            tmp.replace(spec.folder / MARKER)  # written last: only a complete environment is reused
        except BaseException:
            shutil.rmtree(spec.folder, ignore_errors=True)
            raise
    return spec
