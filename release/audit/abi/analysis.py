"""The platform-tag analysis: which manylinux/musllinux tags a wheel's ELF files allow.

``auditwheel show`` unzips the wheel again and reads every symbol table with pyelftools, once
per policy that blacklists something a library links (torch 2.14.1: 20 to 60 s here). This
module gives the same answer from the tree the audit extracted, with auditwheel's public pieces:

* the policies (symbol versions, library whitelists and blacklists) are auditwheel's data,
  read once through :func:`release.audit.abi.manylinux_cache.policies_of`;
* the wheel's libc and architecture come from its tags (public ``auditwheel.wheeltools``);
* everything read from the ELF files (library resolution against this machine's loader
  paths, :mod:`release.binary.ldd`, only to files of the same ELF machine; symbol versions,
  undefined symbols, Python extension entry points and the instruction-set level,
  :mod:`release.binary.elf`, :mod:`release.binary.elf_symbols`) is wheelwright's own reader,
  each file read at most once per analysis.

The composition follows auditwheel 6.8's ``analyze_wheel_abi``, rule for rule (whitelists, blacklists,
grafted libraries' own symbol versions, the fix-up of libraries needed by other libraries, the ISA
check, UCS-2 and PyFPE symbols), but one: a library or executable of another CPU architecture than the
tag's fails the analysis, naming it (auditwheel logs "ignoring" and grades the rest). Nothing of
auditwheel is patched; ``tests/integration/test_audit_abi.py`` compares with ``auditwheel show --json``.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import itertools
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from release.audit.abi.manylinux import (
    ExternalReference,
    PlatformPolicy,
    Policies,
    beyond,
    claimed_floor,
    glibc_ok,
    policy_for_tag,
    tag_between,
)
from release.audit.abi.manylinux_cache import policies_of
from release.audit.model import AbiReport, Library
from release.binary.elf import ElfError, read_elf
from release.binary.elf_symbols import STB_WEAK, STT_FUNC, STT_NOTYPE, Symbol, lookup, undefined_symbols
from release.binary.ldd import Dependency, ElfPlatform, Resolver, Tree, is_superset

__all__ = ["AUDITWHEEL_PINNED", "analyze_abi"]

AUDITWHEEL_PINNED = "6.8.2"  # the release whose policies and rules this analysis was checked against
_LOADERS = ("ld64.so.2", "ld64.so.1")
_PYFPE = frozenset({"PyFPE_jbuf", "PyFPE_dummy", "PyFPE_counter"})
Graded = Literal["claimed", "all"]


class _AbiFailure(Exception):
    """The wheel cannot be analysed (auditwheel would refuse it too); the message says why."""


def _is_loader(soname: str) -> bool:
    return "ld-linux" in soname or soname in _LOADERS


class _Reads:
    """Each file's symbol versions and undefined symbols, read at most once per analysis."""

    def __init__(self, libs: Iterable[Library], root: Path) -> None:
        self._versions: dict[str, dict[str, set[str]]] = {}
        for lib in libs:
            if lib.elf is not None:
                self._versions[str((root / lib.path).resolve())] = _as_sets(lib.elf.version_needs)
        self._undefined: dict[str, tuple[Symbol, ...]] = {}

    def versions(self, path: Path) -> dict[str, set[str]]:
        key = str(path.resolve())
        if key not in self._versions:
            self._versions[key] = _as_sets(read_elf(path).version_needs)
        return self._versions[key]

    def external_versions(self, path: Path) -> dict[str, set[str]]:
        """A library outside the wheel a policy would graft; one that is not ELF has none (as auditwheel)."""
        try:
            return self.versions(path)
        except ElfError:
            return {}

    def undefined(self, path: Path) -> tuple[Symbol, ...]:
        key = str(path.resolve())
        if key not in self._undefined:
            self._undefined[key] = undefined_symbols(path)
        return self._undefined[key]


def _as_sets(needs: Sequence[tuple[str, Sequence[str]]]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for soname, versions in needs:
        if not _is_loader(soname):
            out[soname].update(versions)
    return dict(out)


def python_extension(path: Path) -> tuple[bool, int | None]:
    """auditwheel's rule: a defined function ``PyInit_<module>`` (3) or ``init<module>`` (2)."""
    module = path.name.split(".", 1)[0]
    entry = {f"init{module}": 2, f"PyInit_{module}": 3, f"_cffi_pypyinit_{module}": 2}
    found = [s for s in lookup(path, entry).values() if s.defined and s.type == STT_FUNC]
    first = min(found, key=lambda s: s.position, default=None)
    return (True, entry[first.name]) if first is not None else (False, None)


def _blacklisted(reads: _Reads, path: Path, blacklist: Mapping[str, frozenset[str]]) -> dict[str, list[str]]:
    if not blacklist:
        return {}
    undefined = {"*"} | {s.name for s in reads.undefined(path) if s.bind != STB_WEAK}
    return {lib: sorted(symbols & undefined) for lib, symbols in blacklist.items() if symbols & undefined}


def external_references(
    policies: Policies,
    tree: Tree,
    root: Path,
    reads: _Reads,
) -> dict[str, ExternalReference]:
    """Per policy: the libraries it would have to graft for this ELF tree, and blacklisted symbols used."""

    def keep(libs: Iterable[str], whitelist: frozenset[str]) -> set[str]:
        return {lib for lib in libs if not _is_loader(lib) and lib not in whitelist}

    out: dict[str, ExternalReference] = {}
    for policy in policies:
        needed: set[str] = set()
        blacklist: dict[str, list[str]] = {}
        if policy is not policies.linux:
            reduced = {k: v for k, v in policy.blacklist.items() if k in set(tree.needed)}
            blacklist = _blacklisted(reads, Path(tree.realpath), reduced)
            todo = keep(tree.needed, policy.whitelist)
            while todo:
                lib = todo.pop()
                needed.add(lib)
                todo |= keep(tree.libraries[lib].needed, policy.whitelist) - needed
        libs: dict[str, str | None] = {}
        for lib in needed:
            real = tree.libraries[lib].realpath
            if real is not None and _inside(Path(real), root):
                continue  # reached through the wheel's own search path: not external
            libs[lib] = str(real) if real is not None else None
        out[policy.name] = ExternalReference(libs, blacklist, policy)
    return out


def _inside(path: Path, root: Path) -> bool:
    path, root = path.resolve(), root.resolve()
    return path == root or root in path.parents


def fixup_trees(python_trees: dict[Path, Tree], other_trees: dict[Path, Tree]) -> None:
    """auditwheel's rule: a dependency a non-extension library cannot resolve on its own is taken
    from a fully resolved tree that loads that library (its loader has already found it)."""
    resolved = [
        t
        for t in itertools.chain(python_trees.values(), other_trees.values())
        if all(lib.realpath is not None for lib in t.libraries.values())
    ]

    def reference(path: Path) -> Tree | None:
        for candidate in resolved:
            for lib in candidate.libraries.values():
                if lib.realpath is not None and lib.realpath.is_file() and path.samefile(lib.realpath):
                    return candidate
        return None

    for path, tree in list(other_trees.items()):
        if all(lib.realpath is not None for lib in tree.libraries.values()):
            continue
        ref = reference(Path(tree.realpath))
        if ref is None:
            continue
        libraries: dict[str, Dependency] = {}
        known = set(tree.libraries)
        for soname, lib in tree.libraries.items():
            if lib.realpath is None and soname in ref.libraries:
                libraries[soname] = ref.libraries[soname]
                new = set(libraries[soname].needed) - known
                while new:
                    batch = set(new)
                    known |= batch
                    for name in batch:
                        if name in ref.libraries:
                            libraries[name] = ref.libraries[name]
                            new.update(libraries[name].needed)
                    new -= known
            else:
                libraries[soname] = lib
        other_trees[path] = dataclasses.replace(tree, libraries=libraries)


def machine_policy(
    policies: Policies, architecture: str, trees: Mapping[Path, Tree], external_sonames: frozenset[str]
) -> PlatformPolicy:
    """The ISA check: an ELF file needing more than the baseline (x86-64-v3) is plain linux."""

    def extended(platform: ElfPlatform) -> str | None:
        if platform.error is not None:
            raise ValueError(platform.error)  # auditwheel stops here too
        return platform.extended

    result = policies.highest
    to_check: dict[Path, tuple[str | None, str | None]] = {}
    for path, tree in trees.items():
        to_check.setdefault(path, (None, extended(tree.platform)))
        for dep in tree.libraries.values():
            if dep.soname in external_sonames and dep.realpath is not None and dep.platform is not None:
                to_check.setdefault(dep.realpath, (dep.soname, extended(dep.platform)))
    for soname, needs in to_check.values():
        if needs is None or is_superset(architecture, needs):
            continue
        found = policies.linux
        if soname is not None:
            for policy in policies:
                if soname in policy.whitelist and policy.priority > found.priority:
                    found = policy
        if found.priority > policies.linux.priority:
            result = min(result, found, key=lambda p: p.priority)
        else:
            result = policies.linux
    return result


def _merge(into: dict[str, ExternalReference], refs: Mapping[str, ExternalReference]) -> None:
    for name, ref in refs.items():
        target = into[name]
        for lib, symbols in ref.blacklist.items():
            target.blacklist[lib] = sorted(set(target.blacklist.get(lib, [])) | set(symbols))
        target.libs.update(ref.libs)


@dataclasses.dataclass
class _Elves:
    policies: Policies
    architecture: str
    trees: dict[Path, Tree]
    external: dict[Path, dict[str, ExternalReference]]
    versioned: dict[str, set[str]]
    ucs2: bool
    pyfpe: bool


def _read_elves(
    root: Path,
    wheel_name: str,
    libs: Sequence[Library],
    exclude: frozenset[str],
    graded: Graded,
    reads: _Reads,
) -> _Elves:
    """auditwheel's ``get_wheel_elfdata`` on the extracted tree: every ELF file's libraries resolved."""
    from auditwheel.error import NonPlatformWheelError, WheelToolsError
    from auditwheel.libc import Libc
    from auditwheel.wheeltools import get_wheel_architecture, get_wheel_libc, get_wheel_platforms

    architecture: str | None
    libc: str | None
    try:
        architecture = get_wheel_architecture(wheel_name).value
    except (WheelToolsError, NonPlatformWheelError):
        architecture = None
    tagged = architecture  # the architecture the wheel's platform tag names, where it names one
    try:
        libc = str(get_wheel_libc(wheel_name))
    except WheelToolsError:
        libc = None
    policies: Policies | None = None

    def policies_for(libc_: str, arch: str) -> Policies:
        loaded = policies_of(libc_, arch, wheel_name)
        floor = claimed_floor(loaded, get_wheel_platforms(wheel_name)) if graded == "claimed" else None
        return loaded.up_to(floor) if floor is not None else loaded

    resolver = Resolver(exclude)
    python_trees: dict[Path, Tree] = {}
    other_trees: dict[Path, Tree] = {}
    external: dict[Path, dict[str, ExternalReference]] = {}
    versioned: dict[str, set[str]] = defaultdict(set)
    ucs2 = pyfpe = platform_wheel = False
    foreign: list[str] = []  # libraries and executables built for another architecture than the tag's
    purelib = [lib.path for lib in libs if lib.elf is not None and "purelib" in Path(lib.path).parts[:-1]]
    if purelib:
        raise _AbiFailure(
            "Invalid binary wheel, found the following shared library/libraries in purelib folder: "
            + ", ".join(purelib)
        )
    for lib in sorted((lib for lib in libs if lib.elf is not None), key=lambda lib: lib.path):
        path = (root / lib.path).resolve()
        tree = resolver.tree(path)
        elf_arch = tree.platform.base
        if elf_arch is None:
            continue  # unknown architecture: auditwheel ignores the file
        if architecture is None:
            architecture = elf_arch
        elif elf_arch != architecture:
            if tagged and lib.elf is not None and lib.elf.elf_type in (2, 3):  # ET_EXEC, ET_DYN
                foreign.append(f"{lib.path} is an {elf_arch} ELF file")  # auditwheel only logs "ignoring"
            continue
        if tree.libc is not None:
            if libc is None:
                libc = tree.libc
            elif libc != tree.libc:
                continue
        if policies is None and libc is not None:
            policies = policies_for(libc, architecture)
        platform_wheel = True
        for soname, versions in reads.versions(path).items():
            versioned[soname] |= versions
        is_extension, py_version = python_extension(path)
        if is_extension:
            if policies is None:
                raise _AbiFailure(f"couldn't detect libc for python extension {lib.path}")
            python_trees[path] = tree
            undefined = reads.undefined(path)
            pyfpe |= any(s.name in _PYFPE and s.type in (STT_FUNC, STT_NOTYPE) for s in undefined)
            if py_version == 2:
                ucs2 |= any("PyUnicodeUCS2_" in s.name and s.type == STT_FUNC for s in undefined)
            external[path] = external_references(policies, tree, root, reads)
        else:
            other_trees[path] = tree
    if foreign:  # pip installs the wheel only where its tag says
        tag = next((t for t in get_wheel_platforms(wheel_name) if t.endswith(f"_{tagged}")), tagged)
        more = f" ({len(foreign) - 1} more: {'; '.join(foreign[1:4])})" if len(foreign) > 1 else ""
        raise _AbiFailure(
            f"{foreign[0]}, but the wheel's platform tag {tag} is {tagged}: pip installs the wheel only on "
            f"{tagged} machines, where it cannot be loaded{more}; build it for {tagged}"
        )
    if not platform_wheel or architecture is None:
        raise NonPlatformWheelError(architecture, [])
    fixup_trees(python_trees, other_trees)
    needed = {
        soname for t in itertools.chain(python_trees.values(), other_trees.values()) for soname in t.needed
    }
    if policies is None:
        policies = policies_for(str(Libc.detect()), architecture)
    trees = dict(python_trees)
    for path, tree in other_trees.items():
        if path.name not in needed:
            trees[path] = tree
        external[path] = external_references(policies, tree, root, reads)
    return _Elves(policies, architecture, trees, external, dict(versioned), ucs2, pyfpe)


def _empty(exclude: frozenset[str], graded: Graded) -> dict[str, Any]:
    return {
        "auditwheel_version": _auditwheel_version(),
        "mode": "elf-reader",
        "pure": False,
        "error": None,
        "overall_tag": None,
        "sym_tag": None,
        "component_tags": {},
        "tags": {},
        "files": {},
        "external_libs": {},
        "excluded": tuple(sorted(exclude)),
        "policies": graded,
        "versioned_symbols": {},
    }


def analyze_abi(
    root: Path,
    wheel_name: str,
    platform_tags: Sequence[str],
    libs: Sequence[Library],
    exclude: Iterable[str] = (),
    *,
    graded: Graded = "claimed",
) -> AbiReport:
    """The tags the ELF files of an extracted wheel allow, and whether each claimed tag is honest.

    ``graded="claimed"`` grades the claimed tag and every newer policy only (an older
    policy's blacklist cannot change whether the claimed tag is honest); ``"all"`` grades
    every policy, as ``auditwheel show`` does. Never raises for a bad wheel: the report's
    ``error`` (or ``pure``) says what stopped the analysis.
    """
    from auditwheel.error import NonPlatformWheelError, WheelToolsError

    start = time.perf_counter()
    excluded = frozenset(exclude)
    base = _empty(excluded, graded)
    reads = _Reads(libs, root)
    try:
        elves = _read_elves(root, wheel_name, libs, excluded, graded, reads)
        base.update(_verdict(elves, reads, platform_tags, libs, root))
    except NonPlatformWheelError as exc:
        base.update(pure=True, error=str(exc.message))
    except _AbiFailure as exc:
        base.update(error=str(exc))
    except (ElfError, WheelToolsError, OSError, ValueError) as exc:
        base.update(error=f"{type(exc).__name__}: {exc}")
    return AbiReport(seconds=time.perf_counter() - start, **base)


def _verdict(
    elves: _Elves, reads: _Reads, platform_tags: Sequence[str], libs: Sequence[Library], root: Path
) -> dict[str, Any]:
    """auditwheel's ``analyze_wheel_abi`` policies from the ELF data, and each claimed tag graded."""
    policies = elves.policies
    refs = {p.name: ExternalReference({}, {}, p) for p in policies}
    for path in elves.trees:
        _merge(refs, elves.external[path])
    grafted: dict[Path, str] = {}  # auditwheel's get_external_libs: realpath -> soname, first wins
    for ref in refs.values():
        if ref.policy.priority:
            for soname, real in ref.libs.items():
                if real:
                    grafted.setdefault(Path(real), soname)
    external_versions = {soname: reads.external_versions(path) for path, soname in grafted.items()}
    symbol_policy, versioned = policies.versioned_symbols_policy(elves.versioned), elves.versioned
    candidates: list[tuple[PlatformPolicy, dict[str, set[str]]]] = []
    for ref in refs.values():
        if ref.policy.priority == 0:
            continue
        symbols = {k: set(v) for k, v in elves.versioned.items()}
        for soname in ref.libs:
            for k, v in external_versions.get(soname, {}).items():
                symbols.setdefault(k, set()).update(v)
        found = min(ref.policy, policies.versioned_symbols_policy(symbols), key=lambda p: p.priority)
        candidates.append((found, symbols))
    if candidates:
        symbol_policy, versioned = max(candidates, key=lambda c: c[0].priority)
    components = {
        "symbol versions": symbol_policy,
        "blacklisted symbols": max(
            (r.policy for r in refs.values() if not r.blacklist), key=_prio, default=policies.linux
        ),
        "instruction set": machine_policy(
            policies, elves.architecture, elves.trees, frozenset(grafted.values())
        ),
        "external libraries": max(
            (r.policy for r in refs.values() if not r.libs), key=_prio, default=policies.linux
        ),
        "ucs2 symbols": policies.linux if elves.ucs2 else policies.highest,
        "PyFPE_jbuf": policies.linux if elves.pyfpe else policies.highest,
    }
    overall = min(components.values(), key=_prio)
    tags: dict[str, Any] = {}
    claimed: list[PlatformPolicy] = []
    for tag in platform_tags:
        policy = policy_for_tag(policies, tag)
        if policy is None:
            tags[tag] = {"policy": None, "honest": False}
            continue
        claimed.append(policy)
        limited = sorted(name for name, p in components.items() if p.priority < policy.priority)
        honest = policy.priority <= overall.priority
        between = tag_between(tag, policy)
        if between is not None:
            # A PEP 600 tag between auditwheel's policies: glibc symbol versions are compared
            # with the tag's own glibc version, everything else with the older policy.
            ok = glibc_ok(versioned, between, policy)
            limited = [n for n in limited if n != "symbol versions"] + ([] if ok else ["symbol versions"])
            honest = not limited
        ref = refs[policy.name]
        tags[tag] = {
            "policy": policy.name,
            "honest": honest,
            "limited_by": limited,
            "libs_to_eliminate": sorted(ref.libs),
            "blacklisted_symbols": {k: sorted(v) for k, v in sorted(ref.blacklist.items())},
        }
    strictest = max(claimed, key=_prio, default=None)  # the most compatible tag the wheel claims
    files: dict[str, Any] = {}
    for lib in libs:
        if lib.elf is None:
            continue
        versions = reads.versions(root / lib.path)
        entry: dict[str, Any] = {"sym_tag": policies.versioned_symbols_policy(versions).name}
        if strictest is not None:
            entry["beyond_claimed"] = beyond(strictest, versions)
        files[lib.path] = entry
    return {
        "overall_tag": overall.name,
        "sym_tag": symbol_policy.name,
        "component_tags": {name: p.name for name, p in components.items()},
        "tags": tags,
        "files": files,
        "external_libs": {k: v for k, v in sorted(refs[policies.highest.name].libs.items())},
        "versioned_symbols": {k: tuple(sorted(v)) for k, v in sorted(versioned.items())},
    }


def _prio(policy: PlatformPolicy) -> int:
    return policy.priority


def _auditwheel_version() -> str:
    try:
        return importlib.metadata.version("auditwheel")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - auditwheel is a dependency
        return "missing"
