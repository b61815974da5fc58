"""Build tinyaxpy: nvcc (CUDA) or g++ (CPU) for the kernels library, g++ for the binding.

The build environment is the contract in README.md: TINYAXPY_VARIANT (cpu | cuXYZ),
CUDA_HOME and TORCH_CUDA_ARCH_LIST for CUDA variants, optional CMAKE_CUDA_ARCHITECTURES,
TINYAXPY_EXTRA_NVCC_FLAGS and TINYAXPY_KERNEL_CACHE. Nothing is detected or defaulted.
"""

from __future__ import annotations

import hashlib
import json
import os
import pprint
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

BASE_VERSION = "0.3.0"
HERE = Path(__file__).resolve().parent
KERNEL_LIB = "libtinyaxpy_kernels.so"
INCLUDE_DIR = HERE / "tinyaxpy" / "include"
# Where each CUDA major's pip runtime package puts libcudart, seen from tinyaxpy/lib/.
CUDART_HOME = {13: "nvidia/cu13/lib", 12: "nvidia/cuda_runtime/lib"}


def fail(message: str) -> NoReturn:
    raise SystemExit(f"tinyaxpy build error: {message}")


def log(message: str) -> None:
    print(f"tinyaxpy: {message}", file=sys.stderr, flush=True)


def run(cmd: list[str]) -> str:
    log("$ " + " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        fail(f"{cmd[0]} exited {proc.returncode}\n{proc.stdout}{proc.stderr}")
    return proc.stdout


@dataclass(frozen=True)
class Arch:
    number: str  # "75", "90a", "120"
    ptx: bool
    label: str  # as TORCH_CUDA_ARCH_LIST writes it: "7.5", "12.0+PTX"
    sass: bool = True  # False only for a CMake "N-virtual" entry: PTX without SASS


def parse_torch_arch_list(text: str) -> list[Arch]:
    archs: list[Arch] = []
    for item in text.replace(" ", ";").split(";"):
        if not item:
            continue
        if item.lower().endswith("+ptx") and not item.endswith("+PTX"):
            fail(f"TORCH_CUDA_ARCH_LIST item {item!r}: write '+PTX' in upper case")
        m = re.fullmatch(r"(\d+)\.(\d)([af]?)(\+PTX)?", item)
        if m is None:
            fail(f"TORCH_CUDA_ARCH_LIST item {item!r} is not of the form 8.0, 9.0a or 12.0+PTX")
        arch = Arch(m[1] + m[2] + m[3], ptx=m[4] is not None, label=item)
        if any(a.number == arch.number for a in archs):
            fail(f"TORCH_CUDA_ARCH_LIST names {item!r} twice")
        archs.append(arch)
    if not archs:
        fail("TORCH_CUDA_ARCH_LIST is empty")
    return archs


def parse_cmake_archs(text: str) -> tuple[set[str], set[str]]:
    """CMAKE_CUDA_ARCHITECTURES -> (SASS numbers, PTX numbers); a bare N means both."""
    sass: set[str] = set()
    ptx: set[str] = set()
    for item in filter(None, text.split(";")):
        m = re.fullmatch(r"(\d+[af]?)(-real|-virtual)?", item)
        if m is None:
            fail(f"CMAKE_CUDA_ARCHITECTURES item {item!r} is not N, N-real or N-virtual")
        if m[2] != "-virtual":
            sass.add(m[1])
        if m[2] != "-real":
            ptx.add(m[1])
    return sass, ptx


def gencode_flags(archs: list[Arch]) -> list[str]:
    flags: list[str] = []
    for a in archs:
        if a.sass:
            flags += ["-gencode", f"arch=compute_{a.number},code=sm_{a.number}"]
        if a.ptx:
            flags += ["-gencode", f"arch=compute_{a.number},code=compute_{a.number}"]
    return flags


@dataclass(frozen=True)
class Config:
    variant: str
    cuda: tuple[int, int] | None
    archs: list[Arch] = field(default_factory=list)
    cuda_home: Path | None = None
    nvcc_version: str = ""

    @property
    def version(self) -> str:
        return BASE_VERSION if self.cuda is None else f"{BASE_VERSION}+{self.variant}"

    @property
    def requires(self) -> list[str]:
        if self.cuda is None:
            return []
        major, minor = self.cuda
        name = "nvidia-cuda-runtime" if major >= 13 else f"nvidia-cuda-runtime-cu{major}"
        return [f"{name}=={major}.{minor}.*"]

    @property
    def cudart_rpath(self) -> str:
        return "" if self.cuda is None else f"$ORIGIN/../../{CUDART_HOME[self.cuda[0]]}"


def load_config() -> Config:
    variant = os.environ.get("TINYAXPY_VARIANT", "")
    if variant == "cpu":
        return Config(variant="cpu", cuda=None)
    m = re.fullmatch(r"cu(\d\d)(\d)", variant)
    if m is None:
        fail(f"TINYAXPY_VARIANT must be 'cpu' or 'cuXYZ' (e.g. cu130, cu126), got {variant!r}")
    cuda = (int(m[1]), int(m[2]))
    if cuda[0] not in CUDART_HOME:
        fail(f"TINYAXPY_VARIANT={variant}: CUDA {cuda[0]} is not supported (only 12.x and 13.x)")
    home = os.environ.get("CUDA_HOME", "")
    if not home or not (Path(home) / "bin" / "nvcc").is_file():
        fail(f"TINYAXPY_VARIANT={variant} needs CUDA_HOME with bin/nvcc; CUDA_HOME={home!r}")
    arch_text = os.environ.get("TORCH_CUDA_ARCH_LIST", "").strip()
    cmake_text = os.environ.get("CMAKE_CUDA_ARCHITECTURES", "").strip()
    if not arch_text and not cmake_text:
        fail(
            f"TINYAXPY_VARIANT={variant} needs TORCH_CUDA_ARCH_LIST (e.g. '8.0;9.0;12.0+PTX')"
            " or CMAKE_CUDA_ARCHITECTURES; GPU architectures are never detected or defaulted"
        )
    if not arch_text:
        # A plain CMake-style list alone: the only way to ask for PTX without SASS ("80-virtual").
        sass_set, ptx_set = parse_cmake_archs(cmake_text)
        if not sass_set and not ptx_set:
            fail("CMAKE_CUDA_ARCHITECTURES names no architecture")
        archs = [
            Arch(
                n,
                ptx=n in ptx_set,
                label=f"{n}{'-real' if n in sass_set else ''}{'-virtual' if n in ptx_set else ''}",
                sass=n in sass_set,
            )
            for n in sorted(sass_set | ptx_set, key=lambda x: int(re.sub(r"[af]$", "", x)))
        ]
    else:
        archs = parse_torch_arch_list(arch_text)
    if cmake_text and arch_text:
        want = ({a.number for a in archs}, {a.number for a in archs if a.ptx})
        got = parse_cmake_archs(cmake_text)
        if got != want:
            fail(
                f"CMAKE_CUDA_ARCHITECTURES={cmake_text!r} (SASS {sorted(got[0])}, PTX {sorted(got[1])})"
                f" disagrees with TORCH_CUDA_ARCH_LIST={arch_text!r}"
                f" (SASS {sorted(want[0])}, PTX {sorted(want[1])})"
            )
    nvcc = Path(home) / "bin" / "nvcc"
    version_text = run([str(nvcc), "--version"])
    vm = re.search(r"release (\d+)\.(\d+)", version_text)
    if vm is None or (int(vm[1]), int(vm[2])) != cuda:
        found = f"{vm[1]}.{vm[2]}" if vm else "no version"
        fail(f"TINYAXPY_VARIANT={variant} needs nvcc {cuda[0]}.{cuda[1]}, but {nvcc} reports {found}")
    return Config(variant, cuda, archs, Path(home), version_text)


def find_cudart(cfg: Config) -> Path:
    """The toolkit's libcudart.so.N (the SONAME file; PyPI toolchains have no libcudart.so)."""
    assert cfg.cuda_home is not None and cfg.cuda is not None
    soname = f"libcudart.so.{cfg.cuda[0]}"
    for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
        if (cfg.cuda_home / sub / soname).exists():
            return cfg.cuda_home / sub / soname
    fail(f"no {soname} under CUDA_HOME={cfg.cuda_home} (lib64, lib, targets/*/lib)")


def tool_version(tool: str) -> str:
    """The tool's name and what ``--version`` says: its identity, not where this machine keeps it."""
    path = shutil.which(tool)
    if path is None:
        fail(f"{tool} not found on PATH")
    return Path(path).name + "\n" + run([path, "--version"])


def kernel_recipe(cfg: Config, out: Path, temp: Path) -> tuple[list[list[str]], dict[str, object]]:
    """The commands that build the kernels library, and what its cache key hashes.

    The key covers sources, toolchain and flags but no path of this build tree, so the four
    Python rows of one train share one device compile. It names the toolchain by what it is
    (versions, libcudart's sha256), not by where it lies (a cache under a home folder), because
    it lands in the wheel (``_build_info.py``); and it names the source file's absolute path,
    because nvcc's anonymous-namespace names follow it (a host build compiles at a fixed path).
    """
    cxx = os.environ.get("CXX", "g++")
    include = f"-I{INCLUDE_DIR}"
    if cfg.cuda is None:
        src = HERE / "csrc" / "axpy_cpu.cpp"
        flags = [
            "-O3",
            "-std=c++17",
            "-fvisibility=hidden",
            "-fPIC",
            "-shared",
            f"-Wl,-soname,{KERNEL_LIB}",
        ]
        cmds = [[cxx, *flags, include, str(src), "-o", str(out)]]
        key_parts: dict[str, object] = {"flags": flags, "toolchain": tool_version(cxx)}
    else:
        assert cfg.cuda_home is not None
        src = HERE / "csrc" / "axpy_cuda.cu"
        nvcc = str(cfg.cuda_home / "bin" / "nvcc")
        cudart = find_cudart(cfg)
        obj = temp / "axpy_cuda.o"
        # nvcc compiles (host and device code, one fatbinary for the row's architectures);
        # g++ links, as PyTorch's and CMake's builds do: an nvcc link would add a second
        # device-link fatbinary repeating every cubin, and needs a libcudart.so dev link.
        cflags = [
            "-c",
            "-O3",
            "-std=c++17",
            "-cudart",
            "shared",
            *gencode_flags(cfg.archs),
            "-Xcompiler",
            "-fPIC,-fvisibility=hidden",
            *os.environ.get("TINYAXPY_EXTRA_NVCC_FLAGS", "").split(),
        ]
        # -L only says where libcudart.so.N is at link time; it is not recorded in the ELF.
        # RUNPATH (new dtags) reaches the pip runtime package; "$ORIGIN" needs no quoting
        # because no shell runs these commands.
        lflags = [
            "-shared",
            f"-Wl,-soname,{KERNEL_LIB}",
            f"-l:{cudart.name}",
            "-Wl,--enable-new-dtags",
            f"-Wl,-rpath,{cfg.cudart_rpath}",
        ]
        cmds = [
            [nvcc, *cflags, include, str(src), "-o", str(obj)],
            [cxx, str(obj), "-o", str(out), f"-L{cudart.parent}", *lflags],
        ]
        env = [
            f"{v}={os.environ.get(v, '')}" for v in ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS", "NVCC_CCBIN")
        ]
        key_parts = {
            "flags": [cflags, lflags],
            "cudart": hashlib.sha256(cudart.read_bytes()).hexdigest(),
            "toolchain": "\n".join([cfg.nvcc_version, tool_version(cxx), *env]),
        }
    sources = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (src, INCLUDE_DIR / "tinyaxpy.h")}
    return cmds, {"variant": cfg.variant, "sources": sources, "compiled_at": str(src), **key_parts}


def build_kernels(cfg: Config, out: Path, temp: Path) -> str:
    temp.mkdir(parents=True, exist_ok=True)
    cmds, inputs = kernel_recipe(cfg, out, temp)
    key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    cache_env = os.environ.get("TINYAXPY_KERNEL_CACHE", "")
    cache = Path(cache_env) if cache_env else None
    if cache is not None and not cache.is_absolute():
        fail(f"TINYAXPY_KERNEL_CACHE must be an absolute path, got {cache_env!r}")
    if cache is not None and (cache / f"{key}.so").is_file():
        log(f"kernel cache hit {key}")
        shutil.copyfile(cache / f"{key}.so", out)
        out.chmod(0o755)  # a shared library, the same mode as a fresh build: wheels stay byte-identical
        return key
    if cache is not None:
        log(f"kernel cache miss {key}")
    start = time.monotonic()
    for cmd in cmds:
        run(cmd)
    log(f"kernels library built in {time.monotonic() - start:.1f} s")
    out.chmod(0o755)
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        for suffix, data in (
            (".json", json.dumps(inputs, indent=1).encode()),
            (".so", out.read_bytes()),
        ):
            fd, tmp = tempfile.mkstemp(dir=cache, prefix=f".{key}.", suffix=".tmp")
            os.fchmod(fd, 0o755 if suffix == ".so" else 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            Path(tmp).replace(cache / f"{key}{suffix}")  # atomic: readers see all or nothing
    return key


def build_binding(pkg_dir: Path) -> Path:
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    out = pkg_dir / f"_tinyaxpy{suffix}"
    run(
        [
            os.environ.get("CXX", "g++"),
            "-O2",
            "-DNDEBUG",
            "-std=c++17",
            "-fvisibility=hidden",
            "-shared",
            "-fPIC",
            f"-I{sysconfig.get_paths()['include']}",
            f"-I{INCLUDE_DIR}",
            str(HERE / "csrc" / "_tinyaxpy.cpp"),
            "-o",
            str(out),
            f"-L{pkg_dir / 'lib'}",
            "-ltinyaxpy_kernels",
            "-Wl,--enable-new-dtags",
            "-Wl,-rpath,$ORIGIN/lib",
        ]
    )
    return out


class BuildTinyaxpy(build_ext):
    """Replaces setuptools' compiler driving with the two direct compiler calls above."""

    def _pkg_dir(self) -> Path:
        return (HERE if self.inplace else Path(self.build_lib)) / "tinyaxpy"

    def get_outputs(self) -> list[str]:
        pkg = self._pkg_dir()
        binding = pkg / f"_tinyaxpy{sysconfig.get_config_var('EXT_SUFFIX')}"
        return [str(p) for p in (binding, pkg / "lib" / KERNEL_LIB, pkg / "_build_info.py")]

    def run(self) -> None:
        cfg = CONFIG
        pkg_dir = self._pkg_dir()
        (pkg_dir / "lib").mkdir(parents=True, exist_ok=True)
        temp = Path(self.build_temp).resolve() / cfg.variant
        key = build_kernels(cfg, pkg_dir / "lib" / KERNEL_LIB, temp)
        build_binding(pkg_dir)
        info = {
            "version": cfg.version,
            "variant": cfg.variant,
            "backend": "cpu" if cfg.cuda is None else "cuda",
            "cuda_version": None if cfg.cuda is None else f"{cfg.cuda[0]}.{cfg.cuda[1]}",
            "torch_cuda_arch_list": ";".join(a.label for a in cfg.archs) or None,
            "sass_archs": [f"sm_{a.number}" for a in cfg.archs],
            "ptx_archs": [f"compute_{a.number}" for a in cfg.archs if a.ptx],
            "requires_dist": cfg.requires,
            "cudart_rpath": cfg.cudart_rpath or None,
            "kernel_cache_key": key,
        }
        info_py = pkg_dir / "_build_info.py"
        info_py.write_text(
            "# Generated by tinyaxpy's setup.py; do not edit.\n"
            "from typing import Any\n\n"
            f"BUILD_INFO: dict[str, Any] = {pprint.pformat(info, sort_dicts=False)}\n"
        )


CONFIG = load_config()
for _name in ("TORCH_CUDA_ARCH_LIST", "CMAKE_CUDA_ARCHITECTURES", "TINYAXPY_EXTRA_NVCC_FLAGS"):
    if CONFIG.cuda is None and os.environ.get(_name):
        log(f"TINYAXPY_VARIANT=cpu: ignoring {_name} (a CPU wheel has no device code)")

setup(
    version=CONFIG.version,
    install_requires=CONFIG.requires,
    ext_modules=[Extension("tinyaxpy._tinyaxpy", sources=["csrc/_tinyaxpy.cpp"])],
    cmdclass={"build_ext": BuildTinyaxpy},
)
