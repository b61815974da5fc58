"""A GPU dependency's device code, read from its wheel for a row with the audit's own reader.

:func:`find_wheel` picks the dependency's wheel for a row (its CPU, Python and CUDA variant) among the
wheels of the given folders (``--wheelhouse``, wheelwright's ``dependency-wheels`` cache, which
:func:`download` fills with ``pip download --no-deps`` from the dependency's index). :func:`read` streams
only the members named like shared libraries that start as ELF files to a temporary folder, one at a
time, and reads each with :func:`release.audit.reading.inspector.inspect_member` (fatbin headers only:
libtorch_cuda.so's 475 fatbinaries in 0.4 s); the rest of the wheel is never inflated.
"""

from __future__ import annotations

import shutil
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import Version

from release.audit.model import Library, Member, is_library_name
from release.audit.reading.inspector import inspect_member
from release.binary.elf import ElfError, read_elf
from release.binary.fatbin import FatbinError, has_device_code
from release.core.errors import InputError
from release.core.hashing import sha256_file
from release.core.machine import default_cache_dir
from release.core.pip import pip_download
from release.core.sizes import GIB

__all__ = ["DependencyCode", "Wanted", "cache_folder", "download", "find_wheel", "read"]

ELF_MAGIC = b"\x7fELF"
MEMBER_CAP = 4 * GIB  # one library inflated: torch's biggest is 0.5 GB
DOWNLOAD_TIMEOUT_S = 1800.0


@dataclass(frozen=True)
class Wanted:
    """What a row needs of a dependency's wheel: the package, the row's CPU, Python and CUDA variant."""

    package: str  # "torch"
    cpu: str  # the row's platform
    python: str  # "3.11"
    variant: str  # "cu130"
    manylinux: str = "manylinux_2_28"  # for pip download's --platform

    def fits(self, filename: str) -> bool:
        """A wheel of the package for this CPU and Python, of this CUDA variant or with no local label
        (a default-index build); a ``+cpu`` or another ``+cuNNN`` build does not fit."""
        try:
            name, version, _build, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return False
        if name != canonicalize_name(self.package):
            return False
        if version.local is not None and version.local != self.variant:
            return False
        cp = "cp" + self.python.replace(".", "")
        return any(
            (t.platform == self.cpu or t.platform.endswith("_" + self.cpu))
            and (t.interpreter == cp or t.interpreter.startswith("py3") or (t.abi == "abi3" and _cp_at_most(t.interpreter, cp)))
            for t in tags
        )  # fmt: skip


def _cp_at_most(interpreter: str, cp: str) -> bool:
    return interpreter.startswith("cp") and interpreter[2:].isdigit() and int(interpreter[2:]) <= int(cp[2:])


@dataclass(frozen=True)
class DependencyCode:
    """The device code of one dependency wheel: its libraries that carry any, as the audit reads them."""

    package: str
    wheel: str  # file name
    libraries: tuple[Library, ...]  # those with device code (readable or not)
    seconds: float = 0.0
    sha256: str = ""  # of the wheel file: what a "take" row's build record names

    @property
    def source(self) -> str:
        """The wheel read, as a build record names where a taken list came from."""
        return f"{self.package} {self.version} ({self.wheel} sha256 {self.sha256})"

    @property
    def version(self) -> str:
        return str(parse_wheel_filename(self.wheel)[1])


def cache_folder(env: Mapping[str, str]) -> Path:
    """Where :func:`download` puts dependency wheels: ``<wheelwright cache>/dependency-wheels``."""
    return default_cache_dir(env) / "dependency-wheels"


def find_wheel(wanted: Wanted, folders: Sequence[Path]) -> Path | None:
    """The newest wheel of ``folders`` that fits ``wanted``; None when none does."""
    found: list[tuple[Version, Path]] = []
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.glob("*.whl"):
            if path.is_file() and wanted.fits(path.name):
                found.append((parse_wheel_filename(path.name)[1], path))
    return max(found, key=lambda f: (f[0], f[1].name))[1] if found else None


def download(wanted: Wanted, index: str, dest: Path, *, env: Mapping[str, str]) -> Path:
    """``pip download --no-deps`` of the dependency for the row, from its index ("pypi": pip's default
    index, with this machine's pip configuration), into ``dest``; the wheel, or InputError saying why."""
    dest.mkdir(parents=True, exist_ok=True)
    result = pip_download(
        [wanted.package],
        dest,
        env=env,
        platforms=(f"{wanted.manylinux}_{wanted.cpu}",),
        python_version=wanted.python,
        index_url=None if index == "pypi" else index,
        machine_config=True,
        check=False,
        timeout=DOWNLOAD_TIMEOUT_S,
        step=f"downloading {wanted.package}",
    )
    got = find_wheel(wanted, [dest])
    if result.returncode != 0 or got is None:
        tail = "\n".join((result.stderr or "").strip().splitlines()[-5:])
        raise InputError(
            f"{wanted.package}: pip download found no wheel for {wanted.cpu}, Python {wanted.python}, "
            f"{wanted.variant} from {index}: {tail or 'no matching file'}; put the wheel in a folder and "
            "pass it with --wheelhouse"
        )
    return got


def _library(archive: Path, info: zipfile.ZipInfo, folder: Path) -> Library | None:
    """One member, streamed out only if it starts as an ELF file, read by the audit's inspector."""
    if info.file_size > MEMBER_CAP:
        raise InputError(
            f"{archive.name}: {info.filename} inflates to {info.file_size:,} bytes, over {MEMBER_CAP:,}"
        )
    target = folder / f"{abs(hash(info.filename)):x}-{info.filename.rsplit('/', 1)[-1]}"
    with zipfile.ZipFile(archive) as z, z.open(info) as src:
        head = src.read(4)
        if head != ELF_MAGIC:
            return None
        with target.open("wb") as out:
            out.write(head)
            shutil.copyfileobj(src, out, 1 << 20)
    try:
        try:  # most of a dependency's libraries carry no device code: skip the inspector's symbol reading
            if not has_device_code(target, read_elf(target)):
                return None
        except (ElfError, FatbinError, OSError):
            pass  # the inspector reads it again and records why it cannot
        member = Member(info.filename, info.file_size, None, target, "file", is_elf=True)
        lib = inspect_member(member, embedded=False)
    finally:
        target.unlink(missing_ok=True)
    return lib if lib is not None and lib.has_device_code else None


def read(wheel: Path, package: str, *, workdir: Path | None = None) -> DependencyCode:
    """The device code of ``wheel``'s shared libraries (biggest first, two at a time)."""
    import time

    start = time.perf_counter()
    try:
        with zipfile.ZipFile(wheel) as z:
            infos = [
                i for i in z.infolist() if not i.is_dir() and is_library_name(i.filename.rsplit("/", 1)[-1])
            ]
    except (zipfile.BadZipFile, OSError) as exc:
        raise InputError(f"{wheel}: not a readable wheel: {exc}") from None
    infos.sort(key=lambda i: -i.compress_size)
    with (
        tempfile.TemporaryDirectory(prefix="wheelwright-dependency-", dir=workdir) as tmp,
        ThreadPoolExecutor(max_workers=2, thread_name_prefix="dependency") as pool,
    ):
        libs = [lib for lib in pool.map(lambda i: _library(wheel, i, Path(tmp)), infos) if lib is not None]
    libs.sort(key=lambda lib: lib.path)
    return DependencyCode(package, wheel.name, tuple(libs), time.perf_counter() - start, sha256_file(wheel))
