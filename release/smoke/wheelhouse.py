"""The smoke wheelhouse: a wheel's dependencies fetched once, then installed with no index.

A rehearsal smoke-tests every row in a fresh venv; each CUDA row's wheel needs the same CUDA
runtime package (``nvidia-cuda-runtime``), and downloading it again for every row was most of
each row's smoke time. The wheelhouse is a folder in the wheelwright cache, one per variant and
index configuration (``<cache>/smoke-wheelhouse/cu130-<hash of the indexes>/``):

1. install ``pip install --no-index --find-links <wheelhouse> <wheel>``: no index is asked;
2. if that cannot be satisfied (first use, a new dependency, a Python whose wheels are not
   there yet) or the wheelhouse is older than :data:`MAX_AGE_S`, ``pip download`` the wheel's
   dependencies from the same indexes the smoke would use, under a lock (rows of one variant
   run in parallel), and install from the wheelhouse again.

A row of another CPU than this machine's (aarch64, smoke-tested under emulation: :mod:`release.emulate`)
downloads for its platform (:class:`Target`: ``pip download --platform manylinux_2_28_aarch64 ...
--python-version 3.11 --implementation cp --only-binary=:all:``, every manylinux tag down to 2_17, as
pip on such a machine would accept); its wheels sit beside the host's in the same folder, and pip
picks by tag. The wheel under test never enters the wheelhouse. A dependency that cannot be had fails the
download with pip's own message, as an install from the index would. Only a rehearsal uses a
wheelhouse: a production release installs from the indexes, as its users will.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from release.core.errors import StepFailed
from release.core.locks import exclusive
from release.core.log import say
from release.core.pip import platform_tags

MAX_AGE_S = 24 * 3600.0  # refetched after a day: a new runtime release is then picked up
STAMP = ".wheelwright-wheelhouse.json"


@dataclass(frozen=True)
class Wheelhouse:
    """Where one variant's smoke dependencies are kept, and the indexes they come from."""

    folder: Path
    variant: str
    index_url: str | None
    extra_index_urls: tuple[str, ...]

    @property
    def lock(self) -> Path:
        return self.folder.with_name(self.folder.name + ".lock")

    def fresh(self, *, now: float | None = None) -> bool:
        """Filled, from these indexes, less than :data:`MAX_AGE_S` ago."""
        try:
            data = json.loads((self.folder / STAMP).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return False
        if not isinstance(data, dict) or data.get("indexes") != self._indexes():
            return False
        at = data.get("fetched_at")
        return isinstance(at, (int, float)) and ((time.time() if now is None else now) - at) < MAX_AGE_S

    def _indexes(self) -> list[str]:
        return [self.index_url or "(pip's default index)", *self.extra_index_urls]


def wheelhouse_for(
    cache_dir: Path, variant: str, *, index_url: str | None, extra_index_urls: Sequence[str] = ()
) -> Wheelhouse:
    """The wheelhouse of ``variant`` for these indexes (another index set gets another folder)."""
    key = hashlib.sha256(json.dumps([index_url, list(extra_index_urls)]).encode()).hexdigest()[:12]
    folder = cache_dir / "smoke-wheelhouse" / f"{variant}-{key}"
    return Wheelhouse(folder, variant, index_url, tuple(extra_index_urls))


@dataclass(frozen=True)
class Target:
    """The interpreter the dependencies are for, when it is not the one pip runs on (pure data)."""

    platforms: tuple[str, ...]  # the platform tags it accepts, best first
    python_version: str  # "3.11"
    implementation: str = "cp"

    def pip_args(self) -> list[str]:
        args: list[str] = []
        for tag in self.platforms:
            args += ["--platform", tag]
        return [*args, "--python-version", self.python_version, "--implementation", self.implementation]


def target_for(manylinux: str, arch: str, python: str) -> Target:
    """The :class:`Target` of a row's CPU and Python (pure)."""
    return Target(platform_tags(manylinux, arch), python)


def download_args(house: Wheelhouse, wheel: Path, dest: Path, target: Target | None = None) -> list[str]:
    """``pip download`` of the wheel's dependencies, binary only, from the wheelhouse's indexes,
    for ``target`` when given (another CPU than pip's own), pure."""
    args = ["download", "--isolated", "--no-input", "--quiet", "--only-binary=:all:", "--dest", str(dest)]
    if target is not None:
        args += target.pip_args()
    if house.index_url:
        args += ["--index-url", house.index_url]
    for url in house.extra_index_urls:
        args += ["--extra-index-url", url]
    return [*args, str(wheel)]


def fill(
    house: Wheelhouse,
    wheel: Path,
    *,
    row_id: str,
    download: Callable[[list[str]], None],
    install: Callable[[], str | None],
    target: Target | None = None,
) -> None:
    """Fetch ``wheel``'s dependencies into the wheelhouse, under its lock, then install from it.

    ``download(args)`` runs pip with the arguments; ``install()`` tries the no-index install and
    returns None when it worked, else pip's complaint (a row that waited for the lock may find
    the wheelhouse filled by another row). ``target``: the interpreter's platform and Python,
    when pip does not run on it (:func:`target_for`).
    """
    with exclusive(house.lock, holder=f"the smoke of row {row_id}: filling {house.folder}"):
        if house.fresh() and install() is None:
            return
        house.folder.mkdir(parents=True, exist_ok=True)
        what = f" for {target.platforms[0]}, Python {target.python_version}" if target is not None else ""
        say(row_id, f"smoke: fetching the dependencies of {wheel.name}{what} into {house.folder}")
        tmp = Path(tempfile.mkdtemp(prefix=".fetch-", dir=house.folder.parent))
        try:
            download(download_args(house, wheel, tmp, target))
            for got in sorted(tmp.iterdir()):
                if got.name != wheel.name and got.suffix == ".whl":  # never the wheel under test
                    got.replace(house.folder / got.name)  # atomic: readers see whole files
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        stamp = {"version": 1, "indexes": house._indexes(), "fetched_at": time.time()}
        tmp_stamp = house.folder / f".{STAMP}.{os.getpid()}.tmp"
        tmp_stamp.write_text(json.dumps(stamp, sort_keys=True) + "\n", encoding="utf-8")
        tmp_stamp.replace(house.folder / STAMP)
    problem = install()
    if problem is not None:
        raise StepFailed(
            f"row {row_id}: {wheel.name} does not install from the smoke wheelhouse {house.folder} "
            f"even after its dependencies were fetched into it:\n{problem}"
        )
