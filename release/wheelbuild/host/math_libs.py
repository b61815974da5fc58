"""The CUDA math libraries a row links (cuBLAS, cuFFT, ...), from their PyPI wheels for the row's CPU.

A full toolkit or PyTorch's builder image carries cuBLAS; this machine's toolkit, the pinned PyPI
toolchain and a cross CUDA_HOME do not. Which libraries a project links is what its train declares:
``[[train."13.0".cuda_packages]]`` names every CUDA package a wheel of the train must declare (the
contract adds them to METADATA, the audit holds the wheel to exactly that set), so a package there
whose libraries are CUDA ``toolkit`` libraries (release/resources/cuda.toml: ``nvidia-cublas`` for
the cuBLAS soname) is one the build links. One list: the build gets what the wheel declares, and
a library the train does not declare is not there to link by mistake.

Its version is the train's exact pin of that package in ``pypi_toolchain``
(``nvidia-cublas==13.1.1.3``: the cuBLAS that ``cuda-toolkit`` 13.0.3 names), so a build is
reproducible; an unpinned one stops the build, naming the key.

The package's wheel for the row's CPU (``pip download --platform``) gives ``include/`` (the headers)
and ``lib/`` (the declared sonames, each with its development link: ``lib<name>.so`` ->
``lib<name>.so.<major>``), in one cache folder per CPU and pins. The build reaches it through the search
paths compilers and CMake read (:func:`search_paths`); a cross build's CMake toolchain adds it to
its find-root paths.

:func:`math_packages`, :func:`math_pins` and :func:`search_paths` are pure; :func:`ensure_math_libs`
downloads and unpacks once.
"""

from __future__ import annotations

import hashlib
import shutil
import zipfile
from collections.abc import Mapping
from pathlib import Path

from packaging.utils import canonicalize_name

from release.core.errors import ToolError
from release.core.locks import install_once
from release.core.log import say
from release.core.pip import pip_download, platform_tags
from release.policy.matrix import Row
from release.policy.model import CudaPackage
from release.resources import cuda

DOWNLOAD_TIMEOUT_S = 900.0
MEMBER_CAP = 2 * 1024 * 1024 * 1024  # cuBLAS's largest library is 630 MB; zipfile stops at the declared size
LAYOUT = 1  # what a math-libs folder holds; a new layout makes new folders


def math_packages(row: Row) -> tuple[CudaPackage, ...]:
    """The train's declared packages whose libraries are CUDA toolkit libraries (not the runtime)."""
    out: list[CudaPackage] = []
    for package in row.cuda_packages:
        kinds = {lib.kind for lib in (cuda.library(s) for s in package.libraries) if lib is not None}
        if kinds == {"toolkit"}:
            out.append(package)
    return tuple(out)


def math_pins(row: Row) -> tuple[str, ...]:
    """The exact pin of each of :func:`math_packages` in the train's ``pypi_toolchain``."""
    pins: dict[str, str] = {}
    for pin in row.pypi_toolchain:
        pins[canonicalize_name(pin.partition("==")[0].strip())] = pin
    out: list[str] = []
    for package in math_packages(row):
        found = pins.get(canonicalize_name(package.name))
        if found is None:
            raise ToolError(
                f'row {row.id}: the train {row.train} declares {package.name} ([[train."{row.train}".cuda_packages]]), '
                f"so the build links {', '.join(package.libraries)}, but pins no version of it: add "
                f'"{package.name}==X.Y.Z" to train."{row.train}".pypi_toolchain in the policy (the version '
                f"cuda-toolkit {row.train}.x names for it, e.g. nvidia-cublas==13.1.1.3 for CUDA 13.0)"
            )
        out.append(found)
    return tuple(out)


def search_paths(folder: Path) -> dict[str, str]:
    """The search path entries that give a build the math libraries in ``folder``: headers for the C,
    C++ and CUDA compilers (CPATH), libraries for ``-l`` (LIBRARY_PATH) and for CMake's find_library
    (CMAKE_LIBRARY_PATH: FindCUDAToolkit's ``CUDA::cublas``). Prepended to what the build inherits."""
    return {
        "CPATH": str(folder / "include"),
        "LIBRARY_PATH": str(folder / "lib"),
        "CMAKE_LIBRARY_PATH": str(folder / "lib"),
        "CMAKE_INCLUDE_PATH": str(folder / "include"),
    }


def dev_link_name(soname: str) -> str:
    """``lib<name>.so.<major>`` -> ``lib<name>.so``: the name ``-l<name>`` and find_library look for."""
    return soname[: soname.index(".so") + 3]


# --------------------------------------------------------------------------- effects


def _unpack(wheel: Path, wanted: set[str], folder: Path) -> set[str]:
    """The headers and the ``wanted`` libraries of a CUDA package wheel into ``folder``; the names of
    the libraries found."""
    found: set[str] = set()
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if info.is_dir() or len(parts) < 3 or parts[0] != "nvidia" or ".." in parts:
                continue
            if "include" in parts[2:-1] or parts[-2] == "include":
                rel = Path(*parts[parts.index("include") + 1 :])
                dest = folder / "include" / rel
            elif parts[-2] == "lib" and parts[-1] in wanted:
                dest = folder / "lib" / parts[-1]
                found.add(parts[-1])
            else:
                continue
            if info.file_size > MEMBER_CAP:
                raise ToolError(
                    f"{wheel.name}: {info.filename} says {info.file_size} bytes, over {MEMBER_CAP}"
                )
            dest.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, dest.open("wb") as out:
                shutil.copyfileobj(src, out)
    return found


def ensure_math_libs(row: Row, cache_dir: Path, env: Mapping[str, str]) -> Path | None:
    """The folder of the row's math libraries for its CPU (made once), or None when it links none."""
    packages = math_packages(row)
    if not packages:
        return None
    pins = math_pins(row)
    tags = platform_tags(row.manylinux, row.platform)
    key = hashlib.sha256(f"{LAYOUT}\0{row.platform}\0{row.manylinux}\0{'|'.join(pins)}".encode()).hexdigest()[
        :16
    ]
    final = cache_dir / "cuda-libs" / row.platform / key

    def fill(tmp: Path) -> None:
        download = tmp / "download"
        say(
            row.id,
            f"downloading {', '.join(pins)} for {row.platform} (the CUDA libraries the train declares, once)...",
        )
        pip_download(
            pins,
            download,
            env=env,
            platforms=tags,
            timeout=DOWNLOAD_TIMEOUT_S,
            step=f"pip download {' '.join(pins)} for {row.platform}",
        )
        for package, pin in zip(packages, pins, strict=True):
            stem = pin.partition("==")[0].strip().replace("-", "_").lower()
            wheels = [w for w in download.glob("*.whl") if w.name.lower().startswith(f"{stem}-")]
            if len(wheels) != 1:
                raise ToolError(
                    f"pip download {pin} for {row.platform} gave {len(wheels)} wheels in {download}"
                )
            found = _unpack(wheels[0], set(package.libraries), tmp)
            missing = sorted(set(package.libraries) - found)
            if missing:
                raise ToolError(
                    f"{wheels[0].name} holds no {', '.join(missing)} under nvidia/*/lib; the train declares "
                    f"{package.name} for them (cuda_packages.libraries)"
                )
            for soname in package.libraries:
                link = tmp / "lib" / dev_link_name(soname)
                if not link.exists():
                    link.symlink_to(soname)
            wheels[0].unlink()
        shutil.rmtree(download)
        (tmp / "pins.txt").write_text("\n".join(pins) + "\n", encoding="utf-8")

    install_once(
        final,
        ready=lambda f: (f / "pins.txt").is_file(),
        fill=fill,
        holder=f"the {row.platform} CUDA libraries {', '.join(pins)}",
    )
    return final
