"""An arm64 sysroot with CPython, unpacked from Debian's ``.deb`` files into the wheelwright cache,
for qemu-user to run the interpreter and everything it starts (``QEMU_LD_PREFIX=<root>``).

``<cache>/emulate/python3.11-aarch64-bookworm-<key>/`` holds ``root/`` (the unpacked packages,
``/usr`` merged, every symlink relative, the standard library compiled) and ``manifest.json``
(the recipe, the mirror, each package's version, size and sha256, the interpreter's version and
the time each step took). ``<key>`` is the recipe's hash (:meth:`Recipe.key`): another package
set or layout is another folder. Made once, under a lock, in a temporary folder renamed into
place (:func:`release.core.locks.install_once`); nothing is written outside the cache: apt runs
with a private configuration (:mod:`release.emulate.apt`) and the mirror this machine's apt
sources name.

qemu-user looks up every absolute path a guest program opens in the prefix first: the root must
hold only what a system's ``/usr``, ``/etc`` and the merged ``/bin``, ``/sbin`` and ``/lib`` hold,
never a ``/tmp`` or ``/home`` that would hide the host's (:func:`layout_problem`).

:func:`missing_libraries`, :func:`layout_problem` and :func:`manifest_problem` are pure;
:func:`ensure_sysroot` makes the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from release.binary.elf import read_elf
from release.binary.elf_core import ElfError, is_elf
from release.core import log as _log
from release.core.errors import StepFailed, ToolError
from release.core.locks import install_once
from release.core.machine import find_python as find_host_python
from release.core.proc import run
from release.emulate.apt import AptSource, PrivateApt, find_debian_mirror
from release.emulate.recipes import LAYOUT_VERSION, Recipe

FOLDER = "emulate"  # under the wheelwright cache
MANIFEST = "manifest.json"
QEMU_PREFIX_VAR = "QEMU_LD_PREFIX"
# qemu-user's CPU: every feature ("max", so code built for newer Arm cores runs), with the cheap
# implementation-defined pointer authentication instead of the architected cipher: Debian's
# arm64 packages are built with branch protection (a PAC instruction pair in every function),
# and emulating the cipher made pip --version 8.1 s under Python 3.13; with this, 2.6 s.
QEMU_CPU_VAR = "QEMU_CPU"
QEMU_CPU = "max,pauth-impdef=on"
# top-level entries a root may have: a system's own folders, nothing a host path could fall into
ROOT_ENTRIES = frozenset({"usr", "etc", "bin", "sbin", "lib", "var"})
MERGED = ("bin", "sbin", "lib")  # /X -> usr/X, as a merged-/usr Debian has them
PRUNED = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/lintian")
SKIP_COMPILE = r"/(test|lib2to3/tests|idlelib|tkinter|turtledemo)/"  # not compiled: never imported by a wheel
EMULATED_TIMEOUT_S = 900.0  # compiling the standard library under emulation: about 70 s here
# what the interpreter check imports: every extension module a wheel's install or import may need
CHECK_IMPORTS = (
    "ssl",
    "ctypes",
    "hashlib",
    "zlib",
    "bz2",
    "lzma",
    "sqlite3",
    "json",
    "ensurepip",
    "venv",
    "pyexpat",
    "_decimal",
    "uuid",
)

Log = Callable[[str], None]


def info(message: str) -> None:
    _log.info(f"==> sysroot: {message}")


@dataclass(frozen=True)
class Sysroot:
    """A made sysroot: the prefix for qemu-user and the interpreter in it."""

    folder: Path
    recipe: Recipe
    manifest: Mapping[str, Any]

    @property
    def root(self) -> Path:
        return self.folder / "root"

    @property
    def interpreter(self) -> Path:
        return self.root / "usr" / "bin" / f"python{self.recipe.python}"

    @property
    def version(self) -> str:
        return str(self.manifest.get("python_version", self.recipe.python))

    def env(self) -> tuple[tuple[str, str], ...]:
        """The variables every process of this root needs."""
        return emulation_env(self.root)

    def describe(self) -> str:
        return f"Debian {self.recipe.suite} {self.recipe.debian_arch} sysroot {self.root}"


def emulation_env(root: Path) -> tuple[tuple[str, str], ...]:
    """What qemu-user reads from the environment to run programs of ``root`` (pure)."""
    return ((QEMU_PREFIX_VAR, str(root)), (QEMU_CPU_VAR, QEMU_CPU))


def sysroot_folder(cache_dir: Path, recipe: Recipe) -> Path:
    """Where ``recipe``'s sysroot lives in the cache (pure)."""
    return cache_dir / FOLDER / recipe.name


# --------------------------------------------------------------------------- pure checks


def missing_libraries(needs: Mapping[str, Iterable[str]], present: Iterable[str]) -> dict[str, list[str]]:
    """Which of each file's ``DT_NEEDED`` sonames no file of the root provides (pure)."""
    have = set(present)
    out: dict[str, list[str]] = {}
    for path, names in sorted(needs.items()):
        lacking = sorted(n for n in names if n not in have)
        if lacking:
            out[path] = lacking
    return out


def layout_problem(entries: Iterable[str]) -> str | None:
    """Why a root whose top level holds ``entries`` would hide host paths from qemu-user (pure)."""
    extra = sorted(set(entries) - ROOT_ENTRIES)
    if extra:
        return (
            f"the unpacked packages put {', '.join('/' + e for e in extra)} at the top of the root; qemu-user "
            f"would read those for the host's own (only {', '.join(sorted(ROOT_ENTRIES))} may be there)"
        )
    return None


def manifest_problem(manifest: object, recipe: Recipe) -> str | None:
    """Why a sysroot's manifest is not this recipe's finished one (pure); None when it is."""
    if not isinstance(manifest, dict):
        return "its manifest is not a JSON object"
    if manifest.get("layout") != LAYOUT_VERSION:
        return f"layout {manifest.get('layout')!r} is not the current {LAYOUT_VERSION}"
    if manifest.get("key") != recipe.key() or manifest.get("recipe") != recipe.to_json():
        return "it was made from another recipe"
    if not isinstance(manifest.get("python_version"), str):
        return "its manifest names no interpreter version"
    return None


# --------------------------------------------------------------------------- making it


def _read(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _ready(folder: Path, recipe: Recipe) -> bool:
    manifest = _read(folder)
    return (
        manifest is not None
        and manifest_problem(manifest, recipe) is None
        and (folder / "root" / "usr" / "bin" / f"python{recipe.python}").is_file()
    )


def _merge_into(src: Path, dest: Path) -> None:
    """Move ``src``'s entries into the folder ``dest`` (merging sub-folders), then remove ``src``."""
    dest.mkdir(parents=True, exist_ok=True)
    for entry in sorted(src.iterdir()):
        target = dest / entry.name
        if entry.is_dir() and not entry.is_symlink() and target.is_dir() and not target.is_symlink():
            _merge_into(entry, target)
        elif target.exists() or target.is_symlink():
            if entry.is_symlink() and os.path.realpath(entry) == os.path.realpath(target):
                entry.unlink()
            else:
                raise StepFailed(f"merging /usr: {entry} and {target} are both in the packages")
        else:
            entry.rename(target)
    src.rmdir()


def _merge_usr(root: Path) -> None:
    """``/bin``, ``/sbin`` and ``/lib`` as relative links into ``usr`` (where ``/lib/ld-linux-*``
    is looked up on a merged-/usr system such as trixie, whose packages ship only ``/usr``)."""
    for name in MERGED:
        top, under = root / name, root / "usr" / name
        if top.is_dir() and not top.is_symlink():
            _merge_into(top, under)
        under.mkdir(parents=True, exist_ok=True)
        if not top.is_symlink():
            top.symlink_to(os.path.join("usr", name))


def _relative_links(root: Path) -> int:
    """Every absolute symlink made relative to ``root`` (qemu-user would follow it on the host)."""
    changed = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            if not path.is_symlink():
                continue
            target = path.readlink()
            if target.is_absolute():
                inside = root / str(target).lstrip("/")
                path.unlink()
                path.symlink_to(os.path.relpath(inside, path.parent))
                changed += 1
    return changed


def _library_needs(root: Path, recipe: Recipe) -> tuple[dict[str, tuple[str, ...]], set[str]]:
    """DT_NEEDED of the interpreter, its extension modules and the root's libraries; the sonames present."""
    triplet = recipe.triplet
    lib_dirs = [root / "usr" / "lib" / triplet, root / "usr" / "lib"]
    present = {p.name for d in lib_dirs if d.is_dir() for p in d.iterdir()}
    files = [root / "usr" / "bin" / f"python{recipe.python}"]
    files += sorted((root / "usr" / "lib" / f"python{recipe.python}" / "lib-dynload").glob("*.so"))
    files += sorted(p for p in (root / "usr" / "lib" / triplet).glob("*.so*") if not p.is_symlink())
    needs: dict[str, tuple[str, ...]] = {}
    for path in files:
        try:
            if path.is_file() and is_elf(path):
                needs[str(path.relative_to(root))] = read_elf(path).needed
        except ElfError as exc:
            raise StepFailed(f"{path}: cannot read its ELF headers: {exc}") from None
    return needs, present


def _emulated(sysroot_root: Path, argv: list[str], *, step: str, timeout: float = EMULATED_TIMEOUT_S) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env.update(emulation_env(sysroot_root))
    env["LC_ALL"] = "C.UTF-8"
    return run(argv, env=env, cwd=sysroot_root, timeout=timeout, step=step).stdout


_VERSION_CHECK = (
    "import json, sys, sysconfig, {imports}; print(json.dumps({{'version': '%d.%d.%d' % sys.version_info[:3], "
    "'machine': __import__('platform').machine(), 'exe': sys.executable, "
    "'magic': __import__('importlib.util').util.MAGIC_NUMBER.hex(), "
    "'gil_disabled': bool(sysconfig.get_config_var('Py_GIL_DISABLED'))}}))"
)


def _check_interpreter(root: Path, interpreter: Path, recipe: Recipe) -> dict[str, Any]:
    """Run the interpreter under emulation: its version, CPU and bytecode magic, and that its
    extension modules import (:data:`CHECK_IMPORTS`)."""
    out = _emulated(
        root,
        [str(interpreter), "-c", _VERSION_CHECK.format(imports=", ".join(CHECK_IMPORTS))],
        step=f"checking {interpreter} under emulation",
        timeout=300,
    )
    try:
        said: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise StepFailed(f"{interpreter} printed no version under emulation: {out[-300:]!r}") from None
    version = str(said.get("version", ""))
    if (
        said.get("machine") != recipe.arch
        or said.get("gil_disabled")
        or not version.startswith(recipe.python + ".")
    ):
        raise StepFailed(f"{interpreter} is {said}, not CPython {recipe.python} on {recipe.arch}")
    return said


def _compile_stdlib(root: Path, final_root: Path, recipe: Recipe, magic: str, log: Log) -> str:
    """Compile the standard library to bytecode once (its .deb files ship none, and an emulated
    interpreter compiling every module it imports, every run, costs seconds): with this machine's
    CPython of the same version when there is one (bytecode does not depend on the CPU; its magic
    number is checked), else under emulation (minutes). Paths in the bytecode name ``final_root``.
    Returns which interpreter compiled it."""
    stdlib = root / "usr" / "lib" / f"python{recipe.python}"
    args = [
        "-m",
        "compileall",
        "-q",
        "-j",
        "0",
        "-s",
        str(root),
        "-p",
        str(final_root),
        "-x",
        SKIP_COMPILE,
        str(stdlib),
    ]
    try:
        host = find_host_python(recipe.python, env=os.environ)
    except ToolError:
        host = None
    if host is not None:
        log(f"compiling the standard library with {host.describe()}")
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        run([str(host.path), *args], env=env, timeout=EMULATED_TIMEOUT_S, step=f"compiling {stdlib}")
        sample = stdlib / "__pycache__" / f"os.cpython-{recipe.python.replace('.', '')}.pyc"
        if sample.is_file() and sample.read_bytes()[:4].hex() == magic:
            return host.describe()
        log(
            f"{sample.name} has another bytecode magic than the emulated interpreter's: compiling under emulation"
        )
    interpreter = root / "usr" / "bin" / f"python{recipe.python}"
    log(f"compiling the standard library under emulation (once; minutes): {interpreter}")
    _emulated(root, [str(interpreter), *args], step=f"compiling {stdlib} under emulation")
    return f"the emulated {interpreter.name}"


def _fill(tmp: Path, recipe: Recipe, final: Path, source: AptSource, log: Log) -> None:
    started = time.monotonic()
    for tool in ("apt-get", "apt-config", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ToolError(
                f"'{tool}' was not found on PATH (it comes with apt and dpkg): it makes the sysroot"
            )
    apt = PrivateApt(
        tmp / "apt", source, suite=recipe.suite, arch=recipe.debian_arch, components=("main",), log=log
    )
    log(f"making {recipe.name} ({recipe.debian_arch}) from the Debian mirror named by {source.origin}")
    apt.update()
    debs = apt.resolve(recipe.packages)
    total = sum(d.size for d in debs)
    log(f"downloading {len(debs)} packages, {total / 1e6:.1f} MB")
    t0 = time.monotonic()
    apt.download(recipe.packages)
    download_s = time.monotonic() - t0
    root = tmp / "root"
    root.mkdir()
    log(f"unpacking {len(debs)} packages into {final / 'root'}")
    t0 = time.monotonic()
    for deb in debs:
        path = apt.archives / deb.filename
        if not path.is_file() or path.stat().st_size != deb.size:
            raise StepFailed(f"apt-get download left no complete {deb.filename}")
        run(["dpkg-deb", "-x", path, root], timeout=300, step=f"unpacking {deb.filename}")
    shutil.rmtree(tmp / "apt")
    for rel in PRUNED:
        shutil.rmtree(root / rel, ignore_errors=True)
    _merge_usr(root)
    relinked = _relative_links(root)
    problem = layout_problem(p.name for p in root.iterdir())
    if problem:
        raise StepFailed(f"{recipe.name}: {problem}")
    needs, present = _library_needs(root, recipe)
    missing = missing_libraries(needs, present)
    if missing:
        shown = "; ".join(f"{path} needs {', '.join(names)}" for path, names in list(missing.items())[:8])
        raise StepFailed(
            f"{recipe.name}: the package set lacks libraries: {shown}; add the packages that ship them "
            f"to [python.{recipe.python!r}] in release/emulate/sysroots.toml"
        )
    unpack_s = time.monotonic() - t0
    interpreter = root / "usr" / "bin" / f"python{recipe.python}"
    t0 = time.monotonic()
    said = _check_interpreter(root, interpreter, recipe)
    compiled_by = _compile_stdlib(root, final / "root", recipe, said["magic"], log)
    compile_s = time.monotonic() - t0
    manifest = {
        "layout": LAYOUT_VERSION,
        "key": recipe.key(),
        "recipe": recipe.to_json(),
        "python_version": said["version"],
        "stdlib_compiled_by": compiled_by,
        "mirror": source.uri,
        "mirror_from": source.origin,
        "packages": [
            {"name": d.name, "version": d.version, "file": d.filename, "size": d.size, "sha256": d.sha256}
            for d in debs
        ],
        "download_bytes": total,
        "relinked_absolute_symlinks": relinked,
        "seconds": {
            "download": round(download_s, 2),
            "unpack_and_check": round(unpack_s, 2),
            "check_and_compile": round(compile_s, 2),
            "total": round(time.monotonic() - started, 2),
        },
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def ensure_sysroot(
    recipe: Recipe,
    cache_dir: Path,
    *,
    source: AptSource | None = None,
    log: Log = info,
) -> Sysroot:
    """``recipe``'s sysroot in the cache, made first when it is not there (or not whole).

    ``source``: the Debian archive (default: the one this machine's apt sources name). Safe
    from several processes at once; a failure leaves the cache as it was."""
    folder = sysroot_folder(cache_dir, recipe)
    if not _ready(folder, recipe):

        def fill(tmp: Path) -> None:
            _fill(tmp, recipe, folder, source or find_debian_mirror(), log)

        started = time.monotonic()
        made = install_once(
            folder,
            ready=lambda f: _ready(f, recipe),
            fill=fill,
            holder=f"making the sysroot {recipe.name}",
            waiting=lambda holder: log(f"waiting for {holder or 'another process'} to make {folder}"),
        )
        if made:
            log(f"{recipe.name} ready in {time.monotonic() - started:.1f} s: {folder}")
    manifest = _read(folder)
    if manifest is None:  # pragma: no cover - install_once made it or raised
        raise StepFailed(f"{folder}: no manifest after making it")
    return Sysroot(folder, recipe, manifest)
