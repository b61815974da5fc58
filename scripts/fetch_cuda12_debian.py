#!/usr/bin/env python3
"""Unpack Debian 13 (trixie)'s CUDA 12.4 toolkit into a private folder, changing nothing else.

CUDA 12 has no nvcc on PyPI; Debian trixie ships CUDA 12.4 as ``.deb`` files. This script
runs apt with a private configuration (its own sources list naming the Debian mirror this
machine's apt sources already use, suite ``trixie``; its own lists, cache, status and log
folders), downloads a fixed package set with ``apt-get download``, unpacks each with
``dpkg-deb -x`` and lays a CUDA_HOME-like tree over it with its own ``nvcc.profile``:

    <dest>/root/          the unpacked packages (usr/, etc/), as Debian lays them out
    <dest>/cuda-12.4/     CUDA_HOME: bin/ (nvcc + its own nvcc.profile), include/, lib64/, nvvm/
    <dest>/manifest.json  packages, versions, hashes, mirror, sizes, times

Nothing is written outside ``<dest>``'s parent folder: not /etc/apt, not /var/lib/apt,
not /var/cache/apt, not dpkg's status. Idempotent (a working tree is left alone) and
atomic (built beside ``<dest>`` and renamed into place).

    python scripts/fetch_cuda12_debian.py [--dest DIR] [--print-cuda-home] [--mirror URI]

From a test::

    from fetch_cuda12_debian import ensure_cuda12_toolkit, toolkit_env
    cuda_home = ensure_cuda12_toolkit()          # Path to <dest>/cuda-12.4
    env = toolkit_env(cuda_home)                 # PATH/CUDA_HOME set, stray CUDA vars removed
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from release.core.errors import StepFailed, ToolError, WheelwrightError  # noqa: E402
from release.core.proc import run  # noqa: E402
from release.emulate import apt  # noqa: E402

# the names this script's users import from it
COMPONENTS = apt.COMPONENTS
DEBIAN_SUITES = apt.DEBIAN_SUITES
AptSource = apt.AptSource
DebFile = apt.DebFile
NoDebianSource = apt.NoDebianSource
PackageMissing = apt.PackageMissing
debian_mirror = apt.debian_mirror
find_debian_mirror = apt.find_debian_mirror
parse_deb822_sources = apt.parse_deb822_sources
parse_one_line_sources = apt.parse_one_line_sources
read_apt_sources = apt.read_apt_sources

SUITE = "trixie"
CUDA_RELEASE = "12.4"
CUDA_HOME_NAME = f"cuda-{CUDA_RELEASE}"
# The minimal set for nvcc 12.4 to compile and link a `.cu` shared library against the
# shared runtime. nvidia-cuda-toolkit: nvcc, cicc, ptxas, fatbinary, nvlink, cudafe++,
# libdevice, crt/link.stub. nvidia-cuda-dev: cuda_runtime.h and the crt/ headers, the
# libcudart.so dev link, libcudadevrt.a, libcudart_static.a (nothing smaller has them).
# libcudart12: libcudart.so.12. libcu++/cub/thrust: the CCCL headers every real toolkit
# has. Not needed, so not fetched: libnvvm4 (cicc does not load it), nvidia-profiler,
# nvidia-opencl-dev, nvidia-cuda-gdb, the cuBLAS/cuFFT/NPP runtime libraries.
PACKAGES = (
    "nvidia-cuda-toolkit",
    "nvidia-cuda-dev",
    "libcudart12",
    "libcu++-dev",
    "libcub-dev",
    "libthrust-dev",
)
# Packages whose Debian version must be CUDA 12.4 (the others are CCCL 2.3.x).
CUDA_VERSIONED = ("nvidia-cuda-toolkit", "nvidia-cuda-dev", "libcudart12")
LAYOUT_VERSION = 1
MULTIARCH = {
    "amd64": "x86_64-linux-gnu",
    "arm64": "aarch64-linux-gnu",
    "ppc64el": "powerpc64le-linux-gnu",
}
# Static libraries of the math libraries (cuBLAS, cuFFT, NPP, ...): 2.5 GB unpacked and
# useless without their shared libraries, which are not fetched. libcudart_static.a stays.
PRUNE_KEEP = frozenset({"libcudart_static.a"})
PRUNE_PATTERN = re.compile(r"^lib.*_static.*\.a$")
# Environment variables that would make nvcc or the host compiler look elsewhere.
STRAY_ENV = (
    "CUDA_PATH",
    "CUDA_ROOT",
    "CUDAToolkit_ROOT",
    "CUDACXX",
    "CPATH",
    "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH",
    "LIBRARY_PATH",
    "NVCC_PREPEND_FLAGS",
    "NVCC_APPEND_FLAGS",
    "NVCC_CCBIN",
)

NVCC_PROFILE = """\
# Written by wheelwright's scripts/fetch_cuda12_debian.py: every path is relative to this
# folder, so nvcc reads only this tree (Debian's own profile names /usr paths).
TOP = $(_HERE_)/..
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice
LD_LIBRARY_PATH += $(TOP)/lib64:
PATH += $(TOP)/nvvm/bin:$(_HERE_):
INCLUDES += "-I$(TOP)/include" $(_SPACE_)
LIBRARIES =+ $(_SPACE_) "-L$(TOP)/lib64/stubs" "-L$(TOP)/lib64"
CUDAFE_FLAGS +=
PTXAS_FLAGS +=
"""

CHECK_KERNEL = """\
#include <cuda_runtime.h>
__global__ void scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" int launch_scale(float *x, float a, int n) {
  scale<<<(n + 255) / 256, 256>>>(x, a, n);
  return (int)cudaGetLastError();
}
"""

Log = Callable[[str], None]


def _stderr(message: str) -> None:
    print(f"[fetch-cuda12] {message}", file=sys.stderr, flush=True)


def _quiet(message: str) -> None:
    del message


# --------------------------------------------------------------------------- apt (shared)


class PrivateApt(apt.PrivateApt):
    """:class:`release.emulate.apt.PrivateApt` on trixie with every component, for this host's
    architecture: the CUDA 12.4 toolkit's packages."""

    def __init__(
        self,
        root: Path,
        source: AptSource,
        *,
        arch: str,
        wrapper: Sequence[str] = (),
        log: Log = _stderr,
    ) -> None:
        super().__init__(
            root, source, suite=SUITE, arch=arch, components=COMPONENTS, wrapper=wrapper, log=log
        )


# --------------------------------------------------------------------------- the tree


def default_dest() -> Path:
    """~/.cache/wheelwright/cuda-12.4-debian (XDG_CACHE_HOME honoured)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "wheelwright" / f"cuda-{CUDA_RELEASE}-debian"


def cuda_home_of(dest: Path) -> Path:
    """The CUDA_HOME inside a tree built at `dest`."""
    return dest / CUDA_HOME_NAME


def toolkit_env(cuda_home: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """An environment for building with this toolkit: its bin first on PATH, CUDA_HOME set,
    variables that would point nvcc or the host compiler elsewhere removed."""
    env = dict(os.environ if base is None else base)
    for name in STRAY_ENV:
        env.pop(name, None)
    env["CUDA_HOME"] = str(cuda_home)
    env["PATH"] = os.pathsep.join([str(cuda_home / "bin"), env.get("PATH", os.defpath)])
    return env


def nvcc_release(cuda_home: Path) -> str:
    """`12.4` from `nvcc --version`; raises ToolError when nvcc does not run."""
    res = run([cuda_home / "bin" / "nvcc", "--version"], env=toolkit_env(cuda_home), check=False)
    m = re.search(r"release (\d+\.\d+), V(\S+)", res.stdout)
    if res.returncode != 0 or not m:
        raise ToolError(
            f"{cuda_home}/bin/nvcc --version failed (exit {res.returncode}): "
            f"{(res.stderr or res.stdout).strip()[-500:]}"
        )
    return m[1]


def problem_with(dest: Path) -> str | None:
    """Why the tree at `dest` is not usable, or None when it is (cheap: no compile)."""
    manifest = dest / "manifest.json"
    if not manifest.is_file():
        return "no tree yet" if not dest.exists() else f"{manifest} is missing"
    try:
        data = json.loads(manifest.read_text())
    except (OSError, ValueError) as exc:
        return f"{manifest} is unreadable: {exc}"
    if data.get("layout") != LAYOUT_VERSION:
        return f"tree layout {data.get('layout')} is not the current {LAYOUT_VERSION}"
    if sorted(p["name"] for p in data.get("packages", [])) != sorted(PACKAGES):
        return "tree was built from a different package set"
    home = cuda_home_of(dest)
    for rel in ("bin/nvcc.profile", "include/cuda_runtime.h", "lib64/libcudart.so"):
        if not (home / rel).exists():
            return f"{home / rel} is missing"
    try:
        release = nvcc_release(home)
    except WheelwrightError as exc:
        return str(exc)
    if release != CUDA_RELEASE:
        return f"nvcc reports release {release}, not {CUDA_RELEASE}"
    return None


def _host_arch() -> str:
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    if arch not in MULTIARCH:
        raise ToolError(f"Debian has no CUDA toolkit layout known here for architecture {arch}")
    return arch


def _relink(link: Path, target: Path) -> None:
    """Make `link` a relative symlink to `target` (both inside the tree, so renames keep it)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(os.path.relpath(target, link.parent))


def _prune(root: Path, triplet: str, log: Log) -> dict[str, int]:
    libdir = root / "usr/lib" / triplet
    pruned_files = pruned_bytes = 0
    for path in sorted(libdir.iterdir()):
        if PRUNE_PATTERN.match(path.name) and path.name not in PRUNE_KEEP and path.is_file():
            pruned_bytes += path.stat().st_size
            pruned_files += 1
            path.unlink()
    dangling = 0
    for path in sorted(libdir.rglob("*")):
        if path.is_symlink() and not path.exists():
            path.unlink()  # dev links of libraries not fetched (libcublas.so -> .so.12, ...)
            dangling += 1
    absolute = 0
    for path in sorted(root.rglob("*")):
        if path.is_symlink() and path.readlink().is_absolute():
            path.unlink()  # nvcc.profile -> /etc/nvcc.profile: would read the system's
            absolute += 1
    log(
        f"pruned {pruned_files} math-library static archives ({pruned_bytes / 1e9:.2f} GB), "
        f"{dangling} dangling dev links, {absolute} absolute symlinks"
    )
    return {"files": pruned_files, "bytes": pruned_bytes, "dangling": dangling}


def _lay_cuda_home(root: Path, home: Path, triplet: str) -> None:
    toolkit_bin = root / "usr/lib/nvidia-cuda-toolkit/bin"
    bin_dir = home / "bin"
    bin_dir.mkdir(parents=True)
    # nvcc reads nvcc.profile beside the file it was started as: a real file here (a hard
    # link, or a copy across file systems), never a symlink into Debian's folder.
    try:
        os.link(toolkit_bin / "nvcc", bin_dir / "nvcc")
    except OSError:
        shutil.copy2(toolkit_bin / "nvcc", bin_dir / "nvcc")
    (bin_dir / "nvcc.profile").write_text(NVCC_PROFILE)
    # cicc, crt/, and Debian's gcc/g++ wrappers (they pick the newest g++ <= 13 present).
    for entry in sorted(toolkit_bin.iterdir()):
        if entry.name not in {"nvcc", "nvcc.profile"}:
            _relink(bin_dir / entry.name, entry)
    # ptxas, fatbinary, nvlink, cudafe++, bin2c, cuobjdump, nvdisasm, ... (usr/bin/nvcc is
    # Debian's shell wrapper naming /usr paths: not linked).
    for entry in sorted((root / "usr/bin").iterdir()):
        if entry.name != "nvcc" and not (bin_dir / entry.name).exists():
            _relink(bin_dir / entry.name, entry)
    _relink(home / "include", root / "usr/include")
    _relink(home / "lib64", root / "usr/lib" / triplet)
    _relink(home / "nvvm/libdevice", root / "usr/lib/nvidia-cuda-toolkit/libdevice")
    _relink(home / "nvvm/bin/cicc", toolkit_bin / "cicc")


def _check_compiles(home: Path, work: Path) -> None:
    """Compile and link a kernel into a shared library against the shared runtime."""
    (work / "check.cu").write_text(CHECK_KERNEL)
    env = toolkit_env(home)
    env["TMPDIR"] = str(work)
    res = run(
        [
            home / "bin/nvcc",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "shared",
            "-gencode",
            "arch=compute_75,code=sm_75",
            "-o",
            work / "libcheck.so",
            work / "check.cu",
        ],
        env=env,
        cwd=work,
        check=False,
    )
    if res.returncode != 0:
        raise ToolError(
            f"the unpacked nvcc {CUDA_RELEASE} cannot compile a kernel "
            f"(CUDA {CUDA_RELEASE} needs a host g++ between 6 and 13):\n"
            + (res.stderr or res.stdout).strip()[-2000:]
        )


@contextlib.contextmanager
def _locked(dest: Path) -> Iterator[None]:
    lock = dest.parent / f".{dest.name}.lock"
    with lock.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(dest: Path, source: AptSource, log: Log) -> dict[str, object]:
    started = time.monotonic()
    arch = _host_arch()
    triplet = MULTIARCH[arch]
    for tool in ("apt-get", "apt-config", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise ToolError(f"'{tool}' was not found on PATH (it comes with apt and dpkg)")
    staging = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    try:
        apt = PrivateApt(staging / "apt", source, arch=arch, log=log)
        apt.update()
        debs = apt.resolve(PACKAGES)
        for deb in debs:
            if deb.name in CUDA_VERSIONED and not deb.version.startswith(CUDA_RELEASE + "."):
                raise PackageMissing(
                    f"{deb.name} in {source.uri} {SUITE} is {deb.version}, not CUDA {CUDA_RELEASE}"
                )
        total = sum(d.size for d in debs)
        log(
            f"downloading {len(debs)} packages, {total / 1e6:.0f} MB: "
            + ", ".join(f"{d.name} {d.version}" for d in debs)
        )
        t0 = time.monotonic()
        apt.download(PACKAGES)
        download_s = time.monotonic() - t0
        log(f"downloaded {total / 1e6:.0f} MB in {download_s:.1f} s")
        tree = staging / "tree"
        root = tree / "root"
        root.mkdir(parents=True)
        for deb in debs:
            path = apt.archives / deb.filename
            if not path.is_file() or path.stat().st_size != deb.size:
                raise StepFailed(f"apt-get download left no complete {deb.filename}")
            log(f"unpacking {deb.filename}")
            run(["dpkg-deb", "-x", path, root])
            path.unlink()  # free the space before the next one
        pruned = _prune(root, triplet, log)
        home = cuda_home_of(tree)
        _lay_cuda_home(root, home, triplet)
        toolkit = next(d for d in debs if d.name == "nvidia-cuda-toolkit")
        # 12.4.131~12.4.1-2: nvcc 12.4.131 of the CUDA 12.4.1 release, Debian revision 2
        nvcc_v, _, sdk_v = toolkit.version.partition("~")
        (home / "version.json").write_text(
            json.dumps(
                {
                    "cuda": {"name": "CUDA SDK", "version": sdk_v.rsplit("-", 1)[0]},
                    "cuda_nvcc": {"name": "CUDA NVCC", "version": nvcc_v},
                },
                indent=2,
            )
            + "\n"
        )
        release = nvcc_release(home)
        if release != CUDA_RELEASE:
            raise ToolError(f"unpacked nvcc reports release {release}, not {CUDA_RELEASE}")
        log(f"checking: nvcc {release} compiles and links a kernel against libcudart.so")
        check_dir = staging / "check"
        check_dir.mkdir()
        _check_compiles(home, check_dir)
        manifest: dict[str, object] = {
            "layout": LAYOUT_VERSION,
            "cuda_release": CUDA_RELEASE,
            "suite": SUITE,
            "components": list(COMPONENTS),
            "mirror": source.uri,
            "mirror_from": source.origin,
            "arch": arch,
            "packages": [
                {
                    "name": d.name,
                    "version": d.version,
                    "file": d.filename,
                    "size": d.size,
                    "sha256": d.sha256,
                }
                for d in debs
            ],
            "download_bytes": total,
            "download_seconds": round(download_s, 2),
            "build_seconds": round(time.monotonic() - started, 2),
            "pruned": pruned,
            "cuda_home": CUDA_HOME_NAME,
        }
        (tree / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        old: Path | None = None
        if dest.exists() or dest.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{dest.name}.old-", dir=dest.parent))
            dest.rename(old / "tree")
        tree.rename(dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return manifest
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def ensure_cuda12_toolkit(
    dest: Path | None = None,
    *,
    mirror: str | None = None,
    force: bool = False,
    log: Log = _stderr,
) -> Path:
    """Return CUDA_HOME of a working CUDA 12.4 tree at `dest`, building it first if needed.

    `dest` defaults to default_dest(). `mirror` overrides the Debian URI taken from this
    machine's apt sources. Safe to call from several processes at once (a lock file beside
    `dest`). Raises NoDebianSource, PackageMissing, ToolError or StepFailed.
    """
    dest = (dest or default_dest()).expanduser().absolute()
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest):
        problem = "rebuild requested" if force else problem_with(dest)
        if problem is None:
            log(f"{dest} is ready (nvcc {CUDA_RELEASE})")
            return cuda_home_of(dest)
        if mirror:
            source = AptSource(mirror.rstrip("/"), SUITE, COMPONENTS, None, "--mirror")
        else:
            source = find_debian_mirror()
        log(f"building {dest}: {problem}")
        log(f"Debian mirror: {source.uri} (from {source.origin})")
        manifest = _build(dest, source, log)
        log(f"ready in {manifest['build_seconds']} s: CUDA_HOME={cuda_home_of(dest)}")
        return cuda_home_of(dest)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Unpack Debian trixie's CUDA 12.4 toolkit into a private folder "
        "(no change to the system) and print its CUDA_HOME.",
    )
    parser.add_argument(
        "--dest", type=Path, default=default_dest(), help="tree folder (default: %(default)s)"
    )
    parser.add_argument(
        "--print-cuda-home",
        action="store_true",
        help="print only the CUDA_HOME path on stdout, no progress (for $(...))",
    )
    parser.add_argument("--mirror", help="Debian archive URI (default: from /etc/apt sources)")
    parser.add_argument("--force", action="store_true", help="rebuild even if the tree works")
    args = parser.parse_args(argv)
    try:
        home = ensure_cuda12_toolkit(
            args.dest,
            mirror=args.mirror,
            force=args.force,
            log=_quiet if args.print_cuda_home else _stderr,
        )
    except WheelwrightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.return_code
    print(home)
    return 0


if __name__ == "__main__":
    sys.exit(main())
