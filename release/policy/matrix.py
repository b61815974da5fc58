"""Expand a policy into rows, and select rows. Pure functions: no environment, no globals.

A row is one wheel: (variant, Python, platform). Everything later steps need is
on the row or on the loaded :class:`~release.policy.model.Policy` (with the file's
sha256), so build, audit, smoke and publish never go back to the policy file.
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from release.core.errors import InputError, SelectionError
from release.policy.archs import Arch, cmake_cuda_architectures, torch_cuda_arch_list
from release.policy.model import CudaPackage, Policy, Train, WheelTags
from release.policy.versions import python_tag_matches, version_key
from release.resources import cuda

CPU_IMAGE = "default"  # cibuildwheel's own pinned manylinux image


@dataclass(frozen=True)
class Row:
    id: str  # "cu130-py312-x86_64"
    variant: str  # "cpu" | "cu130"
    train: str | None  # "13.0"; None for CPU
    python: str  # "3.12"
    platform: str  # "x86_64"
    gpu_archs: tuple[Arch, ...]
    cuda_packages: tuple[CudaPackage, ...]
    builder_image: str
    pypi_toolchain: tuple[str, ...]
    host_toolchain_hint: str
    manylinux: str  # "manylinux_2_28"
    extra_variants: str
    # how the project tags its wheels (project.wheel_tags): "cpython" cp312-cp312, "abi3"
    # cp3X-abi3 for X up to the row's Python, "py3-none" py3-none; the platform is the row's
    wheel_tags: WheelTags = "cpython"
    # sonames the row's [[dependency]] packages provide at run time ([[dependency]].libraries)
    provided_libraries: tuple[str, ...] = ()
    # a CUDA row's dependency-channel packages ([[dependency]]: torch), which bring its CUDA runtime
    channels: tuple[str, ...] = ()
    # the Pythons the one wheel of an abi3/py3-none row serves: built once with ``python`` (the
    # oldest), smoke-tested on each (cibuildwheel's way); empty for a cpython row (its ``python``)
    serves_pythons: tuple[str, ...] = ()
    # matrix.embedded_device_code; the train's oldest_driver ("13.0", "580.65.06"; None: not stated)
    embedded_device_code: str = "reject"
    oldest_driver: str | None = None
    # where gpu_archs came from when not from rows.toml: a [[dependency]] with gpu_coverage = "take"
    # ("torch 2.14.1 (torch-2.14.1-...whl sha256 ...)", release.coverage.take); None: the train's list
    gpu_archs_source: str | None = None

    @property
    def pythons(self) -> tuple[str, ...]:
        """The Pythons the smoke step tests this row's wheel with: every Python it serves, oldest
        first (:func:`build_pythons` orders them)."""
        return self.serves_pythons or (self.python,)

    @property
    def aliases(self) -> tuple[str, ...]:
        """Other ids that select this row: ``cu130-py312-x86_64`` for each Python an
        abi3/py3-none row's one wheel serves (``build cu130-py312`` builds that wheel)."""
        return tuple(
            i
            for i in (f"{self.variant}-py{py.replace('.', '')}-{self.platform}" for py in self.pythons)
            if i != self.id
        )

    @property
    def is_cuda(self) -> bool:
        return self.train is not None

    @property
    def python_tag(self) -> str:
        return "cp" + self.python.replace(".", "")

    def serves(self, interpreter: str, abi: str) -> bool:
        """Whether a wheel tag's interpreter and ABI are this row's Python in the project's form."""
        return python_tag_matches(self.wheel_tags, self.python, interpreter, abi)

    @property
    def wheel_tag_form(self) -> str:
        """How this row's wheel names its Python, as project.wheel_tags says (for messages)."""
        minor = self.python.split(".")[1]
        return {
            "cpython": f"{self.python_tag}-{self.python_tag}",
            "abi3": f"cp3X-abi3 with X <= {minor}",
            "py3-none": "py3-none",
        }[self.wheel_tags]

    @property
    def session_suffix(self) -> str:
        """``cu130-py312``: the session name part, for the host platform."""
        return f"{self.variant}-py{self.python.replace('.', '')}"

    @property
    def cibw_identifier(self) -> str:
        return f"{self.python_tag}-manylinux_{self.platform}"

    @property
    def platform_tag(self) -> str:
        return f"{self.manylinux}_{self.platform}"

    @property
    def local_version(self) -> str | None:
        return None if self.variant == "cpu" else self.variant

    @property
    def torch_cuda_arch_list(self) -> str:
        return torch_cuda_arch_list(self.gpu_archs) if self.gpu_archs else ""

    @property
    def cmake_cuda_architectures(self) -> str:
        return cmake_cuda_architectures(self.gpu_archs) if self.gpu_archs else ""

    @property
    def rpath_targets(self) -> tuple[str, ...]:
        return tuple(p.installs_to for p in self.cuda_packages)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "variant": self.variant,
            "train": self.train,
            "python": self.python,
            "platform": self.platform,
            "platform_tag": self.platform_tag,
            "cibw_identifier": self.cibw_identifier,
            "builder_image": self.builder_image,
            "gpu_archs": [str(a) for a in self.gpu_archs],
            "torch_cuda_arch_list": self.torch_cuda_arch_list,
            "cmake_cuda_architectures": self.cmake_cuda_architectures,
            "cuda_packages": [
                {
                    "name": p.name,
                    "also_accepted": list(p.also_accepted),
                    "libraries": list(p.libraries),
                    "installs_to": p.installs_to,
                }
                for p in self.cuda_packages
            ],
            "rpath_targets": list(self.rpath_targets),
            "toolchain": {
                "pypi": list(self.pypi_toolchain),
                "host_hint": self.host_toolchain_hint,
            },
            "local_version": self.local_version,
            "extra_variants": self.extra_variants,
            "smoke_pythons": list(self.pythons),
            "embedded_device_code": self.embedded_device_code,
            "oldest_driver": self.oldest_driver,
        } | ({"gpu_archs_source": self.gpu_archs_source} if self.gpu_archs_source else {})


def _provided(policy: Policy, variant: str, platform: str) -> tuple[str, ...]:
    libs = (lib for d in policy.dependencies_for(variant, platform) for lib in d.libraries)
    return tuple(dict.fromkeys(libs))


def build_pythons(wheel_tags: WheelTags, pythons: tuple[str, ...]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(build Python, Pythons served) per row of one variant (pure): a cpython project builds a
    wheel per Python; an abi3 or py3-none wheel serves every Python, so it is built once, with
    the oldest (an abi3 tag names the oldest CPython it serves), and smoke-tested on each."""
    if wheel_tags == "cpython":
        return tuple((py, ()) for py in pythons)
    ordered = tuple(sorted(pythons, key=version_key))
    return ((ordered[0], ordered),)


def expand(policy: Policy) -> tuple[Row, ...]:
    """Every row the policy advertises, in a stable order (platform, variant, python)."""
    rows: list[Row] = []
    tags = policy.project.wheel_tags
    for platform in policy.platforms:
        variants: list[tuple[str, tuple[str, ...], Train | None]] = []
        if policy.cpu_wheel:
            variants.append(("cpu", policy.pythons, None))
        variants += [(t.variant, t.pythons, t) for t in policy.trains]
        for variant, pythons, train in variants:
            channels = tuple(dict.fromkeys(d.package for d in policy.dependencies_for(variant, platform)))
            for py, served in build_pythons(tags, pythons):
                rows.append(
                    Row(
                        id=f"{variant}-py{py.replace('.', '')}-{platform}",
                        variant=variant,
                        train=train.version if train else None,
                        python=py,
                        platform=platform,
                        gpu_archs=train.gpu_archs[platform] if train else (),
                        cuda_packages=train.cuda_packages if train else (),
                        builder_image=train.builder_images[platform] if train else CPU_IMAGE,
                        pypi_toolchain=train.pypi_toolchain if train else (),
                        host_toolchain_hint=train.host_toolchain_hint if train else "",
                        manylinux=policy.manylinux,
                        extra_variants=policy.extra_variants,
                        wheel_tags=tags,
                        provided_libraries=_provided(policy, variant, platform),
                        channels=channels if train else (),
                        serves_pythons=served,
                        embedded_device_code=policy.embedded_device_code,
                        oldest_driver=train.oldest_driver if train else None,
                    )
                )
    if not rows:
        raise SelectionError(f"{policy.path}: the policy expands to no rows; a release needs at least one")
    dupes = sorted(i for i, n in Counter(r.id for r in rows).items() if n > 1)
    if dupes:
        raise SelectionError(f"{policy.path}: duplicate rows {dupes}")
    return tuple(rows)


# --------------------------------------------------------------------------- selection


@dataclass(frozen=True)
class Offered:
    """What the builders offer: cibuildwheel identifiers and builder images."""

    identifiers: frozenset[str]
    images: frozenset[str]

    def offers(self, row: Row) -> bool:
        image_ok = row.builder_image == CPU_IMAGE or row.builder_image in self.images
        return row.cibw_identifier in self.identifiers and image_ok


def parse_offered(data: object, source: str) -> Offered:
    """``{"version": 1, "identifiers": [...], "images": [...]}``."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a JSON object with 'identifiers' and 'images'")
    unknown = set(data) - {"version", "identifiers", "images"}
    if unknown:
        raise InputError(f"{source}: unknown keys {sorted(unknown)}; expected version, identifiers, images")
    if data.get("version") != 1:
        raise InputError(f"{source}: 'version' must be 1, got {data.get('version')!r}")
    out: dict[str, frozenset[str]] = {}
    for key in ("identifiers", "images"):
        value = data.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise InputError(f"{source}: '{key}' must be a list of strings")
        out[key] = frozenset(value)
    return Offered(out["identifiers"], out["images"])


def load_offered(text: str, source: str) -> Offered:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{source}: not valid JSON: {exc}") from None
    return parse_offered(data, source)


def check_offered(rows: Iterable[Row], offered: Offered) -> None:
    """Fail naming every advertised row the builders do not offer."""
    missing = [r for r in rows if not offered.offers(r)]
    if missing:
        lines = [
            f"  {r.id}: identifier {r.cibw_identifier}"
            + ("" if r.builder_image == CPU_IMAGE else f", image {r.builder_image}")
            for r in missing
        ]
        raise SelectionError(
            f"{len(missing)} advertised row(s) are not offered by the builders:\n"
            + "\n".join(lines)
            + "\nremove them from rows.toml or add the builders before releasing"
        )


def select(
    policy: Policy,
    rows: tuple[Row, ...],
    *,
    patterns: tuple[str, ...] = (),
    platform: str | None = None,
    platform_from: str | None = None,
) -> tuple[Row, ...]:
    """Rows whose id (or alias: :attr:`Row.aliases`) matches any glob (all when none), whole or
    by its leading parts (:func:`_matches`), or whose cibuildwheel identifier
    (``cp312-manylinux_x86_64``: every variant of that Python and arch) matches one whole, on
    ``platform`` when given.

    Asking for an excluded platform or Python fails with the exclusion's reason. ``platform_from``:
    the environment variable that gave ``platform`` (None: the command line), named in the refusal.
    """
    if platform is not None:
        given = f"{platform_from}={platform}: " if platform_from else ""
        unset = f"; unset {platform_from} (or set it to all, or to one of them)" if platform_from else ""
        ex = policy.exclusion("platform", platform)
        if ex:
            raise SelectionError(f"{given}platform {platform!r} is excluded: {ex.reason}{unset}")
        if platform not in policy.platforms:
            raise SelectionError(
                f"{given}platform {platform!r} is not in {policy.path} matrix.platforms "
                f"({', '.join(policy.platforms)}){unset}"
            )
    for pattern in patterns:
        for ex in policy.exclusions:
            token = ex.value if ex.kind == "platform" else "py" + ex.value.replace(".", "")
            if token in pattern:
                raise SelectionError(f"{pattern!r} asks for an excluded {ex.kind} {ex.value}: {ex.reason}")
    chosen = tuple(
        r
        for r in rows
        if (platform is None or r.platform == platform)
        and (
            not patterns
            or any(_matches(i, p) for p in patterns for i in (r.id, *r.aliases))
            or any(fnmatch.fnmatchcase(r.cibw_identifier, p) for p in patterns)  # cp312-manylinux_x86_64
        )
    )
    if not chosen:
        from release.policy.load import DEFAULT_POLICY

        wanted = ", ".join(patterns) or "*"
        plan = "python -m release plan" + (
            f" --policy {policy.path}" if policy.path != DEFAULT_POLICY else ""
        )
        raise SelectionError(
            f"no row matches {wanted!r}"
            + (f" on {platform}" if platform else "")
            + f"; `{plan}` lists the row ids"
        )
    return chosen


def _matches(row_id: str, pattern: str) -> bool:
    """A glob matches a row id whole, or its leading parts (``cu130-py312`` matches
    ``cu130-py312-x86_64``, ``cu130`` every cu130 row), pure."""
    return fnmatch.fnmatchcase(row_id, pattern) or fnmatch.fnmatchcase(row_id, f"{pattern}-*")


def pick_pr_row(rows: tuple[Row, ...], platform: str, offered: Offered | None = None) -> Row:
    """A pull request builds one row: the newest CUDA train on offer, then the newest Python.

    Chosen by preference, so a missing builder moves the choice down instead of failing.
    """
    candidates = [
        r for r in rows if r.platform == platform and r.is_cuda and (offered is None or offered.offers(r))
    ]
    if not candidates:
        raise SelectionError(f"no CUDA row on {platform} is on offer for a pull request build")

    def preference(r: Row) -> tuple[tuple[int, ...], tuple[int, ...]]:
        assert r.train is not None
        return version_key(r.train), version_key(r.python)

    return max(candidates, key=preference)


def github_matrix(rows: Iterable[Row]) -> dict[str, Any]:
    """The GitHub Actions ``strategy.matrix`` for build jobs: one include per row."""
    runners = dict(cuda.runners())
    rows = list(rows)
    for r in rows:
        if r.platform not in runners:
            raise SelectionError(
                f"no GitHub-hosted runner is known for {r.platform} (row {r.id}); the build jobs run natively "
                f"on {', '.join(sorted(runners))}"
            )
    return {
        "include": [
            {
                "id": r.id,
                "session": f"build-{r.session_suffix}",
                "suffix": r.session_suffix,
                "python": r.python,
                "platform": r.platform,
                "runner": runners.get(r.platform, "ubuntu-24.04"),
                "variant": r.variant,
            }
            for r in rows
        ]
    }
