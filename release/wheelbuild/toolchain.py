"""A CUDA toolchain for a row's train: CUDA_HOME, the host nvcc, or pinned PyPI wheels.

Resolution order for a CUDA row (a CPU row needs no toolchain):

1. ``CUDA_HOME`` from the environment, if set. It must hold ``bin/nvcc`` reporting
   exactly the row's train (``13.0``); anything else is an error that says what it
   found. A set CUDA_HOME is never silently skipped.
2. The ``nvcc`` on ``PATH``, if it reports exactly the train. Its real CUDA home is
   read from nvcc itself (``nvcc --dryrun`` prints ``_HERE_``), so a wrapper script in
   ``/usr/local/bin`` still leads to ``/usr/local/cuda-13.0``.
3. The row's ``pypi_toolchain`` pins, installed once into
   ``<cache_dir>/cuda-<nvcc version>`` with pip's default index and no pip
   configuration, atomically (temporary folder + rename), so an interrupted install
   is never reused, and under the folder's lock (:func:`release.core.locks.install_once`),
   so two builds at once install it once.
4. Otherwise a ToolError naming what is missing, what was found and where to get it.

The version logic is pure (``parse_nvcc_version``, ``version_matches``,
``missing_toolchain_message``) and unit-tested; the pins themselves were checked
against the train when the policy was loaded (:mod:`release.policy.trains`). The rest runs
``nvcc`` and ``pip`` through :mod:`release.core.proc`.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from release.core import proc
from release.core.errors import InputError, StepFailed, ToolError
from release.core.locks import install_once
from release.core.log import say
from release.core.nvcc import MANIFEST, read_manifest
from release.core.nvcc import dryrun as nvcc_dryrun
from release.core.pip import pip_install_target
from release.policy.matrix import Row
from release.policy.trains import NVCC_PACKAGE, pypi_nvcc_version
from release.wheelbuild.host.math_libs import ensure_math_libs, math_packages, math_pins

ToolchainSource = Literal["cuda_home", "host", "pypi"]

MANIFEST_VERSION = 1

_NVCC_RE = re.compile(r"release (\d+)\.(\d+), V(\d+\.\d+\.\d+)")
_HERE_RE = re.compile(r"^#\$ _HERE_=(.+)$", re.MULTILINE)


@dataclass(frozen=True)
class Toolchain:
    """A CUDA toolkit of exactly one train, ready to build with."""

    version: str  # "13.0": what the row's train must equal
    full_version: str  # "13.0.88": nvcc's own version
    cuda_home: Path  # CUDA_HOME for the build
    nvcc: Path  # cuda_home/bin/nvcc
    source: ToolchainSource
    lib_dir: Path  # holds libcudart.so.<major> and a libcudart.so link for linking
    installed: bool = True  # False only in a dry-run plan of a PyPI toolchain not cached yet
    # the CUDA math libraries the train declares, for the row's CPU (release.wheelbuild.host.math_libs)
    math_libs: Path | None = None
    # a folder holding a link stub of the driver (libcuda.so) for a native host build whose toolkit has
    # none, as the PyPI wheels do not (release.wheelbuild.host.driver_stub): -lcuda, CUDA::cuda_driver
    driver_stub: Path | None = None

    @property
    def bin_dir(self) -> Path:
        return self.nvcc.parent

    def describe(self) -> str:
        where = {
            "cuda_home": "CUDA_HOME",
            "host": "host nvcc",
            "pypi": "pinned PyPI wheels",
        }[self.source]
        pending = "" if self.installed else " (installed into the cache on first build)"
        return f"CUDA {self.full_version} from {where} at {self.cuda_home}{pending}"

    def record(self) -> dict[str, Any]:
        """What a build record says of the toolchain (``<wheel>.build.json``'s ``toolchain``)."""
        return {
            "version": self.version,
            "full_version": self.full_version,
            "source": self.source,
            "nvcc": str(self.nvcc),
        }


# --------------------------------------------------------------------------- pure logic


def parse_nvcc_version(text: str) -> tuple[str, str] | None:
    """``nvcc --version`` output -> ``("13.0", "13.0.88")``, or None if it has no version."""
    m = _NVCC_RE.search(text)
    if m is None:
        return None
    return f"{int(m[1])}.{int(m[2])}", m[3]


def version_matches(found: str, train: str) -> bool:
    """Exact major.minor equality: ``13.0`` builds the 13.0 train, ``13.2`` does not,
    nor does ``12.6`` build ``12.60``. Patch levels within the train all match."""

    def key(text: str) -> tuple[int, ...] | None:
        parts = text.split(".")
        if len(parts) < 2 or not all(p.isdigit() for p in parts):
            return None
        return int(parts[0]), int(parts[1])

    got, want = key(found), key(train)
    return got is not None and got == want


def pypi_cache_name(full_version: str) -> str:
    """``cuda-13.2.86``: the cache folder of a PyPI toolchain."""
    return f"cuda-{full_version}"


def missing_toolchain_message(row: Row, *, tried: Sequence[str]) -> str:
    """Say what a CUDA row needs, what was looked at, and where to get a toolchain."""
    lines = [
        f"row {row.id} needs a CUDA {row.train} toolchain (nvcc reporting exactly "
        f"{row.train}) and none was found:"
    ]
    lines += [f"  - {t}" for t in tried]
    if row.train is not None and row.train.split(".")[0] == "12" and not row.pypi_toolchain:
        lines.append(
            f"  - rows.toml pins no PyPI toolchain for CUDA {row.train}: "
            "there is no nvcc on PyPI for CUDA 12 (the -cu12 nvcc wheels carry only ptxas, "
            "libnvvm and headers)"
        )
    elif not row.pypi_toolchain:
        lines.append(f'  - rows.toml has no train."{row.train}".pypi_toolchain pins')
    hint = row.host_toolchain_hint or f"install the CUDA {row.train} toolkit and set CUDA_HOME to it"
    lines.append(f"to fix: {hint}.")
    lines.append(
        f"the container build uses the row's builder image {row.builder_image}: "
        f"python -m release build {row.id} --backend container"
    )
    return "\n".join(lines)


# --------------------------------------------------------------------------- probing


@dataclass(frozen=True)
class NvccProbe:
    """What one nvcc says about itself."""

    nvcc: Path
    version: str | None  # "13.0"
    full_version: str | None  # "13.0.88"
    cuda_home: Path | None  # the toolkit nvcc really lives in
    error: str | None  # why it could not be asked

    def describe(self) -> str:
        if self.error:
            return f"{self.nvcc}: {self.error}"
        return f"{self.nvcc} is CUDA {self.version} (V{self.full_version})"


def probe_nvcc(nvcc: Path, env: Mapping[str, str]) -> NvccProbe:
    """Ask ``nvcc --version`` and ``nvcc --dryrun`` (for its real home). Never raises."""
    try:
        out = proc.run([nvcc, "--version"], env=env, check=False, timeout=60)
    except (ToolError, StepFailed) as exc:
        return NvccProbe(nvcc, None, None, None, str(exc))
    parsed = parse_nvcc_version(out.stdout + out.stderr)
    if out.returncode != 0 or parsed is None:
        detail = (out.stderr or out.stdout).strip().splitlines()[-1:] or ["no output"]
        return NvccProbe(nvcc, None, None, None, f"`nvcc --version` exit {out.returncode}: {detail[0]}")
    home: Path | None = None
    text = nvcc_dryrun(nvcc, env)
    m = _HERE_RE.search(text)
    if m is not None:
        home = Path(m[1].strip()).resolve().parent
    elif nvcc.resolve().parent.name == "bin":
        home = nvcc.resolve().parent.parent
    return NvccProbe(nvcc, parsed[0], parsed[1], home, None)


def find_cudart(cuda_home: Path, major: int) -> Path | None:
    """The folder holding ``libcudart.so.<major>`` in a toolkit, or None."""
    subdirs = [
        "lib64",
        "lib",
        *sorted(str(p.relative_to(cuda_home)) for p in cuda_home.glob("targets/*/lib")),
    ]
    for sub in subdirs:
        if (cuda_home / sub / f"libcudart.so.{major}").exists():
            return cuda_home / sub
    return None


def _toolchain_from(row: Row, probe: NvccProbe, cuda_home: Path, source: ToolchainSource) -> Toolchain:
    assert row.train is not None and probe.version is not None and probe.full_version is not None
    major = int(row.train.split(".")[0])
    lib_dir = find_cudart(cuda_home, major)
    if lib_dir is None:
        raise ToolError(
            f"{cuda_home} has nvcc {probe.full_version} but no libcudart.so.{major} under lib64/, "
            f"lib/ or targets/*/lib/; row {row.id} links the CUDA runtime: point CUDA_HOME at a "
            "complete toolkit"
        )
    return Toolchain(
        version=probe.version,
        full_version=probe.full_version,
        cuda_home=cuda_home,
        nvcc=cuda_home / "bin" / "nvcc",
        source=source,
        lib_dir=lib_dir,
    )


# --------------------------------------------------------------------------- resolution


def resolve_toolchain(
    row: Row, *, env: Mapping[str, str], cache_dir: Path, install: bool = True
) -> Toolchain | None:
    """The toolchain a row builds with; None for a CPU row.

    ``env`` is the environment to look in (CUDA_HOME, PATH). With ``install=False``
    (a dry run) a PyPI toolchain that is not cached yet is described, not installed.
    Raises ToolError when no toolchain of exactly the row's train can be had. The CUDA math
    libraries the train declares come with it, for the row's CPU (a dry run checks their pins only).
    """
    toolchain = _resolve(row, env=env, cache_dir=cache_dir, install=install)
    if toolchain is None or not math_packages(row):
        return toolchain
    if not install:
        math_pins(row)  # an unpinned one stops the plan too
        return toolchain
    return replace(toolchain, math_libs=ensure_math_libs(row, cache_dir, env))


def _resolve(row: Row, *, env: Mapping[str, str], cache_dir: Path, install: bool) -> Toolchain | None:
    if not row.is_cuda:
        return None
    assert row.train is not None
    tried: list[str] = []

    home_text = env.get("CUDA_HOME", "")
    if home_text:
        home = Path(home_text)
        nvcc = home / "bin" / "nvcc"
        if not nvcc.is_file():
            raise ToolError(
                f"CUDA_HOME={home_text} has no bin/nvcc; row {row.id} needs a CUDA {row.train} "
                "toolkit there, or unset CUDA_HOME to use the host nvcc or the pinned PyPI toolchain"
            )
        probe = probe_nvcc(nvcc, env)
        if probe.error or not version_matches(probe.version or "", row.train):
            found = probe.error or f"reports CUDA {probe.version} (V{probe.full_version})"
            raise ToolError(
                f"CUDA_HOME={home_text}: {nvcc} {found}, but row {row.id} needs CUDA {row.train} "
                f"exactly; point CUDA_HOME at a CUDA {row.train} toolkit, or unset it to use the "
                "host nvcc or the pinned PyPI toolchain"
            )
        return _toolchain_from(row, probe, home, "cuda_home")
    tried.append("CUDA_HOME is not set")

    found_nvcc = shutil.which("nvcc", path=env.get("PATH", ""))
    if found_nvcc is None:
        tried.append("no nvcc on PATH")
    else:
        probe = probe_nvcc(Path(found_nvcc), env)
        matches = probe.error is None and version_matches(probe.version or "", row.train)
        if matches and probe.cuda_home is not None:
            return _toolchain_from(row, probe, probe.cuda_home, "host")
        if matches:
            tried.append(f"nvcc on PATH: {probe.describe()}, but its CUDA home cannot be told; set CUDA_HOME")
        else:
            tried.append(f"nvcc on PATH: {probe.describe()}" + ("" if probe.error else f", not {row.train}"))

    if row.pypi_toolchain:
        return pypi_toolchain(row, cache_dir=cache_dir, env=env, install=install)
    raise ToolError(missing_toolchain_message(row, tried=tried))


# --------------------------------------------------------------------------- PyPI toolchain


def compiler_pins(row: Row) -> tuple[str, ...]:
    """The pins installed as the toolchain: ``pypi_toolchain`` less the math libraries' (those come
    for the row's CPU from release.wheelbuild.host.math_libs), so a policy that adds cuBLAS shares
    the toolchain folder of one that does not."""
    math = set(math_pins(row)) if math_packages(row) else set()
    return tuple(p for p in row.pypi_toolchain if p not in math)


def _cached_toolchain(row: Row, full: str, final: Path, env: Mapping[str, str]) -> Toolchain | None:
    """The toolchain installed in ``final`` when it is complete, of exactly the row's pins, and
    works; else None."""
    manifest = read_manifest(final)
    if manifest is None or manifest.get("pins") != list(compiler_pins(row)):
        return None
    home = final / str(manifest["cuda_home"])
    probe = probe_nvcc(home / "bin" / "nvcc", env)
    if probe.error is not None or probe.full_version != full:
        return None
    return _toolchain_from(row, probe, home, "pypi")


def pypi_toolchain(row: Row, *, cache_dir: Path, env: Mapping[str, str], install: bool = True) -> Toolchain:
    """The row's pinned PyPI toolchain, installed once into ``cache_dir/cuda-<version>``."""
    assert row.train is not None
    # load_policy has checked that the pins hold an nvcc of exactly the row's train.
    full = pypi_nvcc_version(row.pypi_toolchain)
    if full is None:  # only a Row made by hand, not by load_policy, can get here
        raise InputError(f"row {row.id}: its pypi_toolchain pins no {NVCC_PACKAGE}==X.Y.Z")
    final = cache_dir / pypi_cache_name(full)
    major = int(row.train.split(".")[0])
    cached = _cached_toolchain(row, full, final, env)
    if cached is not None:
        return cached
    if not install:
        home = final / "nvidia" / f"cu{major}"
        return Toolchain(
            version=row.train,
            full_version=full,
            cuda_home=home,
            nvcc=home / "bin" / "nvcc",
            source="pypi",
            lib_dir=home / "lib",
            installed=False,
        )
    return _install_pypi_toolchain(row, full, final, env)


def _install_pypi_toolchain(row: Row, full: str, final: Path, env: Mapping[str, str]) -> Toolchain:
    """Install the pins into ``final`` once (under its lock: two builds at once install it once)."""
    assert row.train is not None
    major = int(row.train.split(".")[0])

    def fill(tmp: Path) -> None:
        say(row.id, f"installing the pinned CUDA {full} toolchain from PyPI into {final}")
        pip_install_target(compiler_pins(row), tmp, env=env)
        nvccs = sorted(tmp.glob("nvidia/*/bin/nvcc"))
        if len(nvccs) != 1:
            raise ToolError(
                f"the pins {', '.join(compiler_pins(row))} installed {len(nvccs)} nvcc binaries "
                "(expected one under nvidia/*/bin/nvcc); check train."
                f'"{row.train}".pypi_toolchain in rows.toml'
            )
        home = nvccs[0].parent.parent
        probe = probe_nvcc(nvccs[0], env)
        if probe.error or probe.full_version != full:
            raise ToolError(
                f"the PyPI toolchain for CUDA {row.train} does not work: {probe.describe()}, expected V{full}"
            )
        lib = home / "lib"
        runtime = lib / f"libcudart.so.{major}"
        if not runtime.exists():
            raise ToolError(
                f"the pins {', '.join(compiler_pins(row))} installed no {runtime.name}; pin the "
                "CUDA runtime package of the train (nvidia-cuda-runtime==...) too"
            )
        # The PyPI runtime has no libcudart.so dev link; linkers (-lcudart, CMake's
        # FindCUDAToolkit) need one. It lives in the cache only, never in a wheel.
        dev_link = lib / "libcudart.so"
        if not dev_link.exists():
            dev_link.symlink_to(runtime.name)
        (tmp / MANIFEST).write_text(
            json.dumps(
                {
                    "version": MANIFEST_VERSION,
                    "pins": list(compiler_pins(row)),
                    "full_version": full,
                    "cuda_home": str(home.relative_to(tmp)),
                },
                indent=2,
                sort_keys=True,
            )
            + "\n",
            encoding="utf-8",
        )

    install_once(
        final,
        ready=lambda folder: _cached_toolchain(row, full, folder, env) is not None,
        fill=fill,
        holder=f"the CUDA {full} toolchain install of row {row.id}",
        waiting=lambda holder: say(row.id, f"waiting for {holder or 'another build'} to install {final}"),
    )
    installed = _cached_toolchain(row, full, final, env)
    if installed is None:
        raise ToolError(
            f"the PyPI toolchain in {final} does not work after installing (no {MANIFEST}, other pins, "
            "or nvcc fails); remove it and build again"
        )
    return installed
