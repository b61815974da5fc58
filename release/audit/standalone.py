"""Audit a wheel with no policy: its CUDA train and its package rules come from the wheel itself.

A third party's wheel was not built from this project's rows.toml, so it is held to what it
declares and what its files need, with wheelwright's built-in CUDA knowledge
(:mod:`release.resources.cuda`: which package ships which library for CUDA 11, 12 and 13, and
where it installs it):

* the train: ``--variant`` (``cu128`` is CUDA 12.8), else the wheel (:func:`infer_train`): its local
  version label, the CUDA package it is (``nvidia-cuda-runtime 13.0.96``), a ``cuda-toolkit==13.0.3``
  pin, the CUDA runtime its libraries link (``libcudart.so.12``), the CUDA libraries and folders it
  ships (CUPTI's SONAME for CUDA 13, ``nvidia/cu13/``), the CUDA packages it declares (``nvidia-cublas-cu12``),
  the CUDA libraries it links, its name, its PTX (never a test's);
* its CUDA packages: exactly the ones it declares (``cuda-toolkit[cublas,cudart]`` expands to the
  packages of those extras), each with the libraries the wheel's files need from it and the
  folder it installs them to, so the ``loader`` check holds every RUNPATH to them;
* the ``packages`` check (:func:`check`): every declared CUDA package belongs to the wheel's
  CUDA major (a ``-cu11`` package on a CUDA 12 wheel fails) and every pin admits the train.

Pure: everything was read by :mod:`release.audit.reading.inspector` already.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import replace

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from release.audit.checks.packages import (
    Declared,
    declared_requirements,
    is_cuda_package,
)
from release.audit.model import Contents, Expectation, is_library_name
from release.policy.model import CudaPackage
from release.resources.cuda import CudaLibrary, cuda

__all__ = ["declared_packages", "infer_train", "resolve"]

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


# --------------------------------------------------------------------------- the train, from the wheel

Told = tuple[str, str]  # (the train, how the wheel told it)
_Rule = Callable[[Contents, list[Declared], list[str]], Told | None]  # notes: why a rule could not tell
_TEST_FOLDERS = frozenset({"test", "tests", "testing"})


def _release_of(version: str) -> tuple[int, int] | None:
    """``13.0.96`` -> (13, 0); None when the version does not parse or has no minor."""
    try:
        release = Version(version).release
    except InvalidVersion:
        return None
    return (release[0], release[1]) if len(release) >= 2 else None


def _in_test_folder(path: str) -> bool:
    """``numba/cuda/tests/data/jitlink.ptx``: a test's fixture, not what the wheel runs."""
    return any(part in _TEST_FOLDERS for part in path.split("/")[:-1])


def _few(items: Sequence[str], limit: int = 3) -> str:
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def _one_major(found: dict[int, str], one: str, several: str, notes: list[str]) -> Told | None:
    """The CUDA major of ``found`` (major -> an example) when there is one; several: a note, no answer."""
    if len(found) == 1:
        ((major, example),) = found.items()
        return str(major), f"{one} ({example})"
    if found:
        majors = sorted(found)
        notes.append(
            f"{several} name CUDA {' and '.join(map(str, majors))} ({', '.join(found[m] for m in majors)})"
        )
    return None


def _by_label(contents: Contents, _declared: list[Declared], _notes: list[str]) -> Told | None:
    local = contents.wheel.local
    if local and (m := _LABEL.match(local)):
        return f"{m[1][:-1]}.{m[1][-1]}", f"its local version label +{local}"
    return None


def _by_itself(contents: Contents, _declared: list[Declared], _notes: list[str]) -> Told | None:
    """The wheel is a CUDA package of release/resources/cuda.toml: cuda-toolkit and the runtime's package
    by their version (a library's own version, cuBLAS 13.1.1.3 in CUDA 13.0.3, is not CUDA's), any
    other by the CUDA major whose package it is."""
    name, version = canonicalize_name(contents.wheel.name), contents.wheel.version
    release = _release_of(version)
    if name == "cuda-toolkit":
        return (f"{release[0]}.{release[1]}", f"it is cuda-toolkit {version}") if release else None
    ships = [(lib, s) for lib in cuda().libraries for s in lib.shipping if s.package == name]
    majors = sorted({s.cuda_major for _, s in ships})
    if len(majors) != 1:
        return None
    major = majors[0]
    if release is not None and release[0] == major and any(lib.kind == "runtime" for lib, _ in ships):
        return f"{major}.{release[1]}", f"it is {name} {version}, the CUDA runtime's package"
    return str(major), f"it is {name}, CUDA {major}'s package of {ships[0][0].title}"


def _by_pin(_contents: Contents, declared: list[Declared], _notes: list[str]) -> Told | None:
    for d in declared:
        name = canonicalize_name(d.requirement.name)
        if name in ("cuda-toolkit", "nvidia-cuda-runtime") and (pinned := _pin_train(d.requirement)):
            return pinned, f"its requirement {d.text!r}"
    return None


def _linked(contents: Contents, *, runtime: bool) -> Told | None:
    facts = cuda()
    for needed in _needed(contents):
        known = facts.library(needed)
        if known is None or known.is_driver or (runtime and known.kind != "runtime"):
            continue
        if (major := known.cuda_major_of(needed)) is not None:
            return str(major), f"the CUDA {'runtime' if runtime else 'library'} its libraries link ({needed})"
    return None


def _by_runtime_linked(contents: Contents, _declared: list[Declared], _notes: list[str]) -> Told | None:
    return _linked(contents, runtime=True)


def _cuda_folders() -> dict[str, set[int]]:
    """Each CUDA package's top folder (``nvidia/cu13`` of ``nvidia/cu13/lib``) -> the CUDA majors using it."""
    out: dict[str, set[int]] = {}
    for lib in cuda().libraries:
        for s in lib.shipping:
            out.setdefault("/".join(s.installs_to.split("/")[:2]), set()).add(s.cuda_major)
    return out


def _by_shipped(contents: Contents, _declared: list[Declared], notes: list[str]) -> Told | None:
    """A CUDA library it ships, by SONAME (else file name); else a folder of one CUDA major's packages."""
    facts = cuda()
    sonames: dict[int, str] = {}
    for lib in contents.libraries:
        name = lib.elf.soname if lib.elf is not None and lib.elf.soname else lib.name
        known = facts.library(name) if lib.device_file is None and is_library_name(name) else None
        if known is not None and not known.is_driver and (major := known.cuda_major_of(name)) is not None:
            sonames.setdefault(major, name)
    if sonames:
        return _one_major(sonames, "the CUDA library it ships", "the CUDA libraries it ships", notes)
    folders = _cuda_folders()
    found: dict[int, str] = {}
    for member in contents.wheel.files:
        parts = member.name.split("/")
        majors = folders.get("/".join(parts[:2]), set()) if len(parts) > 2 else set()
        if len(majors) == 1:
            found.setdefault(next(iter(majors)), "/".join(parts[:2]) + "/")
    return _one_major(
        found, "the CUDA package folder it installs to", "the CUDA package folders it installs to", notes
    )


def _by_required_suffix(_contents: Contents, declared: list[Declared], _notes: list[str]) -> Told | None:
    for d in declared:
        name = canonicalize_name(d.requirement.name)
        if (m := _CU_SUFFIX.search(name)) is not None and name.startswith("nvidia-"):
            return m[1], f"its requirement {d.text!r}"
    return None


def _by_library_linked(contents: Contents, _declared: list[Declared], _notes: list[str]) -> Told | None:
    return _linked(contents, runtime=False)


def _by_name(contents: Contents, _declared: list[Declared], _notes: list[str]) -> Told | None:
    if (m := _CU_SUFFIX.search(canonicalize_name(contents.wheel.name))) is not None:
        return m[1], f"its name ({contents.wheel.name})"
    return None


def _by_device_code(contents: Contents, _declared: list[Declared], notes: list[str]) -> Told | None:
    """Its newest PTX, else the ptxas that wrote its cubins; never a test's fixture."""
    tests = sorted(
        lib.path for lib in contents.libraries if _in_test_folder(lib.path) and (lib.fatbins or lib.toolkits)
    )
    if tests:
        notes.append(f"device code under test folders is a test's, left out ({_few(tests)})")
    libs = [lib for lib in contents.libraries if not _in_test_folder(lib.path)]
    isas = [e.ptx_isa for lib in libs for fb in lib.fatbins for e in fb.entries if e.ptx_isa]
    if isas and (release := cuda().release_for_ptx_isa(max(isas))) is not None:
        return release.label, f"its newest PTX (ISA {max(isas)[0]}.{max(isas)[1]})"
    toolkits = [t for lib in libs for t in lib.toolkits]
    if toolkits:
        newest = max(toolkits)
        return str(newest[0]), f"the ptxas that wrote its cubins (CUDA {newest[0]}.{newest[1]})"
    return None


_RULES: tuple[_Rule, ...] = (
    _by_label,
    _by_itself,
    _by_pin,
    _by_runtime_linked,
    _by_shipped,
    _by_required_suffix,
    _by_library_linked,
    _by_name,
    _by_device_code,
)


def infer_train(contents: Contents, declared: list[Declared]) -> tuple[str | None, str]:
    """The wheel's CUDA train (``13.0``, or just ``12`` when only the major is known) and how it was told.

    The first of these rules that tells wins (``--variant`` comes before all of them, in :func:`resolve`):

    1. its local version label: ``+cu130`` is 13.0;
    2. the wheel is itself a CUDA package of release/resources/cuda.toml: ``cuda-toolkit 13.0.3`` and
       the runtime's package (``nvidia-cuda-runtime 13.0.96``) by their version (13.0); any other by the
       CUDA major whose package it is (``nvidia-cublas`` is CUDA 13's: 13, not its own version's 13.1);
    3. a pin of ``cuda-toolkit`` or ``nvidia-cuda-runtime`` among its requirements (``==13.0.3``);
    4. the CUDA runtime its libraries link (``libcudart.so.12``: 12);
    5. what it ships: a CUDA library's SONAME that one CUDA major's package ships (``libcudart.so.13``,
       CUPTI's for CUDA 13), else a folder that only one CUDA major's packages install to
       (``nvidia/cu13/...``: nvcc's ``bin``, the headers of nvidia-cuda-crt); shipped libraries of two
       majors (CUPTI's for CUDA 12 and for 13) tell nothing;
    6. a declared ``nvidia-*-cuNN`` package;
    7. any other CUDA library its libraries link (cuBLAS's for CUDA 13);
    8. its name's ``-cuNN`` suffix;
    9. its newest PTX (the first release that writes its ISA), else the ptxas that wrote its cubins;
       device code under a ``test``, ``tests`` or ``testing`` folder (a test's fixture, such as
       numba's ``cuda/tests/data/jitlink.ptx``) is left out.

    What a rule could not use (two majors, a test's device code) is said after the answer, or after
    "nothing in the wheel names a CUDA release".
    """
    notes: list[str] = []
    for rule in _RULES:
        told = rule(contents, declared, notes)
        if told is not None:
            return told[0], "; ".join((told[1], *notes))
    return None, "; ".join(("nothing in the wheel names a CUDA release", *notes))


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


def by_design(expectation: Expectation, contents: Contents) -> Expectation:
    """A standalone CUDA expectation, noted when the wheel carries no device code by design: it is
    NVIDIA's own package of its libraries (every ELF file is a CUDA library the wheel's distribution
    ships, such as nvidia-cuda-nvrtc's NVRTC) and none of them carries device code in any form. Such a
    library has no kernels of its own: it loads (the runtime), compiles (NVRTC) or links (nvJitLink)
    device code at run time, so the device-code checks note it instead of failing "runs on no GPU"."""
    from release.audit.reading.cuda_identity import identify  # only for a standalone CUDA audit

    if not expectation.standalone or not expectation.is_cuda or not contents.libraries:
        return expectation
    libs = contents.libraries
    if any(lib.elf is None or lib.has_device_code or lib.relocatable or lib.embedded for lib in libs):
        return expectation
    if any(lib.device_file is not None or lib.fatbin_error is not None for lib in libs):
        return expectation
    known = [identify(lib) for lib in libs]
    if not all(k is not None and k.shipped_by(contents.wheel.name) for k in known):
        return expectation
    titles = sorted({k.library.title.split(" (")[0] for k in known if k is not None}, key=len)
    note = (
        f"no device code by design: {contents.wheel.name} is NVIDIA's package of {', '.join(titles)}, host "
        "code that loads, compiles or links device code at run time; nothing of its own to run on a GPU"
    )
    return replace(expectation, by_design=note)
