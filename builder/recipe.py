"""The stand-in builder image's recipe as values: what the image is made of, and its key.

No processes, no network; only :func:`host_suite` reads a file (``/etc/os-release``).
``scripts/make_builder_image.py`` reads this machine into an :class:`Inputs` and makes the
image from it; the image's tag holds ``Inputs.key``, the hash of everything that decides
the image's contents.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement

from release.core.errors import InputError, ToolError

RECIPE_KEYS = (
    "recipe_version",
    "name",
    "debian_packages",
    "pythons",
    "helper_python",
    "python_pins",
    "tool_pins",
)


class AptSourceLike(Protocol):
    """One `deb` entry of the machine's apt sources (``fetch_cuda12_debian.AptSource``)."""

    @property
    def uri(self) -> str: ...
    @property
    def suite(self) -> str: ...
    @property
    def components(self) -> tuple[str, ...]: ...
    @property
    def signed_by(self) -> str | None: ...
    @property
    def origin(self) -> str: ...


@dataclasses.dataclass(frozen=True)
class Recipe:
    recipe_version: int
    name: str
    debian_packages: tuple[str, ...]
    pythons: tuple[str, ...]
    helper_python: str
    python_pins: tuple[str, ...]
    tool_pins: tuple[str, ...]


def parse_recipe(text: str, source: str) -> Recipe:
    """builder/recipe.toml, validated: exact keys, types, exact pins (``name==version``)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{source}: not valid TOML: {exc}") from None
    for key in data:
        if key not in RECIPE_KEYS:
            close = difflib.get_close_matches(key, RECIPE_KEYS, n=1)
            raise InputError(
                f"{source}: unknown key {key!r}" + (f"; did you mean {close[0]!r}?" if close else "")
            )
    missing = [k for k in RECIPE_KEYS if k not in data]
    if missing:
        raise InputError(f"{source}: missing {', '.join(missing)}")
    if data["recipe_version"] != 1:
        raise InputError(f"{source}: recipe_version must be 1, got {data['recipe_version']!r}")
    for key in ("name", "helper_python"):
        if not isinstance(data[key], str) or not data[key]:
            raise InputError(f"{source}: {key} must be a non-empty string")
    if not re.fullmatch(r"[a-z0-9]+(?:(?:[._-]|__|/)[a-z0-9]+)*", data["name"]):
        raise InputError(f"{source}: name {data['name']!r} is not an image name (lower case, no tag)")
    lists: dict[str, tuple[str, ...]] = {}
    for key in ("debian_packages", "pythons", "python_pins", "tool_pins"):
        value = data[key]
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise InputError(f"{source}: {key} must be a non-empty list of strings")
        lists[key] = tuple(value)
    for key in ("python_pins", "tool_pins"):
        for i, pin in enumerate(lists[key]):
            spec = list(Requirement(pin).specifier) if _valid_requirement(pin) else []
            if len(spec) != 1 or spec[0].operator != "==" or "*" in spec[0].version:
                raise InputError(f"{source}: {key}[{i}]: {pin!r} is not an exact pin (name==version)")
    for v in (*lists["pythons"], data["helper_python"]):
        if not re.fullmatch(r"3\.\d+", v):
            raise InputError(f"{source}: Python {v!r} is not of the form 3.X")
    return Recipe(
        1,
        data["name"],
        lists["debian_packages"],
        lists["pythons"],
        data["helper_python"],
        lists["python_pins"],
        lists["tool_pins"],
    )


def _valid_requirement(text: str) -> bool:
    try:
        Requirement(text)
    except InvalidRequirement:
        return False
    return True


def pins_for(pins: Sequence[str], python_version: str) -> tuple[str, ...]:
    """The pins that apply to a Python (``3.10``), without their markers."""
    env = {"python_version": python_version, "python_full_version": f"{python_version}.0"}
    out = []
    for pin in pins:
        req = Requirement(pin)
        if req.marker is None or req.marker.evaluate(env):
            out.append(f"{req.name}{req.specifier}")
    return tuple(out)


@dataclasses.dataclass(frozen=True)
class PythonSource:
    version: str  # 3.12.1
    sys_version: str  # sys.version: version, build date and compiler
    prefix: Path  # the self-contained install copied into the image; /usr: Debian's, installed by apt
    # Debian's interpreter from another suite than the image's (trixie's 3.13 in a bookworm image):
    # its packages unpacked privately under /opt/_internal/debian-<suite>, with its own loader
    suite: str | None = None

    @property
    def private_root(self) -> str | None:
        """Where a Debian interpreter of another suite lives in the image, with its libraries."""
        return None if self.suite is None else f"/opt/_internal/debian-{self.suite}"

    @property
    def tag(self) -> str:
        xy = "".join(self.version.split(".")[:2])
        return f"cp{xy}-cp{xy}"

    @property
    def internal(self) -> str:
        return f"/opt/_internal/cpython-{self.version}"


@dataclasses.dataclass(frozen=True)
class Inputs:
    """Everything the image is made of; its hash is the image's key."""

    recipe: Recipe
    code_sha256: str  # the code that makes the image: this module and the script
    train: str
    toolchain: tuple[str, ...]
    manylinux: str
    platform: str  # x86_64
    dpkg_arch: str  # amd64
    suite: str
    packages: tuple[str, ...]
    pythons: tuple[PythonSource, ...]
    helper: PythonSource | None  # None: the newest Python stands in at cp39-cp39
    ca_bundle_sha256: str | None  # this machine's CA bundle, copied in (pip trusts what the host trusts)
    mirror: str  # where the packages come from: recorded, not part of the key
    keyring: str | None
    ca_bundle: str | None  # the bundle's path here: recorded, not part of the key

    def key_data(self) -> dict[str, Any]:
        def py(p: PythonSource) -> dict[str, str]:
            return {"version": p.version, "sys_version": p.sys_version}

        return {
            "recipe": dataclasses.asdict(self.recipe),
            "code_sha256": self.code_sha256,
            "train": self.train,
            "toolchain": list(self.toolchain),
            "manylinux": self.manylinux,
            "platform": self.platform,
            "suite": self.suite,
            "packages": list(self.packages),
            "pythons": [py(p) for p in self.pythons],
            "helper": None if self.helper is None else py(self.helper),
            "ca_bundle_sha256": self.ca_bundle_sha256,
        }

    @property
    def key(self) -> str:
        return hashlib.sha256(json.dumps(self.key_data(), sort_keys=True).encode()).hexdigest()

    @property
    def tag_stem(self) -> str:
        """``cuda13.0-<key>``; another CPU's image names it: ``cuda13.0-aarch64-<key>`` (the x86_64
        form is the one every x86_64 stand-in has had)."""
        cpu = "" if self.platform == "x86_64" else f"{self.platform}-"
        return f"cuda{self.train}-{cpu}{self.key[:12]}"

    @property
    def tag(self) -> str:
        return f"{self.recipe.name}:{self.tag_stem}"

    @property
    def full_version(self) -> str:
        nvcc = [p for p in self.toolchain if Requirement(p).name == "nvidia-cuda-nvcc"]
        if len(nvcc) != 1:
            raise InputError(f"train {self.train!r}: pypi_toolchain must pin nvidia-cuda-nvcc exactly once")
        return next(iter(Requirement(nvcc[0]).specifier)).version


def other_recipes(inputs: Inputs, tarball_stems: Sequence[str]) -> tuple[str, ...]:
    """The tags of this train's stand-ins of other recipes for the same CPU, among the cached
    tarballs' stems (``wheelwright-standin-builder-cuda13.0-<key>``), which a new recipe replaces;
    another CPU's stand-in of the train is not another recipe and stays (pure)."""
    base = inputs.recipe.name.rsplit("/", 1)[-1]
    stem = re.escape(inputs.tag_stem[: -len(inputs.key[:12])])
    mine = f"{base}-{inputs.tag_stem}"
    return tuple(
        f"{inputs.recipe.name}:{old[len(base) + 1 :]}"
        for old in sorted(tarball_stems)
        if old != mine and re.fullmatch(rf"{re.escape(base)}-{stem}[0-9a-f]{{12}}", old)
    )


def pick_mirror(sources: Sequence[AptSourceLike], suite: str) -> AptSourceLike:
    """The first apt source serving ``suite`` with ``main``, in apt's reading order."""
    for source in sources:
        if source.suite == suite and "main" in source.components:
            return source
    read = sorted({s.origin for s in sources}) or ["no sources file with a `deb` entry"]
    raise InputError(f"no apt source serves {suite} main on this machine (read: {', '.join(read)})")


def ldd_paths(text: str, where: str) -> tuple[str, ...]:
    """The library paths in ``ldd`` output; a library ldd cannot find is an error."""
    paths = []
    for line in text.splitlines():
        if "=> not found" in line:
            raise ToolError(f"{where}: {line.strip()}: the Python cannot run here, so not in an image either")
        m = re.search(r"=>\s+(/\S+)\s+\(", line)
        if m:
            paths.append(m[1])
    return tuple(paths)


def standin_policy_text(text: str, old_image: str, new_image: str, source: str) -> str:
    """The policy with one builder image replaced; the old name must appear exactly once."""
    quoted = f'"{old_image}"'
    count = text.count(quoted)
    if count != 1:
        raise InputError(
            f"{source}: the builder image {quoted} appears {count} times; the stand-in replaces "
            "exactly one train's image (write each train's image once)"
        )
    return text.replace(quoted, f'"{new_image}"')


def nvcc_problem(version_text: str, train: str, full_version: str) -> str | None:
    """What is wrong with ``nvcc --version`` output for a train (``13.0``, ``13.0.88``), or None."""
    m = re.search(r"release (\d+\.\d+), V(\d+\.\d+\.\d+)", version_text)
    if m is None:
        return f"nvcc --version names no release: {version_text.strip()[-200:]!r}"
    if (m[1], m[2]) != (train, full_version):
        return f"nvcc is CUDA {m[1]} (V{m[2]}), the train needs {train} (V{full_version})"
    return None


def dpkg_owners(text: str) -> dict[str, set[str]]:
    """``dpkg-query -S`` output -> path: the packages owning it (``pkg:arch`` -> ``pkg``)."""
    owners: dict[str, set[str]] = {}
    for line in text.splitlines():
        packages, sep, path = line.partition(": ")
        if sep and path.startswith("/"):
            owners.setdefault(path.strip(), set()).update(
                n.strip().split(":")[0] for n in packages.split(",")
            )
    return owners


def owning_packages(libraries: Sequence[str], owners: dict[str, set[str]]) -> tuple[str, ...]:
    """The packages owning each library, by its path or its merged-/usr twin; none is an error."""
    packages: set[str] = set()
    for lib in sorted(libraries):
        found = owners.get(lib, set()) | owners.get(lib.removeprefix("/usr"), set())
        if not found:
            raise ToolError(f"{lib} (loaded by a copied Python) belongs to no Debian package here")
        packages |= found
    return tuple(sorted(packages))


def host_suite(os_release: Path = Path("/etc/os-release")) -> str:
    fields = dict(
        line.split("=", 1) for line in os_release.read_text(encoding="utf-8").splitlines() if "=" in line
    )
    suite = fields.get("VERSION_CODENAME", "").strip('"')
    if not suite:
        raise InputError(
            f"{os_release} names no VERSION_CODENAME: the stand-in is made from this machine's suite"
        )
    return suite
