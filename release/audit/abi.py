"""auditwheel's own ABI analysis of the wheel, on the tree this audit already extracted.

The platform-tag check asks auditwheel (``auditwheel.wheel_abi.analyze_wheel_abi``,
the analysis behind ``auditwheel show``) which tag the wheel's ELF files allow. Run
as is, auditwheel unzips the whole wheel a second time and reads the symbol table of
every library once per manylinux policy that blacklists symbols (three times for a
library linking libc): on torch 2.14.1 that is 20 to 60 seconds here. Three changes
keep its analysis and make it fit the audit's budget:

1. **No second unzip.** The analysis runs in a child process
   (``python -m release.audit.abi analyze REQUEST``) on the tree this audit extracted,
   given only the ELF files (auditwheel skips every other file anyway).
2. **Each symbol table is read once.** ``get_undefined_symbols(path)`` is a pure
   function of the file; it is memoised instead of being repeated per policy.
3. **The expensive reads start early, in parallel.** As soon as a large library is
   extracted, two child processes (``... scan undefined|pyext PATH``) run auditwheel's
   own ``get_undefined_symbols`` and ``elf_is_python_extension`` on it. Their results
   land as files; the analysis, started as soon as the extraction is done, waits for
   a pending result when it reaches that library (and checks it against the file's
   size and mtime) instead of recomputing it, so its ldd work overlaps the reads.

Everything else (ldd, symbol versions, policies, whitelists, blacklists, the ISA
check) is auditwheel's code, unchanged. The seams are three module attributes of
the pinned auditwheel release; with any other release the analysis falls back to
plain ``analyze_wheel_abi`` on the wheel file (correct, slower) and says so
(``mode: "wheel"``). ``tests/integration/test_audit_abi.py`` checks that the result
equals ``auditwheel show --json`` on the fixture wheels.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import os
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, Literal, Self

from release.audit.elf import ElfError, read_elf
from release.audit.model import AbiReport, Member, WheelFile
from release.core import proc
from release.core.errors import StepFailed, ToolError

__all__ = ["AUDITWHEEL_PINNED", "AbiRunner", "main"]

AUDITWHEEL_PINNED = "6.8.2"
# Pre-read a library's symbol table in its own process when it is this big: auditwheel
# (pyelftools) takes about a second per MiB of .dynsym and a process about 0.15 s to start.
SCAN_MIN_DYNSYM = 256 << 10
_RELEASE_PARENT = str(Path(__file__).resolve().parents[2])


# --------------------------------------------------------------------------- child side


def _file_key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"path": str(path.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


SCAN_KINDS = ("undefined", "pyext")


def scan(kind: str, path: str) -> dict[str, Any]:
    """One of auditwheel's two symbol-table reads of an ELF file, for the analysis to reuse."""
    from auditwheel.elfutils import elf_is_python_extension, get_undefined_symbols
    from elftools.elf.elffile import ELFFile

    p = Path(path)
    if kind == "undefined":
        return {**_file_key(p), "undefined": sorted(get_undefined_symbols(p))}
    with p.open("rb") as f:
        is_ext, py_ver = elf_is_python_extension(p, ELFFile(f))
    return {**_file_key(p), "python_extension": [is_ext, py_ver]}


_SEED_TIMEOUT = 1800.0


def _wait_for(path: Path) -> Mapping[str, Any] | None:
    """A seed file written by the parent (atomically), or None when the scan failed."""
    deadline = time.monotonic() + _SEED_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return None if data.get("failed") else data


class _ExtractedTree:
    """Stands in for auditwheel's ``InWheelCtx``: the tree is already extracted.

    Like ``InWheelCtx`` it makes the tree the working directory and yields the
    files to analyse as paths relative to it.
    """

    def __init__(self, root: Path, files: Sequence[str]) -> None:
        self.path = root
        self._files = list(files)
        self._pwd = Path.cwd()

    def __enter__(self) -> Self:
        self._pwd = Path.cwd()
        os.chdir(self.path)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        os.chdir(self._pwd)

    def iter_files(self) -> Iterator[Path]:
        for name in self._files:
            yield Path(name)


def _seams_available() -> bool:
    try:
        import auditwheel.elfutils as eu
        import auditwheel.wheel_abi as wa
    except ImportError:  # pragma: no cover - auditwheel is a dependency
        return False
    if importlib.metadata.version("auditwheel") != AUDITWHEEL_PINNED:
        return False
    return all(
        callable(getattr(mod, attr, None))
        for mod, attr in (
            (wa, "InGenericPkgCtx"),
            (wa, "WheelPolicies"),
            (wa, "elf_is_python_extension"),
            (eu, "get_undefined_symbols"),
            (eu, "filter_undefined_symbols"),
        )
    )


def _install_seams(root: Path, files: Sequence[str], pending: Mapping[str, Mapping[str, str]]) -> None:
    """Point auditwheel at the extracted tree and at the pre-read symbol tables.

    ``pending`` maps a library's real path to the seed file of each scan kind; the
    file may not exist yet (the scan is still running): the analysis waits for it.
    """
    import auditwheel.elfutils as eu
    import auditwheel.wheel_abi as wa

    def seed_for(path: Path, kind: str) -> Mapping[str, Any] | None:
        full = (root / path).resolve() if not path.is_absolute() else path.resolve()
        seed_file = pending.get(str(full), {}).get(kind)
        if seed_file is None:
            return None
        seed = _wait_for(Path(seed_file))
        if seed is None or seed["path"] != str(full):
            return None
        st = full.stat()
        return seed if (seed["size"], seed["mtime_ns"]) == (st.st_size, st.st_mtime_ns) else None

    original_undefined = eu.get_undefined_symbols
    original_is_ext = wa.elf_is_python_extension

    @functools.cache
    def get_undefined_symbols(path: Path) -> set[str]:
        seed = seed_for(path, "undefined")
        if seed is not None:
            return set(seed["undefined"])
        result: set[str] = original_undefined(path)
        return result

    def elf_is_python_extension(fn: Path, elf: Any) -> tuple[bool, int | None]:  # noqa: ANN401
        seed = seed_for(fn, "pyext")
        if seed is not None:
            is_ext, py_ver = seed["python_extension"]
            return bool(is_ext), py_ver
        result: tuple[bool, int | None] = original_is_ext(fn, elf)
        return result

    eu.get_undefined_symbols = get_undefined_symbols
    wa.elf_is_python_extension = elf_is_python_extension
    # Libraries still being read go last, so auditwheel's work on the others overlaps the reads.
    ordered = sorted(files, key=lambda f: str((root / f).resolve()) in pending)
    wa.InGenericPkgCtx = lambda _wheel: _ExtractedTree(root, ordered)


def claimed_floor(policies: Any, tags: Sequence[str]) -> Any:  # noqa: ANN401 - auditwheel's types
    """The most compatible policy a wheel's platform tags claim (None: none auditwheel knows)."""
    graded = [p for p in (_policy_for_tag(policies, t) for t in tags) if p is not None]
    return max(graded, key=lambda p: p.priority, default=None)


def _restrict_policies(tags: Sequence[str]) -> None:
    """Grade the wheel against its claimed tag and the newer policies only.

    Whether a claimed tag is honest depends only on the policies from that tag on: an
    older policy's blacklist (libc symbols for manylinux2014 and older) cannot change
    the verdict, and auditwheel reads a library's whole symbol table for each policy
    that blacklists something the library links. The report then says the wheel is
    consistent with the claimed tag, not how much older it could go.
    """
    import auditwheel.wheel_abi as wa

    base = wa.WheelPolicies

    class ClaimedAndNewer(base):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401
            super().__init__(*args, **kwargs)
            floor = claimed_floor(self, tags)
            if floor is not None:
                kept = [p for p in self if p.priority == 0 or p.priority <= floor.priority]
                self._policies: list[Any] = kept

    wa.WheelPolicies = ClaimedAndNewer


_PEP600 = re.compile(r"^(?P<kind>manylinux|musllinux)_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>.+)$")


def _policy_for_tag(policies: Any, tag: str) -> Any:  # noqa: ANN401 - auditwheel's types
    """The auditwheel policy a platform tag is held to.

    A tag auditwheel has a policy for (or an alias: ``manylinux2014``) is that policy. A
    PEP 600 tag between auditwheel's policies (``manylinux_2_25``) is held to the newest
    policy not newer than it (``manylinux_2_24``): the tag promises at least that much.
    None for a tag auditwheel cannot grade (another OS or architecture).
    """
    try:
        return policies.get_policy_by_name(tag)
    except LookupError:
        pass
    m = _PEP600.match(tag)
    if m is None:
        return None
    want = (int(m["major"]), int(m["minor"]))
    best = None
    for policy in policies:
        pm = _PEP600.match(policy.name)
        if pm is None or pm["kind"] != m["kind"] or pm["arch"] != m["arch"]:
            continue
        if (int(pm["major"]), int(pm["minor"])) <= want and (best is None or policy.priority < best.priority):
            best = policy
    return best


def _between_policies(tag: str, policy: Any) -> tuple[int, int] | None:  # noqa: ANN401
    """The tag's glibc version when the tag is graded by an older policy, else None."""
    m = _PEP600.match(tag)
    if m is None or m["kind"] != "manylinux" or policy.name == tag or tag in policy.aliases:
        return None
    return int(m["major"]), int(m["minor"])


def _glibc_ok(versioned: Mapping[str, set[str]], glibc: tuple[int, int], policy: Any) -> bool:  # noqa: ANN401
    for symbols in versioned.values():
        for symbol in symbols:
            name, _, version = symbol.partition("_")
            if name == "GLIBC":
                parts = tuple(int(p) for p in version.split(".") if p.isdigit())
                if parts[:2] > glibc:
                    return False
            elif name in policy.symbol_versions and version not in policy.symbol_versions[name]:
                return False
    return True


def _beyond(policy: Any, versions: Mapping[str, set[str]]) -> list[str]:  # noqa: ANN401
    """Symbol versions a policy does not provide (the explanation, not the verdict)."""
    out: set[str] = set()
    for symbols in versions.values():
        for symbol in symbols:
            name = symbol.partition("_")[0]
            allowed = policy.symbol_versions.get(name)
            if allowed is not None and symbol.partition("_")[2] not in allowed:
                out.add(symbol)
    return sorted(out, key=_version_key)


def _version_key(symbol: str) -> tuple[str, tuple[int, ...]]:
    name, _, version = symbol.partition("_")
    parts = tuple(int(p) for p in version.split(".") if p.isdigit())
    return name, parts


def analyze(request: Mapping[str, Any]) -> dict[str, Any]:
    """Run auditwheel's analysis as the request says; return a JSON-able report."""
    from auditwheel.elfutils import elf_find_versioned_symbols
    from auditwheel.error import NonPlatformWheelError, WheelToolsError
    from auditwheel.wheel_abi import analyze_wheel_abi
    from auditwheel.wheeltools import get_wheel_architecture, get_wheel_libc
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    start = time.perf_counter()
    wheel = Path(request["wheel"])
    root = Path(request["root"])
    files: list[str] = list(request["files"])
    exclude = frozenset(request["exclude"])
    mode = "extracted-tree" if _seams_available() and not request.get("plain") else "wheel"
    graded = "all"
    if mode == "extracted-tree":
        _install_seams(root, files, request.get("pending", {}))
        if request.get("policies") == "claimed":
            _restrict_policies(request["platform_tags"])
            graded = "claimed"
    base: dict[str, Any] = {
        "auditwheel_version": importlib.metadata.version("auditwheel"),
        "mode": mode,
        "pure": False,
        "error": None,
        "overall_tag": None,
        "sym_tag": None,
        "component_tags": {},
        "tags": {},
        "files": {},
        "external_libs": {},
        "excluded": sorted(exclude),
        "policies": graded,
    }
    try:
        arch = get_wheel_architecture(wheel.name)
    except (WheelToolsError, NonPlatformWheelError):
        arch = None
    try:
        libc = get_wheel_libc(wheel.name)
    except WheelToolsError:
        libc = None
    try:
        info = analyze_wheel_abi(libc, arch, wheel, exclude, disable_isa_ext_check=False, allow_graft=False)
    except NonPlatformWheelError as exc:
        base.update(pure=True, error=str(exc.message))
        base["seconds"] = time.perf_counter() - start
        return base
    except (WheelToolsError, RuntimeError, ValueError, ELFError, OSError) as exc:
        base.update(error=f"{type(exc).__name__}: {exc}")
        base["seconds"] = time.perf_counter() - start
        return base

    policies = info.policies
    overall = info.overall_policy
    components = {
        "symbol versions": info.sym_policy,
        "blacklisted symbols": info.blacklist_policy,
        "instruction set": info.machine_policy,
        "external libraries": info.ref_policy,
        "ucs2 symbols": info.ucs_policy,
        "PyFPE_jbuf": info.pyfpe_policy,
    }
    tags: dict[str, Any] = {}
    claimed: list[Any] = []
    for tag in request["platform_tags"]:
        policy = _policy_for_tag(policies, tag)
        if policy is None:
            tags[tag] = {"policy": None, "honest": False}
            continue
        claimed.append(policy)
        ext = info.external_refs[policy.name]
        limited = sorted(name for name, p in components.items() if p.priority < policy.priority)
        honest = policy.priority <= overall.priority
        between = _between_policies(tag, policy)
        if between is not None:
            # A PEP 600 tag between auditwheel's policies: glibc symbol versions are compared
            # with the tag's own glibc version, everything else with the older policy.
            glibc_ok = _glibc_ok(info.versioned_symbols, between, policy)
            limited = [n for n in limited if n != "symbol versions"] + (
                [] if glibc_ok else ["symbol versions"]
            )
            honest = not limited
        tags[tag] = {
            "policy": policy.name,
            "honest": honest,
            "limited_by": limited,
            "libs_to_eliminate": sorted(ext.libs),
            "blacklisted_symbols": {k: sorted(v) for k, v in sorted(ext.blacklist.items())},
        }
    strictest = max(claimed, default=None)  # the most compatible tag the wheel claims
    per_file: dict[str, Any] = {}
    for name in files:
        path = root / name
        versions: dict[str, set[str]] = defaultdict(set)
        try:
            with path.open("rb") as f:
                for lib, version in elf_find_versioned_symbols(ELFFile(f)):
                    versions[lib].add(version)
        except (ELFError, OSError):
            continue
        entry: dict[str, Any] = {"sym_tag": policies.versioned_symbols_policy(versions).name}
        if strictest is not None:
            entry["beyond_claimed"] = _beyond(strictest, versions)
        per_file[name] = entry
    base.update(
        overall_tag=overall.name,
        sym_tag=info.sym_policy.name,
        component_tags={name: p.name for name, p in components.items()},
        tags=tags,
        files=per_file,
        external_libs={
            k: (str(v) if v else None)
            for k, v in sorted(info.external_refs[policies.highest.name].libs.items())
        },
    )
    base["seconds"] = time.perf_counter() - start
    return base


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m release.audit.abi scan KIND PATH`` | ``... analyze REQUEST.json``: JSON on stdout."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) == 3 and args[0] == "scan" and args[1] in SCAN_KINDS:
        result = scan(args[1], args[2])
    elif len(args) == 2 and args[0] == "analyze":
        result = analyze(json.loads(Path(args[1]).read_text(encoding="utf-8")))
    else:
        print(
            f"usage: python -m release.audit.abi scan {{{','.join(SCAN_KINDS)}}} ELF_PATH | analyze REQUEST_JSON",
            file=sys.stderr,
        )
        return 2
    json.dump(result, sys.stdout, sort_keys=True)
    return 0


# --------------------------------------------------------------------------- parent side


def _report(data: Mapping[str, Any]) -> AbiReport:
    return AbiReport(
        auditwheel_version=data["auditwheel_version"],
        mode=data["mode"],
        pure=data["pure"],
        error=data["error"],
        overall_tag=data["overall_tag"],
        sym_tag=data["sym_tag"],
        component_tags=data["component_tags"],
        tags=data["tags"],
        files=data["files"],
        external_libs=data["external_libs"],
        excluded=tuple(data["excluded"]),
        seconds=float(data.get("seconds", 0.0)),
        policies=str(data.get("policies", "all")),
    )


class AbiRunner:
    """Pre-reads big libraries as they are extracted; runs the analysis in a child.

    ``on_extracted`` and ``on_libraries_done`` are :func:`release.audit.wheel.open_wheel`
    callbacks: the first notes every readable ELF file and starts the reads of big
    ones, the second starts the analysis of the ELF files as soon as the libraries
    are out (the rest of the wheel is still being read). :meth:`analyze` returns that
    analysis when its file list is still right, or starts one. Use as a context
    manager (or call :meth:`close`): it waits for every child it started, and marks
    every scan it did not run as failed, so the analysis never waits in vain.
    """

    def __init__(
        self,
        scratch: Path,
        *,
        wheel: Path | None = None,
        exclude: Sequence[str] = (),
        policies: Literal["claimed", "all"] = "claimed",
        jobs: int | None = None,
        min_dynsym: int = SCAN_MIN_DYNSYM,
    ) -> None:
        self.scratch = scratch
        self.exclude = tuple(sorted(exclude))
        self.policies = policies
        # sonames whose symbols a graded policy blacklists: only libraries linking one of
        # them get their undefined symbols read (None: not known, read them all)
        self._blacklisted = _blacklisted_sonames(wheel.name, policies) if wheel is not None else None
        self._elf: set[str] = set()
        self._early: tuple[tuple[str, ...], Future[AbiReport]] | None = None
        self.seeds = scratch / "seeds"
        self.seeds.mkdir(parents=True, exist_ok=True)
        self.min_dynsym = min_dynsym
        workers = jobs or 2 * max(2, os.cpu_count() or 2)
        self._scan_pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="abi-scan")
        self._analysis_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="abi")
        self._pending: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Start no new scan; mark the ones never run as failed; wait for every child."""
        self._scan_pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            pending = [Path(f) for kinds in self._pending.values() for f in kinds.values()]
        for seed_file in pending:
            _mark_failed_if_missing(seed_file)
        self._analysis_pool.shutdown(wait=True, cancel_futures=True)

    @staticmethod
    def _env() -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_RELEASE_PARENT, env.get("PYTHONPATH", "")) if p)
        return env

    def _scan(self, kind: str, path: Path, seed_file: Path) -> None:
        data: dict[str, Any] = {"failed": True}
        try:
            result = proc.run(
                [sys.executable, "-m", "release.audit.abi", "scan", kind, path], env=self._env()
            )
            data = json.loads(result.stdout)
        except (StepFailed, ToolError, json.JSONDecodeError):
            pass  # the analysis reads the file itself and reports what is wrong with it
        finally:
            _write_seed(seed_file, data)

    def on_extracted(self, member: Member) -> None:
        if not (member.is_elf and member.path is not None):
            return
        try:
            info = read_elf(member.path)
        except ElfError:
            return  # not readable as ELF: the inspection reports it; auditwheel never sees it
        with self._lock:
            self._elf.add(member.name)
        dynsym = info.section(".dynsym")
        if dynsym is None or dynsym.size < self.min_dynsym:
            return
        wanted = ["pyext"]
        if self._blacklisted is None or self._blacklisted & set(info.needed):
            wanted.append("undefined")
        with self._lock:
            index = len(self._pending)
            kinds = {kind: str(self.seeds / f"{index}-{kind}.json") for kind in wanted}
            self._pending[str(member.path.resolve())] = kinds
        for kind, seed_file in kinds.items():
            future = self._scan_pool.submit(self._scan, kind, member.path, Path(seed_file))
            # Whatever happens to the scan (an error, a cancellation), the analysis gets an answer.
            future.add_done_callback(functools.partial(_on_scan_done, Path(seed_file)))

    def _analyze(self, request: dict[str, Any]) -> AbiReport:
        with self._lock:
            request["pending"] = {path: dict(kinds) for path, kinds in self._pending.items()}
        request_file = self.scratch / "abi-request.json"
        request_file.write_text(json.dumps(request), encoding="utf-8")
        try:
            result = proc.run(
                [sys.executable, "-m", "release.audit.abi", "analyze", request_file], env=self._env()
            )
            return _report(json.loads(result.stdout))
        except (StepFailed, json.JSONDecodeError) as exc:
            return AbiReport(
                auditwheel_version=_auditwheel_version(),
                mode="failed",
                pure=False,
                error=f"auditwheel's analysis crashed: {exc}",
                overall_tag=None,
                sym_tag=None,
                component_tags={},
                tags={},
                files={},
                external_libs={},
                excluded=tuple(request["exclude"]),
                seconds=0.0,
            )

    def on_libraries_done(self, root: Path, wheel: Path) -> None:
        """Start the analysis of the ELF files extracted so far (called once the libraries are out)."""
        from packaging.utils import parse_wheel_filename

        with self._lock:
            files = tuple(sorted(self._elf))
        if not files:
            return
        tags = sorted({t.platform for t in parse_wheel_filename(wheel.name)[3]})
        request = self._request(wheel, root, files, self.exclude, tags, plain=False)
        request["policies"] = self.policies
        self._early = (files, self._analysis_pool.submit(self._analyze, request))

    @staticmethod
    def _request(
        wheel: Path,
        root: Path,
        files: Sequence[str],
        exclude: Sequence[str],
        tags: Sequence[str],
        *,
        plain: bool,
    ) -> dict[str, Any]:
        return {
            "wheel": str(wheel.resolve()),
            "root": str(root),
            "files": list(files),
            "exclude": sorted(exclude),
            "platform_tags": list(tags),
            "plain": plain,
        }

    def analyze(
        self,
        wheel: WheelFile,
        files: Sequence[str],
        exclude: Sequence[str] | None = None,
        *,
        plain: bool = False,
    ) -> Future[AbiReport]:
        """The analysis of ``files`` (wheel-relative ELF paths): the early one when it covered
        exactly these files with the same exclusions, else a new one (scans may still run).

        ``plain``: run auditwheel exactly as ``auditwheel show`` does (it unzips the wheel
        itself), to compare with.
        """
        exclude = self.exclude if exclude is None else tuple(sorted(exclude))
        if (
            self._early is not None
            and not plain
            and self._early[0] == tuple(sorted(files))
            and exclude == self.exclude
        ):
            return self._early[1]
        request = self._request(wheel.path, wheel.root, files, exclude, wheel.platform_tags, plain=plain)
        request["policies"] = self.policies
        return self._analysis_pool.submit(self._analyze, request)


def _blacklisted_sonames(wheel_name: str, policies: str) -> frozenset[str] | None:
    """Sonames a graded auditwheel policy blacklists symbols of (None: cannot tell)."""
    from auditwheel.error import NonPlatformWheelError, WheelToolsError
    from auditwheel.policy import WheelPolicies
    from auditwheel.wheeltools import get_wheel_architecture, get_wheel_libc, get_wheel_platforms

    try:
        all_policies = WheelPolicies(libc=get_wheel_libc(wheel_name), arch=get_wheel_architecture(wheel_name))
        graded = list(all_policies)
        if policies == "claimed":
            floor = claimed_floor(all_policies, get_wheel_platforms(wheel_name))
            if floor is None:
                return None
            graded = [p for p in graded if p.priority <= floor.priority]
    except (WheelToolsError, NonPlatformWheelError, ValueError, LookupError):
        return None
    return frozenset(soname for p in graded for soname in p.blacklist)


def _on_scan_done(path: Path, _future: Future[None]) -> None:
    _mark_failed_if_missing(path)


def _mark_failed_if_missing(path: Path) -> None:
    if not path.exists():
        _write_seed(path, {"failed": True})


def _write_seed(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    tmp.replace(path)


def _auditwheel_version() -> str:
    try:
        return importlib.metadata.version("auditwheel")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover
        return "missing"


if __name__ == "__main__":
    sys.exit(main())
