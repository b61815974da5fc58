"""Cross-compiling a row for another CPU architecture on the host backend (aarch64 on x86_64).

A row of another arch builds here with the same plan, the same frontend, the same repair and
the same contract as a native build; only the compilers and what describes the target change:

- ``CC``/``CXX``/``LDSHARED``/``CUDAHOSTCXX``/``NVCC_CCBIN``: Debian's cross compilers
  (``aarch64-linux-gnu-gcc``/``-g++``, package ``g++-aarch64-linux-gnu``);
- ``_PYTHON_HOST_PLATFORM`` (``linux-aarch64``, the wheel's platform tag) and
  ``_PYTHON_SYSCONFIGDATA_NAME`` naming a sysconfig data module written for the target from the
  row's own CPython's (``EXT_SUFFIX`` ``.cpython-312-aarch64-linux-gnu.so``, ``MULTIARCH``, the
  compilers), the way crossenv and CPython's own cross builds describe a target;
- for a CUDA row, a cross CUDA_HOME: the row's x86_64 toolkit (nvcc, cicc, ptxas: device code
  does not depend on the host CPU) with its own ``nvcc.profile``, the toolkit's headers under
  ``targets/<arch>-linux/include`` (where nvcc looks when its host compiler is a cross
  compiler), and the target's CUDA runtime (the train's pinned ``nvidia-cuda-runtime``, or the
  runtime package the wheel declares, see :func:`runtime_pin`) for that arch under
  ``lib``/``lib64``/``targets/<arch>-linux/lib``, and a link stub of the driver for that arch in
  its ``stubs`` folder (release/wheelbuild/host/driver_stub.py: ``CUDA::cuda_driver``, ``-lcuda``).

No emulation is needed to build: the compilers run natively. Projects whose build runs target
code (a PyTorch extension imports torch) need the target's Python: those rows build in the
row's container image under emulation, or on a native machine.

:func:`cross_env` and :func:`target_sysconfig` are pure; :func:`prepare_cross` writes the
target's files into the cache (once, atomically) and finds the compilers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pprint
import shutil
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from release.core import proc
from release.core.errors import ToolError
from release.core.locks import install_once
from release.core.log import say
from release.core.machine import PythonInfo
from release.core.pip import NO_PIP_CONFIG, pip_download, platform_tags
from release.emulate import binfmt
from release.policy.matrix import Row
from release.resources.cpus import Cpu, host_arch
from release.resources.cpus import arch as cpu_arch
from release.wheelbuild.host.cmake_toolchain import (
    TargetPython,
    check_toolchain,
    findpython_diagnosis,
    toolchain_env,
    toolchain_text,
    write_toolchain,
)
from release.wheelbuild.host.driver_stub import STUB_NAME, ensure_driver_stub
from release.wheelbuild.host.link_check import link_diagnosis
from release.wheelbuild.host.meson_cross import meson_cross_text, write_meson_cross
from release.wheelbuild.repair.contract import requirement_text
from release.wheelbuild.toolchain import Toolchain

DOWNLOAD_TIMEOUT_S = 600.0
RUNTIME_MEMBER_CAP = 256 * 1024 * 1024  # libcudart is under 1 MiB; zipfile stops reading at the declared size
PROBE_TIMEOUT_S = 60.0
# What a cross CUDA_HOME holds, versioned: a new layout makes new homes instead of reusing old ones
# (2: the runtime's static archives too; gcc/g++ naming the cross compilers; 3: the driver's link stub).
CROSS_HOME_LAYOUT = 3
# The host compiler names nvcc looks up on its PATH, and whether each is the C++ driver.
HOST_COMPILERS = {"gcc": False, "cc": False, "g++": True, "c++": True}


@dataclasses.dataclass(frozen=True)
class CrossTarget:
    """Everything a cross build of one row uses besides the host backend's usual tools."""

    arch: str  # "aarch64"
    triplet: str  # "aarch64-linux-gnu"
    cc: Path
    cxx: Path
    sysconfig_dir: Path  # holds the target's sysconfig data module
    sysconfig_name: str  # "_sysconfigdata__linux_aarch64-linux-gnu"
    cuda_home: Path | None  # the cross CUDA_HOME of a CUDA row
    meson_cross_file: Path | None = None  # meson's description of the target (meson_cross_text)
    cmake_toolchain: Path | None = None  # CMake's (release.wheelbuild.host.cmake_toolchain)

    def describe(self) -> str:
        cuda = "" if self.cuda_home is None else f"; CUDA_HOME {self.cuda_home} (the target's CUDA runtime)"
        return f"cross-compiling for {self.arch} with {self.cxx.name}{cuda}"


# --------------------------------------------------------------------------- pure


def _cpu(arch: str) -> Cpu:  # release/resources/cpus.toml's arch; ToolError for one it does not know
    if (cpu := cpu_arch(arch)) is None:
        raise ToolError(f"no cross compilers are known for {arch} (release/resources/cpus.toml)")
    return cpu


def sysconfig_name(target: str) -> str:
    """CPython's name of a platform's sysconfig data module (no ABI flags: a GIL build)."""
    return f"_sysconfigdata__linux_{_cpu(target).triplet}"


def target_sysconfig(
    host_vars: Mapping[str, Any], *, host: str, target: str, cc: str, cxx: str
) -> dict[str, Any]:
    """The target's sysconfig variables from the host CPython's: its triplet and arch in every
    text value (``EXT_SUFFIX``, ``SOABI``, ``MULTIARCH``, ``HOST_GNU_TYPE``), its compilers."""
    host_triplet, target_triplet = _cpu(host).triplet, _cpu(target).triplet

    def swap(value: object) -> object:
        if not isinstance(value, str):
            return value
        return value.replace(host_triplet, target_triplet).replace(f"-{host}-", f"-{target}-")

    out = {name: swap(value) for name, value in host_vars.items()}
    out["MULTIARCH"] = target_triplet
    out["HOST_GNU_TYPE"] = target_triplet
    out["BUILD_GNU_TYPE"] = host_vars.get("BUILD_GNU_TYPE", host_triplet)
    for name, tool in (("CC", cc), ("CXX", cxx), ("LDSHARED", cc), ("LDCXXSHARED", cxx), ("BLDSHARED", cc)):
        value = host_vars.get(name)
        if isinstance(value, str) and value.split():
            out[name] = " ".join([tool, *value.split()[1:]])
    return out


def cross_env(target: CrossTarget) -> dict[str, str]:
    """The variables a cross build sets over the host build's environment."""
    cc, cxx = str(target.cc), str(target.cxx)
    values = {
        "CC": cc,
        "CXX": cxx,
        "LDSHARED": f"{cc} -shared",
        "LDCXXSHARED": f"{cxx} -shared",
        "CUDAHOSTCXX": cxx,
        "NVCC_CCBIN": cxx,
        "_PYTHON_HOST_PLATFORM": f"linux-{target.arch}",
        "_PYTHON_SYSCONFIGDATA_NAME": target.sysconfig_name,
        "PYTHONPATH": str(target.sysconfig_dir),
        "WHEELWRIGHT_CROSS_TARGET": target.triplet,
    }
    if target.cmake_toolchain is not None:
        values.update(toolchain_env(target.cmake_toolchain))
    return values


def config_settings(backend_name: str, target: CrossTarget | None) -> dict[str, str]:
    """The config settings a cross build gives the project's build backend: meson-python its
    cross file (``setup-args``, as its docs say for cross builds); other backends read the
    compilers and the target's sysconfig from the environment (:func:`cross_env`) and get none."""
    if target is None or target.meson_cross_file is None or backend_name != "mesonpy":
        return {}
    return {"setup-args": f"--cross-file={target.meson_cross_file}"}


# Build requirements whose native libraries an extension links at build time: a cross build's
# environment holds them for this machine, so the link cannot succeed (what links them, said).
LINKED_BUILD_REQUIREMENTS = {
    "torch": "a PyTorch extension links libtorch, libc10 and libtorch_cuda from the build environment",
}


def linked_requirement_problem(requires: Sequence[str], arch: str) -> str | None:
    """Why a project whose ``[build-system].requires`` are ``requires`` cannot be cross-compiled
    for ``arch``, or None: a requirement in :data:`LINKED_BUILD_REQUIREMENTS`."""
    for text in requires:
        try:
            name = canonicalize_name(Requirement(text).name)
        except InvalidRequirement:
            continue
        if name in LINKED_BUILD_REQUIREMENTS:
            return (
                f"its build requires {text!r}: {LINKED_BUILD_REQUIREMENTS[name]}, and a cross build's environment "
                f"holds them for this machine, not for {arch}"
            )
    return None


def nvcc_profile(real_home: Path, cross_home: Path, arch: str) -> str:
    """``nvcc.profile`` of the cross CUDA_HOME: the real toolkit's tools, the target's folders."""
    target = cross_home / "targets" / f"{arch}-linux"
    return (
        f"TOP              = {real_home}\n\n"
        "CICC_PATH        = $(TOP)/nvvm/bin\n"
        "NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice\n\n"
        "LD_LIBRARY_PATH += $(TOP)/lib:\n"
        # the cross home's bin first: its gcc/g++ are the cross compilers (see HOST_COMPILERS)
        f"PATH            += $(CICC_PATH):{cross_home}/bin:{real_home}/bin:\n\n"
        f'INCLUDES        +=  "-I{target}/include" $(_SPACE_)\n'
        f'SYSTEM_INCLUDES +=  "-isystem" "{target}/include/cccl" $(_SPACE_)\n\n'
        f'LIBRARIES        =+ $(_SPACE_) "-L{target}/lib/stubs" "-L{target}/lib"\n\n'
        "CUDAFE_FLAGS    +=\nPTXAS_FLAGS     +=\n"
    )


def runtime_pin(row: Row) -> str:
    """The target's CUDA runtime a cross build links against: the train's pinned runtime in
    ``pypi_toolchain`` (``nvidia-cuda-runtime==13.0.96``), else the runtime package the wheel
    declares, at the train (``nvidia-cuda-runtime-cu12==12.4.*``: what pip installs beside it;
    a CUDA 12 train has no PyPI toolchain to pin)."""
    for pin in row.pypi_toolchain:
        name = pin.split("==")[0].strip().lower().replace("_", "-")
        if name.startswith("nvidia-cuda-runtime") and "==" in pin:
            return pin
    for package in row.cuda_packages:
        declared = requirement_text(package, row.train)
        if "==" in declared:
            return declared
    raise ToolError(
        f"row {row.id}: cross-compiling for {row.platform} needs the {row.platform} CUDA runtime, and the "
        f"train {row.train} pins no nvidia-cuda-runtime in pypi_toolchain and declares no runtime package in "
        f'cuda_packages (rows.toml [train."{row.train}"]); add one, or build this row on a native machine or in '
        "its container image"
    )


def cross_note(row: Row, host: str | None = None) -> str:
    """The one line a plan and a build say about a cross build."""
    triplet = _cpu(row.platform).triplet
    return (
        f"{row.platform} row on this {host or host_arch()} machine: cross-compiled with {triplet}-g++ "
        f"(no emulation while building); _PYTHON_HOST_PLATFORM=linux-{row.platform} and the target's sysconfig "
        "name the wheel's tag and extension suffix"
    )


# --------------------------------------------------------------------------- effects


def cross_problem(row: Row, env: Mapping[str, str]) -> str | None:
    """Why ``row`` cannot be cross-compiled here, or None."""
    cpu = cpu_arch(row.platform)
    if cpu is None or not cpu.cross_packages:
        return f"no cross compilers are known for {row.platform}"
    triplet = cpu.triplet
    missing = [t for t in ("gcc", "g++") if shutil.which(f"{triplet}-{t}", path=env.get("PATH")) is None]
    if missing:
        return (
            f"cross-compiling needs {', '.join(f'{triplet}-{t}' for t in missing)} on PATH: apt-get install "
            f"{' '.join(cpu.cross_packages)} (scripts/setup.sh installs them)"
        )
    return None


def _compilers(row: Row, env: Mapping[str, str]) -> tuple[Path, Path]:
    problem = cross_problem(row, env)
    if problem is not None:
        raise ToolError(f"row {row.id}: {problem}")
    triplet = _cpu(row.platform).triplet
    cc, cxx = (shutil.which(f"{triplet}-{tool}", path=env.get("PATH")) for tool in ("gcc", "g++"))
    assert cc is not None and cxx is not None
    return Path(cc), Path(cxx)


def write_sysconfig(
    python: PythonInfo, target: str, cc: Path, cxx: Path, cache_dir: Path
) -> tuple[Path, TargetPython]:
    """The folder holding the target's sysconfig data module for ``python`` (made once), and the
    target's CPython as CMake's FindPython is told it (its SOABI)."""
    result = proc.run(
        [
            str(python.path),
            "-c",
            "import json, sysconfig; print(json.dumps(sysconfig.get_config_vars(), default=str))",
        ],
        # the host's own description: a caller's _PYTHON_SYSCONFIGDATA_NAME/_PYTHON_HOST_PLATFORM would change it
        env={**{k: v for k, v in os.environ.items() if not k.startswith("_PYTHON_")}, **NO_PIP_CONFIG},
        timeout=PROBE_TIMEOUT_S,
        step=f"reading {python.path}'s sysconfig",
    )
    host_vars = json.loads(result.stdout)
    data = target_sysconfig(host_vars, host=host_arch(), target=target, cc=str(cc), cxx=str(cxx))
    text = f"# wheelwright: {target} sysconfig for a cross build, from {python.path}\nbuild_time_vars = {pprint.pformat(data, width=120)}\n"
    key = hashlib.sha256(text.encode()).hexdigest()[:16]
    final = cache_dir / "cross" / target / f"sysconfig-{python.version}-{key}"
    module = f"{sysconfig_name(target)}.py"

    def fill(tmp: Path) -> None:
        (tmp / module).write_text(text, encoding="utf-8")

    install_once(final, ready=lambda f: (f / module).is_file(), fill=fill, holder=f"the {target} sysconfig")
    soabi = data.get("SOABI")
    if not isinstance(soabi, str) or not soabi:
        raise ToolError(f"{python.path}'s sysconfig has no SOABI: a cross build cannot name its modules")
    return final, TargetPython(".".join(python.version.split(".")[:2]), soabi)


def _real_include(home: Path) -> Path:
    targets = home / "targets" / (_cpu(host_arch()).cuda_target or "")
    for folder in (home / "include", targets / "include"):
        if (folder / "cuda_runtime.h").is_file():
            return folder
    raise ToolError(f"no cuda_runtime.h under {home}/include or {targets}/include")


def _download_runtime(pin: str, row: Row, dest: Path, env: Mapping[str, str]) -> Path:
    """The target's CUDA runtime wheel ``pin`` for ``arch``, downloaded into ``dest``."""
    arch, row_id = row.platform, row.id
    say(row_id, f"downloading {pin} for {arch} (the target's CUDA runtime, once)...")
    pip_download(
        [pin],
        dest,
        env=env,
        platforms=platform_tags(row.manylinux, arch),
        timeout=DOWNLOAD_TIMEOUT_S,
        step=f"pip download {pin} for {arch}",
    )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ToolError(f"pip download {pin} for {arch} gave {len(wheels)} wheels in {dest}")
    return wheels[0]


def is_runtime_library(name: str) -> bool:
    """A file of a CUDA runtime wheel's ``lib/`` a cross build links: the shared runtime, and the
    static archives (``libcudart_static.a``: CMake's CUDA compiler check links it by default, and a
    CMake project whose check fails quietly builds no device code; ``libcudadevrt.a``: relocatable
    device code links it)."""
    return ".so" in name or name.endswith(".a")


def extract_libraries(wheel: Path, lib: Path) -> None:
    """The libraries under a ``lib/`` folder of a CUDA runtime wheel (:func:`is_runtime_library`),
    streamed into ``lib``; a member that declares more than :data:`RUNTIME_MEMBER_CAP` bytes is refused."""
    with zipfile.ZipFile(wheel) as zf:
        for info in zf.infolist():
            parts = Path(info.filename).parts
            if len(parts) >= 2 and parts[-2] == "lib" and is_runtime_library(parts[-1]) and not info.is_dir():
                if info.file_size > RUNTIME_MEMBER_CAP:
                    raise ToolError(
                        f"{wheel.name}: {info.filename} says {info.file_size} bytes; a CUDA runtime library is far smaller"
                    )
                with zf.open(info) as src, (lib / parts[-1]).open("wb") as out:
                    shutil.copyfileobj(src, out)
                (lib / parts[-1]).chmod(0o755)


def cross_cuda_home(
    row: Row, toolchain: Toolchain, compilers: tuple[Path, Path], cache_dir: Path, env: Mapping[str, str]
) -> Path:
    """The cross CUDA_HOME of a CUDA row (made once per toolchain, runtime pin and compilers).

    Its ``bin`` holds ``gcc``/``g++`` (and ``cc``/``c++``) naming the cross compilers, first on
    nvcc's PATH through its profile: CUDA 12.4's nvcc ignores ``NVCC_CCBIN`` (with only that set,
    it compiled the host side for x86_64), and a toolkit may carry host compiler wrappers of its
    own (Debian's does), which must not be the ones found."""
    arch = row.platform
    pin = runtime_pin(row)
    real = toolchain.cuda_home.resolve()
    include = _real_include(real)
    nvcc = real / "bin" / "nvcc"
    if not nvcc.is_file():
        raise ToolError(f"no nvcc under {real}/bin to cross-compile with")
    cc, cxx = compilers
    key = hashlib.sha256(
        f"{CROSS_HOME_LAYOUT}\0{real}\0{toolchain.full_version}\0{pin}\0{arch}\0{cc}\0{cxx}".encode()
    ).hexdigest()[:16]
    final = cache_dir / "cross" / arch / f"cuda-{toolchain.full_version}-{key}"

    def fill(tmp: Path) -> None:
        wheel = _download_runtime(pin, row, tmp / "download", env)
        lib = tmp / "targets" / f"{arch}-linux" / "lib"
        lib.mkdir(parents=True)
        extract_libraries(wheel, lib)
        major = toolchain.version.split(".")[0]
        soname = f"libcudart.so.{major}"
        if not (lib / soname).is_file():
            raise ToolError(f"{wheel.name} holds no {soname} for {arch}")
        (lib / "libcudart.so").symlink_to(soname)
        # CUDA::cuda_driver and -lcuda: the driver's link stub, where a toolkit keeps it
        (lib / "stubs").mkdir()
        shutil.copy2(ensure_driver_stub(include, cc, arch, cache_dir) / STUB_NAME, lib / "stubs" / STUB_NAME)
        (tmp / "targets" / f"{arch}-linux" / "include").symlink_to(include)
        for name in ("lib", "lib64"):
            (tmp / name).symlink_to(f"targets/{arch}-linux/lib")
        (tmp / "include").symlink_to(include)
        if (real / "nvvm").exists():
            (tmp / "nvvm").symlink_to(real / "nvvm")
        (tmp / "bin").mkdir()
        for entry in sorted((real / "bin").iterdir()):
            if entry.name not in ("nvcc", "nvcc.profile", *HOST_COMPILERS):
                (tmp / "bin" / entry.name).symlink_to(entry)
        for name, use_cxx in HOST_COMPILERS.items():
            (tmp / "bin" / name).symlink_to(cxx if use_cxx else cc)
        shutil.copy2(nvcc, tmp / "bin" / "nvcc")  # a copy: nvcc reads nvcc.profile beside itself
        (tmp / "bin" / "nvcc.profile").write_text(nvcc_profile(real, final, arch), encoding="utf-8")
        (tmp / "download" / wheel.name).unlink()
        (tmp / "download").rmdir()
        (tmp / "runtime.txt").write_text(f"{pin}\n{wheel.name}\n", encoding="utf-8")

    install_once(
        final,
        ready=lambda f: (f / "runtime.txt").is_file(),
        fill=fill,
        holder=f"the {arch} CUDA_HOME for CUDA {toolchain.full_version}",
    )
    missing = static_runtime_note(pin, arch, final / "targets" / f"{arch}-linux" / "lib")
    if missing:
        say(row.id, missing)
    return final


def static_runtime_note(pin: str, arch: str, lib: Path) -> str | None:
    """What a build should know when the target's runtime wheel has no static runtime (the CUDA
    12 ``nvidia-cuda-runtime-cu12`` wheels ship none), or None."""
    if (lib / "libcudart_static.a").is_file():
        return None
    return (
        f"note: {pin} for {arch} ships no libcudart_static.a: CMake's CUDA compiler check links it, so a "
        "CMake project finds no CUDA compiler in this cross build (one that falls back to CPU code then "
        "builds a wheel without device code, which the audit fails); nvcc-driven builds (setuptools) are "
        f"unaffected. Build such a row in its container image or on an {arch} machine"
    )


def cross_diagnosis(output: str, arch: str) -> str | None:
    """The first line a failed cross build's log earns: a link against another machine's files
    (:func:`link_diagnosis`), or FindPython refusing the interpreter for want of emulation
    (:func:`findpython_diagnosis`); None when the log shows neither."""
    return link_diagnosis(output, arch) or findpython_diagnosis(
        output, arch, binfmt.capability(arch).fix
    )  # reads binfmt_misc for the fix


def prepare_cross(
    row: Row, python: PythonInfo, toolchain: Toolchain | None, cache_dir: Path, env: Mapping[str, str]
) -> tuple[CrossTarget, Toolchain | None]:
    """The cross target of ``row`` and the toolchain to build it with (the cross CUDA_HOME's)."""
    arch = row.platform
    cc, cxx = _compilers(row, env)
    sysdir, target_python = write_sysconfig(python, arch, cc, cxx, cache_dir)
    cross_tc = toolchain
    home: Path | None = None
    if toolchain is not None:
        home = cross_cuda_home(row, toolchain, (cc, cxx), cache_dir, env)
        cross_tc = dataclasses.replace(
            toolchain, cuda_home=home, nvcc=home / "bin" / "nvcc", lib_dir=home / "lib"
        )
    meson = write_meson_cross(
        meson_cross_text(arch, _cpu(arch).triplet, cc, cxx, None if home is None else home / "bin" / "nvcc"),
        arch,
        cache_dir,
    )
    sysroot = cc.resolve().parent.parent / _cpu(arch).triplet
    runs = binfmt.capability(arch).runs  # the target's programs run here: CMake may run them (through env)
    toolchain_file = write_toolchain(
        toolchain_text(
            arch,
            cc=cc,
            cxx=cxx,
            sysroot=sysroot if sysroot.is_dir() else None,
            cuda_home=home,
            cuda_target=None if home is None else home / "targets" / f"{arch}-linux",
            math_libs=None if toolchain is None else toolchain.math_libs,
            python=target_python,
            emulator=Path(proc.which("env", path=env.get("PATH"))) if runs else None,
        ),
        arch,
        cache_dir,
    )
    check_toolchain(toolchain_file, arch, row.id)
    target = CrossTarget(
        arch, _cpu(arch).triplet, cc, cxx, sysdir, sysconfig_name(arch), home, meson, toolchain_file
    )
    return target, cross_tc
