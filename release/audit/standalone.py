"""Audit a wheel with no policy: its CUDA train and its package rules come from the wheel itself.

A third party's wheel was not built from this project's rows.toml, so it is held to what it
declares and what its files need, with wheelwright's built-in CUDA knowledge
(:mod:`release.resources.cuda`: which package ships which library for CUDA 11, 12 and 13, and
where it installs it):

* the train: ``--variant`` (``cu128`` is CUDA 12.8), else the local version label, else the CUDA
  runtime its libraries link (``libcudart.so.12``), the CUDA packages it declares
  (``nvidia-cublas-cu12``, ``cuda-toolkit==13.0.3``), the CUDA libraries it links, its PTX;
* its CUDA packages: exactly the ones it declares (``cuda-toolkit[cublas,cudart]`` expands to the
  packages of those extras), each with the libraries the wheel's files need from it and the
  folder it installs them to, so the ``loader`` check holds every RUNPATH to them;
* the ``packages`` check (:func:`check`): every declared CUDA package belongs to the wheel's
  CUDA major (a ``-cu11`` package on a CUDA 12 wheel fails) and every pin admits the train.

Pure: everything was read by :mod:`release.audit.inspect` already.
"""

from __future__ import annotations

import re
from dataclasses import replace

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from release.audit.model import Contents, Expectation, Finding, fail, ok
from release.audit.packages import (
    CHECK,
    Declared,
    admits_train,
    declarations,
    declared_requirements,
    is_cuda_package,
)
from release.policy.model import CudaPackage
from release.resources.cuda import CudaLibrary, cuda

__all__ = ["check", "declared_packages", "infer_train", "resolve"]

_CU_SUFFIX = re.compile(r"-cu(\d+)$")
_LABEL = re.compile(r"\Acu(\d{2,3})\Z")
_PIN = re.compile(r"^(?:==|~=|>=)\s*(\d+)\.(\d+)")


def _declared(contents: Contents) -> list[Declared]:
    metadata = contents.wheel.metadata
    return declared_requirements(metadata)[0] if metadata else []


def _pin_train(req: Requirement) -> str | None:
    for spec in req.specifier:
        m = _PIN.match(f"{spec.operator}{spec.version}")
        if m is not None and spec.operator in ("==", "~="):
            return f"{m[1]}.{m[2]}"
    return None


def _needed(contents: Contents) -> list[str]:
    return sorted({n for lib in contents.libraries if lib.elf is not None for n in lib.elf.needed})


def infer_train(contents: Contents, declared: list[Declared]) -> tuple[str | None, str]:
    """The wheel's CUDA train (``13.0``, or just ``12`` when only the major is known) and how it was told."""
    local = contents.wheel.local
    if local and (m := _LABEL.match(local)):
        return f"{m[1][:-1]}.{m[1][-1]}", f"its local version label +{local}"
    facts = cuda()
    for d in declared:
        name = canonicalize_name(d.requirement.name)
        if name in ("cuda-toolkit", "nvidia-cuda-runtime") and (pinned := _pin_train(d.requirement)):
            return pinned, f"its requirement {d.text!r}"
    for needed in _needed(contents):
        known = facts.library(needed)
        if known is not None and known.kind == "runtime" and (major := known.cuda_major_of(needed)):
            return str(major), f"the CUDA runtime its libraries link ({needed})"
    for d in declared:
        name = canonicalize_name(d.requirement.name)
        if (m := _CU_SUFFIX.search(name)) is not None and name.startswith("nvidia-"):
            return m[1], f"its requirement {d.text!r}"
    for needed in _needed(contents):
        known = facts.library(needed)
        if known is not None and not known.is_driver and (major := known.cuda_major_of(needed)):
            return str(major), f"the CUDA library its libraries link ({needed})"
    if (m := _CU_SUFFIX.search(canonicalize_name(contents.wheel.name))) is not None:
        return m[1], f"its name ({contents.wheel.name})"
    isas = [e.ptx_isa for lib in contents.libraries for fb in lib.fatbins for e in fb.entries if e.ptx_isa]
    if isas and (release := facts.release_for_ptx_isa(max(isas))) is not None:
        return release.label, f"its newest PTX (ISA {max(isas)[0]}.{max(isas)[1]})"
    toolkits = [t for lib in contents.libraries for t in lib.toolkits]
    if toolkits:
        return str(
            max(toolkits)[0]
        ), f"the ptxas that wrote its cubins (CUDA {max(toolkits)[0]}.{max(toolkits)[1]})"
    return None, "nothing in the wheel names a CUDA release"


def _expanded(d: Declared) -> list[tuple[str, str]]:
    """(package, how it was declared): ``cuda-toolkit[cublas]`` -> its extra's packages."""
    name = canonicalize_name(d.requirement.name)
    if name != "cuda-toolkit":
        return [(name, d.text)]
    extras = cuda().toolkit_extras
    return [
        (p, f"cuda-toolkit[{extra}]") for extra in sorted(d.requirement.extras) for p in extras.get(extra, ())
    ]


def _shipping_package(
    known: CudaLibrary, needed: str, major: int | None, declared: set[str]
) -> tuple[str, str] | None:
    """The package that ships ``needed`` for the wheel's CUDA major (a soname two majors share, such as
    cuRAND's, goes to the declared one), and where it installs it."""
    majors = known.cuda_majors_of(needed) or ((major,) if major is not None else ())
    ordered = sorted(majors, key=lambda m: (m != major, m))
    found = [s for m in ordered if (s := known.shipped_for(m)) is not None]
    best = next((s for s in found if s.package in declared), found[0] if found else None)
    return (best.package, best.installs_to) if best is not None else None


def declared_packages(
    contents: Contents, declared: list[Declared], train: str | None
) -> tuple[CudaPackage, ...]:
    """The declared CUDA packages as the loader check reads them: each with the libraries the wheel's
    files need from it (by wheelwright's table) and the folder it installs them to."""
    major = int(train.split(".")[0]) if train else None
    forms: dict[str, set[str]] = {}
    for d in declared:
        if is_cuda_package(d.requirement.name):
            for package, how in _expanded(d):
                forms.setdefault(package, set()).add(how)
    libraries: dict[str, set[str]] = {}
    installs: dict[str, str] = {}
    facts = cuda()
    for needed in _needed(contents):
        known = facts.library(needed)
        if known is None or known.is_driver:
            continue
        found = _shipping_package(known, needed, major, set(forms))
        if found is not None and found[0] in forms:
            libraries.setdefault(found[0], set()).add(needed)
            installs[found[0]] = found[1]
    out = []
    for package in sorted(forms):
        also = tuple(sorted(f for f in forms[package] if f.startswith("cuda-toolkit[")))
        out.append(
            CudaPackage(package, also, tuple(sorted(libraries.get(package, ()))), installs.get(package, ""))
        )
    return tuple(out)


def resolve(expectation: Expectation, contents: Contents) -> Expectation:
    """A standalone expectation completed from the wheel: its train and its declared CUDA packages."""
    if not expectation.standalone or not expectation.is_cuda:
        return expectation
    declared = _declared(contents)
    train, how = (
        (expectation.train, f"--variant {expectation.variant}")
        if expectation.train
        else infer_train(contents, declared)
    )
    variant = expectation.variant
    if variant == "cuda" and train and "." in train:
        variant = "cu" + train.replace(".", "")
    return replace(
        expectation,
        train=train,
        variant=variant,
        cuda_packages=declared_packages(contents, declared, train),
        train_source=how,
    )


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
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
