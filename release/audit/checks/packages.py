"""Check ``packages``: the CUDA packages the wheel declares equal its train's set.

Read from ``Requires-Dist`` in METADATA. A requirement is a CUDA package when its
normalised name starts with ``nvidia-`` or ``cuda-``. Requirements gated on an extra
(``; extra == "..."``) are ignored: ``pip install pkg`` never installs them. Other markers are
evaluated for the machines the wheel installs on, read from its own tags (the CPU of its
platform tag, its OS, the Pythons of its python tags), never for the machine that audits it:
a requirement whose marker is false on every one of them (``platform_machine == "x86_64"`` on
an aarch64 wheel) is one pip never installs beside it, and a CUDA package declared only so
fails. Version pins are allowed.

CUDA wheel: every package of the train must be declared, by its name or by one of its
``also_accepted`` forms (``cuda-toolkit[cudart]`` counts as ``nvidia-cuda-runtime``:
any requirement on ``cuda-toolkit`` whose extras include ``cudart``); nothing else CUDA
may be declared (``nvidia-cuda-runtime-cu11`` on a cu130 wheel, an extra component of
``cuda-toolkit[...]``); and a version pin must admit the train (``==12.*`` on CUDA 13.0
fails). CPU wheel: no CUDA package at all.
"""

from __future__ import annotations

import email.parser
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from release.audit.model import Check, Contents, Expectation, Finding, fail, ok
from release.policy.model import CudaPackage
from release.resources.cpus import cpus

CHECK = "packages"
_EXTRA_MARKER = re.compile(r"\bextra\b")
_CU_SUFFIX = re.compile(r"-cu(\d+)$")


def is_cuda_package(name: str) -> bool:
    n = canonicalize_name(name)
    return n.startswith(("nvidia-", "cuda-"))


@dataclass(frozen=True)
class Declared:
    text: str  # as written in METADATA
    requirement: Requirement


def declared_requirements(metadata: str) -> tuple[list[Declared], list[str]]:
    """Requirements a plain ``pip install`` installs (but for markers, which :func:`never_installed`
    judges for the wheel's own machines), and the lines that do not parse."""
    message = email.parser.Parser().parsestr(metadata)  # compat32, its default policy
    good: list[Declared] = []
    bad: list[str] = []
    for line in message.get_all("Requires-Dist") or []:
        text = " ".join(str(line).split())
        try:
            req = Requirement(text)
        except InvalidRequirement:
            bad.append(text)
            continue
        if req.marker is not None and _EXTRA_MARKER.search(str(req.marker)):
            continue
        good.append(Declared(text, req))
    return good, bad


_MACHINES = cpus().names  # every CPU wheelwright knows (release/resources/cpus.toml)
_SYSTEMS = {  # platform tag prefix: (platform_system, sys_platform, os_name)
    "manylinux": ("Linux", "linux", "posix"),
    "musllinux": ("Linux", "linux", "posix"),
    "linux": ("Linux", "linux", "posix"),
    "win": ("Windows", "win32", "nt"),
    "macosx": ("Darwin", "darwin", "posix"),
}
_ANY_PYTHON = tuple(f"3.{minor}" for minor in range(8, 16))


def target_environments(python_tags: Sequence[str], platform_tags: Sequence[str]) -> list[dict[str, str]]:
    """The marker environments of the machines a wheel installs on, from its tags (pure): one per
    (CPU, OS, Python) they name. What a tag leaves open (an ``any`` platform, a ``py3`` tag) is
    every value it may take, so a marker is judged false only where it is false for all of them."""
    machines = sorted({m for tag in platform_tags for m in _MACHINES if tag.endswith("_" + m)})
    systems = sorted({v for tag in platform_tags for k, v in _SYSTEMS.items() if tag.startswith(k)})
    versions = sorted(
        {f"{t[2]}.{t[3:]}" for t in python_tags if len(t) > 3 and t[:2] in ("cp", "py") and t[2:].isdigit()}
    )
    out: list[dict[str, str]] = []
    for machine in machines or _MACHINES:
        for system, sys_platform, os_name in systems or sorted(set(_SYSTEMS.values())):
            for version in versions or _ANY_PYTHON:
                out.append(
                    {
                        "platform_machine": machine,
                        "platform_system": system,
                        "sys_platform": sys_platform,
                        "os_name": os_name,
                        "python_version": version,
                        "python_full_version": f"{version}.0",
                    }
                )
    return out


# CUDA requirements with a marker judged per wheel: real wheels declare fewer than 30 CUDA packages;
# a METADATA of thousands (up to its 16 MiB read limit) is not evaluated past this, and fails.
MARKER_BUDGET = 256
_VARIABLES = (
    "platform_machine",
    "platform_system",
    "sys_platform",
    "os_name",
    "python_version",
    "python_full_version",
)


def never_installed(
    declared: Sequence[Declared], targets: Sequence[Mapping[str, str]]
) -> tuple[list[str], int]:
    """The CUDA packages among ``declared`` whose marker no machine in ``targets`` satisfies (pip
    never installs them beside the wheel), and how many markers went unjudged past
    :data:`MARKER_BUDGET`. Each marker is judged once, over the distinct values of only the
    variables it names."""
    never: list[str] = []
    judged: dict[str, bool] = {}
    over = 0
    for d in declared:
        marker = d.requirement.marker
        if marker is None or not is_cuda_package(d.requirement.name):
            continue
        text = str(marker)
        if text not in judged:
            if len(judged) >= MARKER_BUDGET:
                over += 1
                continue
            names = [v for v in _VARIABLES if v in text]
            cases = {tuple((v, t[v]) for v in names) for t in targets} or {()}
            base = dict(targets[0]) if targets else {}
            judged[text] = any(marker.evaluate({**base, **dict(case)}) for case in cases)
        if not judged[text]:
            never.append(d.text)
    return never, over


def _targets(contents: Contents) -> list[dict[str, str]]:
    return target_environments(contents.wheel.python_tags, contents.wheel.platform_tags)


def admits_train(specifier: SpecifierSet, train: str) -> bool:
    """True when some version of the train (``13.0.*``) satisfies the specifier."""
    if not str(specifier):
        return True
    candidates = {train, f"{train}.0", f"{train}.999"}
    for spec in specifier:
        version = spec.version.removesuffix(".*")
        if version == train or version.startswith(train + "."):
            candidates.add(version)
    for text in candidates:
        try:
            if specifier.contains(Version(text), prereleases=True):
                return True
        except InvalidVersion:
            continue
    return False


def _accepts(package: CudaPackage, req: Requirement) -> set[str] | None:
    """The extras of ``req`` that ``package`` accounts for, or None when it does not match."""
    name = canonicalize_name(req.name)
    if name == package.name:
        return set()
    for form in package.also_accepted:
        accepted = Requirement(form)
        if canonicalize_name(accepted.name) == name and set(accepted.extras) <= set(req.extras):
            return set(accepted.extras)
    return None


@dataclass(frozen=True)
class Declarations:
    """What the wheel's METADATA declares, and the findings every ``packages`` check starts with."""

    declared: list[Declared]
    cuda: list[Declared]  # the CUDA packages among them
    findings: list[Finding]  # a failure per Requires-Dist line that does not parse, ...
    verdict: bool  # ...or the whole verdict: no METADATA, or a CPU wheel (which declares no CUDA package)


def declarations(contents: Contents, expectation: Expectation) -> Declarations:
    """The start of the ``packages`` check, a row's or a standalone audit's."""
    metadata = contents.wheel.metadata
    if metadata is None:
        missing = fail(CHECK, "the wheel has no readable .dist-info/METADATA: cannot tell what it declares")
        return Declarations([], [], [missing], verdict=True)
    targets = _targets(contents)
    everywhere, bad = declared_requirements(metadata)
    never, over = never_installed(everywhere, targets)
    dropped = set(never)  # a set: a hostile METADATA may repeat one false marker 300,000 times
    declared = [d for d in everywhere if d.text not in dropped]
    out = [fail(CHECK, f"Requires-Dist {text!r} is not a valid requirement") for text in bad]
    where = ", ".join(sorted({t["platform_machine"] for t in targets}))
    out += [
        fail(
            CHECK,
            f"declares {text!r}, which pip never installs beside this wheel: its marker is false on every "
            f"machine the wheel's tags name ({where}); declare it for them (or without the marker)",
            requirement=text,
        )
        for text in never
    ]
    if over:
        out.append(
            fail(
                CHECK,
                f"declares more than {MARKER_BUDGET} CUDA requirements with distinct markers; {over} more were "
                "not judged (a real wheel declares a few): declare each CUDA package once",
            )
        )
    cuda = [d for d in declared if is_cuda_package(d.requirement.name)]
    if expectation.is_cuda:
        return Declarations(declared, cuda, out, verdict=False)
    out += [
        fail(
            CHECK,
            f"CPU wheel declares the CUDA package {d.text!r}; a CPU wheel declares no CUDA package",
            requirement=d.text,
        )
        for d in cuda
    ]
    return Declarations(
        declared, cuda, out or [ok(CHECK, "declares no CUDA package, as a CPU wheel must")], verdict=True
    )


def _expected_text(package: CudaPackage) -> str:
    forms = " or ".join(package.also_accepted)
    return package.name + (f" (or {forms})" if forms else "")


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    if expectation.standalone:
        return _standalone_check(contents, expectation)  # the rules for a wheel audited without a policy
    head = declarations(contents, expectation)
    if head.verdict:
        return head.findings
    declared, cuda, out = head.declared, head.cuda, head.findings
    train = expectation.train or ""
    major = train.split(".")[0]
    matched: dict[str, Declared] = {}
    for d in cuda:
        req = d.requirement
        covered: set[str] = set()
        hits: list[CudaPackage] = []
        for package in expectation.cuda_packages:
            extras = _accepts(package, req)
            if extras is not None:
                hits.append(package)
                covered |= extras
        if not hits:
            suffix = _CU_SUFFIX.search(canonicalize_name(req.name))
            if suffix is not None and suffix[1] != major:
                out.append(
                    fail(
                        CHECK,
                        f"declares {d.text!r}, a CUDA {suffix[1]} package, but this wheel's train is CUDA {train}",
                        requirement=d.text,
                    )
                )
            else:
                out.append(
                    fail(
                        CHECK,
                        f"declares the CUDA package {d.text!r}, which is not in the CUDA {train} set "
                        f"{[_expected_text(p) for p in expectation.cuda_packages]}",
                        requirement=d.text,
                    )
                )
            continue
        extra = sorted(set(req.extras) - covered)
        if extra:
            out.append(
                fail(
                    CHECK,
                    f"{d.text!r} also pulls in {extra}, which the CUDA {train} set does not list",
                    requirement=d.text,
                    extra_components=extra,
                )
            )
        if not admits_train(req.specifier, train):
            out.append(
                fail(
                    CHECK,
                    f"{d.text!r} pins a version outside CUDA {train} ({req.specifier}); the wheel was built "
                    f"for CUDA {train}",
                    requirement=d.text,
                )
            )
        for package in hits:
            matched.setdefault(package.name, d)
    names = {canonicalize_name(d.requirement.name) for d in declared}
    channel = bool(expectation.channels) and all(canonicalize_name(c) in names for c in expectation.channels)
    for package in expectation.cuda_packages:
        if package.name not in matched and not channel:
            out.append(
                fail(
                    CHECK,
                    f"does not declare {_expected_text(package)}: without it pip installs no "
                    f"{', '.join(package.libraries)} and the wheel's libraries fail to load",
                    package=package.name,
                )
            )
    if not out and channel and not matched:
        out.append(
            ok(
                CHECK,
                f"declares the row's dependency channel {', '.join(expectation.channels)}, which brings the "
                f"CUDA {train} runtime ({', '.join(_expected_text(p) for p in expectation.cuda_packages)})",
                channels=list(expectation.channels),
            )
        )
    elif not out:
        out.append(
            ok(
                CHECK,
                f"declares exactly the CUDA {train} package set: " + ", ".join(sorted(d.text for d in cuda)),
                declared=sorted(d.text for d in cuda),
            )
        )
    return out


def _standalone_check(contents: Contents, expectation: Expectation) -> list[Finding]:
    """``packages`` for a standalone audit: what the wheel declares is consistent with its train."""
    head = declarations(contents, expectation)
    if head.verdict:
        return head.findings
    cuda_reqs, out = head.cuda, head.findings
    train = expectation.train
    source = expectation.train_source or "the claim"
    if train is None:
        return out or [ok(CHECK, f"no CUDA release to hold the declared packages to ({source})",
                          declared=[d.text for d in cuda_reqs])]  # fmt: skip
    major = train.split(".")[0]
    for d in cuda_reqs:
        name = canonicalize_name(d.requirement.name)
        suffix = _CU_SUFFIX.search(name)
        if suffix is not None and suffix[1] != major and name.startswith("nvidia-"):
            out.append(
                fail(
                    CHECK,
                    f"declares {d.text!r}, a CUDA {suffix[1]} package, but the wheel is CUDA {train} ({source})",
                    requirement=d.text,
                )
            )
        elif name in ("cuda-toolkit", "nvidia-cuda-runtime") and not admits_train(
            d.requirement.specifier, train
        ):
            out.append(
                fail(
                    CHECK,
                    f"{d.text!r} pins a version outside CUDA {train} ({d.requirement.specifier}); the wheel is "
                    f"CUDA {train} ({source})",
                    requirement=d.text,
                )
            )
    if not any(not f.ok for f in out):
        out.append(
            ok(
                CHECK,
                f"declares CUDA packages of CUDA {train} only ({source}): "
                + (", ".join(sorted(d.text for d in cuda_reqs)) or "none"),
                declared=sorted(d.text for d in cuda_reqs),
            )
        )
    return out


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "declared CUDA packages", check, needs_claim=False)
