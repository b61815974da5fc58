"""The two example packages built on their own, with no wheelwright: the "before" picture.

examples/lazysaxpy (scikit-build-core + CMake, a kernels library loaded lazily through
ctypes) and examples/torchsaxpy (a torch.utils.cpp_extension operator built against torch
2.14.1) are built the way their authors build them, ``pip wheel``, and each wheel is held to
what issue 11 says such a wheel lacks until wheelwright applies the row's contract: the
row's GPU architectures, the ``+cuXYZ`` label, a CUDA ``Requires-Dist``, a RUNPATH to the
pip CUDA runtime and a shared cudart. Each fact is asserted as it is today; when wheelwright
builds these packages, its own tests hold the result to the row.

Costs, measured on 2 shared cores: a lazysaxpy build takes 3-10 s (scikit-build-core
comes from the index, hence the ``network`` mark). torchsaxpy needs torch 2.14.1 and its CUDA
libraries (about 2.8 GB of wheels, 5.4 GB installed) in a build environment: the one a
wheelwright release of torchsaxpy uses, from exactly the project's ``[build-system] requires``
under wheelwright's pins, made once per machine under ``$WHEELWRIGHT_CACHE/build-envs/``
(about 50 s from the index) and shared with tests/integration/test_examples_release.py;
every build here then uses it with ``--no-build-isolation``. One CUDA build of the extension takes
about 40 s of CPU (70-80 s wall on a busy machine); the torch tests take about 100 s with the
environment cached. CI can keep that folder between runs (its name changes with the
requirements), or pay the download on each clean run.
"""

from __future__ import annotations

import email.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from release.binary.elf import read_elf
from release.binary.fatbin import all_entries, has_device_code
from release.core.machine import default_cache_dir, find_python
from release.policy.load import load_policy
from release.policy.matrix import expand
from release.wheelbuild.host import isolated

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
LAZY = ROOT / "examples" / "lazysaxpy"
TORCHEXT = ROOT / "examples" / "torchsaxpy"
KERNELS = "lazysaxpy/liblazysaxpy_kernels.so"
TORCH_C = "torchsaxpy/_C.abi3.so"
# Everything that would hand a build an arch list, a toolkit or CMake arguments: the
# standalone builds start without any of it, as on a person's fresh shell.
BUILD_KNOBS = (
    "CUDAARCHS",
    "CMAKE_ARGS",
    "SKBUILD_CMAKE_ARGS",
    "SKBUILD_CMAKE_DEFINE",
    "CMAKE_CUDA_ARCHITECTURES",
    "TORCH_CUDA_ARCH_LIST",
    "CUDA_HOME",
    "CUDA_PATH",
    "CUDACXX",
    "CUDAToolkit_ROOT",
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in BUILD_KNOBS}
    env.update(extra)
    return env


def _path_without_nvcc(path: str) -> str:
    return os.pathsep.join(
        d for d in path.split(os.pathsep) if d and not os.access(Path(d) / "nvcc", os.X_OK)
    )


def _row_cmake_archs(example: Path, row_id: str) -> str:
    rows = {r.id: r for r in expand(load_policy(example / "rows.toml"))}
    return rows[row_id].cmake_cuda_architectures


def pip_wheel(
    python: str, src: Path, out: Path, env: dict[str, str], *, isolation: bool = True
) -> subprocess.CompletedProcess[str]:
    """``pip wheel`` for ``python``'s environment, run by this environment's pip (``--python``:
    a build environment of wheelwright's has no pip of its own)."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "wheel",
        "--no-deps",
        "-v",
        "-w",
        str(out),
        str(src),
    ]
    if not isolation:
        cmd.insert(6, "--no-build-isolation")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, check=False, timeout=1200)


def built_wheel(proc: subprocess.CompletedProcess[str], out: Path) -> Path:
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-6000:]
    wheels = sorted(out.glob("*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@dataclass
class Library:
    needed: tuple[str, ...]
    runpath: tuple[str, ...]
    rpath: tuple[str, ...]
    device_code: frozenset[str]  # entry names: sm_75, compute_75; empty when none
    opens_driver: bool  # names libcuda.so.1, as only a statically linked cudart does


@dataclass
class WheelFacts:
    name: str
    version: str
    tags: list[str]
    requires: list[str]
    libraries: dict[str, Library] = field(default_factory=dict)


def inspect_wheel(wheel: Path, into: Path) -> WheelFacts:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(into)
    info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    meta = email.parser.Parser().parsestr((into / info / "METADATA").read_text(encoding="utf-8"))
    wheel_meta = email.parser.Parser().parsestr((into / info / "WHEEL").read_text(encoding="utf-8"))
    facts = WheelFacts(
        wheel.name, str(meta["Version"]), wheel_meta.get_all("Tag") or [], meta.get_all("Requires-Dist") or []
    )
    for name in names:
        if not Path(name).name.endswith(".so"):
            continue
        path = into / name
        elf = read_elf(path)
        code = frozenset(e.name for e in all_entries(path)) if has_device_code(path) else frozenset()
        facts.libraries[name] = Library(
            elf.needed, elf.runpath, elf.rpath, code, b"libcuda.so.1" in path.read_bytes()
        )
    return facts


def run_python(
    python: str, code: str, *, site: Path, cwd: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """Run ``code`` with ``site`` first on sys.path; it prints one JSON object."""
    full = dict(os.environ if env is None else env, PYTHONPATH=str(site), PYTHONNOUSERSITE="1")
    proc = subprocess.run(
        [python, "-c", code], env=full, cwd=cwd, capture_output=True, text=True, check=False, timeout=600
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def install_into(wheel: Path, site: Path) -> Path:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-compile",
            "--target",
            str(site),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return site


MAPS = "[l.split()[-1] for l in open('/proc/self/maps') if len(l.split()) == 6]"


# ---------------------------------------------------------------- the policies


@pytest.mark.parametrize(
    ("example", "row_ids"),
    [
        (LAZY, ["cpu-py312-x86_64", "cu130-py312-x86_64", "cu132-py312-x86_64"]),
        (TORCHEXT, ["cu130-py311-x86_64"]),
    ],
)
def test_each_example_has_its_own_policy(example: Path, row_ids: list[str]) -> None:
    policy = load_policy(example / "rows.toml")
    assert policy.project.name == example.name and policy.project.import_name == example.name
    assert (example / policy.project.path).resolve() == example
    assert [r.id for r in expand(policy)] == row_ids
    deps = [(d.package, d.variants) for d in policy.dependencies]
    assert deps == ([("torch", ("cu130",))] if example == TORCHEXT else [])


# ---------------------------------------------------------------- lazysaxpy


@pytest.fixture(scope="module")
def nvcc() -> str:
    found = shutil.which("nvcc")
    if found is None:
        pytest.skip("needs nvcc on PATH (CUDA builds of the examples)")
    return found


@pytest.fixture(scope="module")
def nvcc_default_archs(nvcc: str, tmp_path_factory: pytest.TempPathFactory) -> frozenset[str]:
    """What nvcc compiles for when it is given no architecture (CMake's default comes from it)."""
    d = tmp_path_factory.mktemp("nvcc-default")
    (d / "k.cu").write_text("__global__ void k() {}\n")
    subprocess.run([nvcc, "-c", str(d / "k.cu"), "-o", str(d / "k.o")], check=True, capture_output=True)
    return frozenset(e.name for e in all_entries(d / "k.o"))


@pytest.fixture(scope="module")
def lazy_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_example(LAZY, tmp_path_factory.mktemp("src"))


def _lazy_build(src: Path, out: Path, env: dict[str, str]) -> WheelFacts:
    wheel = built_wheel(pip_wheel(sys.executable, src, out, env), out)
    return inspect_wheel(wheel, out / "unpacked")


LAZY_PROBE = f"""
import json, lazysaxpy
out = {{"at_import": [p for p in {MAPS} if "lazysaxpy" in p or "cudart" in p]}}
try:
    out["check"] = lazysaxpy.check(n=4096)
except lazysaxpy.LazySaxpyError as exc:
    out["error"] = str(exc)
out["after"] = [p for p in {MAPS} if "lazysaxpy" in p or "cudart" in p]
out["saxpy"] = lazysaxpy.saxpy(2.0, [1.0, 2.0], [10.0, 20.0]) if "check" in out else None
print(json.dumps(out))
"""


@pytest.mark.network
def test_lazysaxpy_cuda_build_keeps_cmake_defaults(
    lazy_src: Path, nvcc: str, nvcc_default_archs: frozenset[str], tmp_path: Path
) -> None:
    """nvcc visible, no arch list: CMake's default architecture, static cudart, nothing else."""
    facts = _lazy_build(lazy_src, tmp_path / "dist", _env())
    assert facts.name == "lazysaxpy-0.1.0-py3-none-linux_x86_64.whl"
    assert facts.version == "0.1.0" and "+" not in facts.version
    assert facts.tags == ["py3-none-linux_x86_64"]
    assert facts.requires == []  # no nvidia-* runtime, nothing at all
    assert list(facts.libraries) == [KERNELS]
    lib = facts.libraries[KERNELS]
    # only what nvcc picks with no -arch (CUDA 13.0: sm_75 + compute_75), far from the row's list
    assert lib.device_code == nvcc_default_archs
    row = set(_row_cmake_archs(LAZY, "cu130-py312-x86_64").split(";"))
    assert len(row) > len(lib.device_code)
    # CMake's default CUDA runtime is static: no libcudart to declare, none to reach by RUNPATH
    assert not any(n.startswith("libcudart") for n in lib.needed)
    assert lib.opens_driver
    assert lib.runpath == () and lib.rpath == ()

    site = install_into(tmp_path / "dist" / facts.name, tmp_path / "site")
    probe = run_python(sys.executable, LAZY_PROBE, site=site, cwd=tmp_path)
    assert probe["at_import"] == []  # lazy: importing loaded no native library
    assert any(p.endswith("/liblazysaxpy_kernels.so") for p in probe["after"])
    if "error" in probe:  # no GPU or driver here: the CUDA error travels up by name
        assert "cudaError" in probe["error"]
    else:
        assert probe["check"]["max_abs_diff"] == 0.0


@pytest.mark.network
def test_lazysaxpy_builds_cpu_kernels_without_nvcc(lazy_src: Path, tmp_path: Path) -> None:
    """The package probes for CUDA: with no CUDA compiler in sight, a working CPU build."""
    facts = _lazy_build(lazy_src, tmp_path / "dist", _env(PATH=_path_without_nvcc(os.environ["PATH"])))
    assert facts.name == "lazysaxpy-0.1.0-py3-none-linux_x86_64.whl" and facts.requires == []
    lib = facts.libraries[KERNELS]
    assert lib.device_code == frozenset()
    assert not any("cuda" in n for n in lib.needed) and not lib.opens_driver

    site = install_into(tmp_path / "dist" / facts.name, tmp_path / "site")
    probe = run_python(sys.executable, LAZY_PROBE, site=site, cwd=tmp_path)
    assert probe["at_import"] == []
    check = probe["check"]
    assert check["backend"] == "cpu" and check["max_abs_diff"] == 0.0 and check["n"] == 4096
    assert probe["saxpy"] == [12.0, 24.0]
    assert any(p.endswith("/liblazysaxpy_kernels.so") for p in probe["after"])


@pytest.mark.network
@pytest.mark.parametrize("channel", ["CMAKE_ARGS", "SKBUILD_CMAKE_ARGS"])
def test_lazysaxpy_takes_the_rows_choices_from_the_environment(
    channel: str, lazy_src: Path, nvcc: str, nvcc_default_archs: frozenset[str], tmp_path: Path
) -> None:
    """The package needs no change for a row's arch list and a shared cudart, but the channel matters.

    CMAKE_ARGS is shell-split, so a ``;`` list arrives whole. SKBUILD_CMAKE_ARGS is split
    on ``;`` by scikit-build-core, so the same list is cut after its first arch, silently.
    Either way the wheel still has no label, no Requires-Dist and no RUNPATH.
    """
    archs = _row_cmake_archs(LAZY, "cu130-py312-x86_64")
    defines = [f"-DCMAKE_CUDA_ARCHITECTURES={archs}", "-DCMAKE_CUDA_RUNTIME_LIBRARY=Shared"]
    value = " ".join(defines) if channel == "CMAKE_ARGS" else ";".join(defines)
    facts = _lazy_build(lazy_src, tmp_path / "dist", _env(**{channel: value}))
    lib = facts.libraries[KERNELS]
    want = set()
    for item in archs.split(";"):
        number, _, kind = item.partition("-")
        want |= {f"sm_{number}"} if kind == "real" else {f"compute_{number}"}
    if channel == "CMAKE_ARGS":
        assert lib.device_code == want
    else:
        first = archs.split(";")[0].partition("-")[0]
        assert lib.device_code == {f"sm_{first}"} and lib.device_code < want
    assert "libcudart.so.13" in lib.needed and not lib.opens_driver
    assert lib.runpath == () and lib.rpath == ()
    assert facts.version == "0.1.0" and facts.requires == []


# ---------------------------------------------------------------- torchsaxpy


def _build_requires(project: Path) -> list[str]:
    data = tomllib.loads((project / "pyproject.toml").read_text(encoding="utf-8"))
    requires: list[str] = data["build-system"]["requires"]
    return requires


@pytest.fixture(scope="module")
def torch_python() -> str:
    """A build environment holding exactly torchsaxpy's [build-system] requires: the one a
    wheelwright release of torchsaxpy builds in (the same interpreter, requirements and pins,
    so the same cached folder), made once under ``$WHEELWRIGHT_CACHE/build-envs/``. The build
    below is still the package's own ``pip wheel``; only the 5.4 GB of torch is shared."""
    requires = _build_requires(TORCHEXT)
    assert "torch==2.14.1" in requires
    python = find_python("3.11", env=os.environ)  # the torchsaxpy policy's one Python
    system = isolated.read_build_system(TORCHEXT)
    spec = isolated.env_spec(
        python,
        system.requires,
        isolated.read_constraints([isolated.base_constraints()]),
        default_cache_dir(os.environ),
    )
    isolated.ensure_build_env(spec, system, env=os.environ, row_id="torchsaxpy standalone")
    return str(spec.interpreter)


@pytest.fixture(scope="module")
def cuda_home(nvcc: str) -> str:
    """The toolkit root as nvcc itself reports it (PATH may hold a wrapper script)."""
    dry = subprocess.run(
        [nvcc, "--dryrun", "-E", "-x", "cu", os.devnull], capture_output=True, text=True, check=False
    )
    top = re.search(r"^#\$ TOP=(.+)$", dry.stdout + dry.stderr, flags=re.MULTILINE)
    version = re.search(
        r"release (\d+\.\d+)", subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout
    )
    if top is None or version is None or version[1] != "13.0":
        pytest.skip(f"needs an nvcc 13.0 (torch 2.14.1's CUDA), found {version[1] if version else 'none'}")
    return str(Path(top[1].strip()).resolve())


def copy_example(example: Path, into: Path) -> Path:
    """A copy to build from: setuptools writes build/ and *.egg-info/ into the source tree."""
    ignore = shutil.ignore_patterns("build", "*.egg-info", "__pycache__")
    return Path(shutil.copytree(example, into / example.name, ignore=ignore))


def _torch_sees_gpus(python: str) -> int:
    out = subprocess.run(
        [python, "-c", "import torch; print(torch.cuda.device_count())"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.network
def test_torch_extension_without_an_arch_list_needs_a_gpu(
    torch_python: str, cuda_home: str, tmp_path: Path
) -> None:
    """cpp_extension compiles for the visible GPUs; with none and no TORCH_CUDA_ARCH_LIST it fails."""
    if _torch_sees_gpus(torch_python):
        pytest.skip("torch sees a GPU here: cpp_extension compiles for it")
    src = copy_example(TORCHEXT, tmp_path)
    proc = pip_wheel(torch_python, src, tmp_path / "dist", _env(CUDA_HOME=cuda_home), isolation=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "_get_cuda_arch_flags" in out and "IndexError: list index out of range" in out
    assert not list((tmp_path / "dist").glob("*.whl"))


ARCH = "8.0"  # what a person building for one A100 would pass


@pytest.fixture(scope="module")
def torch_wheel(
    torch_python: str, cuda_home: str, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, WheelFacts]:
    torch_src = copy_example(TORCHEXT, tmp_path_factory.mktemp("src"))
    out = tmp_path_factory.mktemp("torch-dist")
    env = _env(CUDA_HOME=cuda_home, TORCH_CUDA_ARCH_LIST=ARCH)
    wheel = built_wheel(pip_wheel(torch_python, torch_src, out, env, isolation=False), out)
    return wheel, inspect_wheel(wheel, out / "unpacked")


@pytest.mark.network
def test_torch_extension_standalone_wheel(torch_wheel: tuple[Path, WheelFacts]) -> None:
    """Exactly the asked architecture, torch as the only dependency, torch's libraries by name only."""
    _, facts = torch_wheel
    assert facts.name == "torchsaxpy-0.1.0-cp310-abi3-linux_x86_64.whl"
    assert facts.version == "0.1.0" and facts.tags == ["cp310-abi3-linux_x86_64"]
    assert facts.requires == ["torch==2.14.1"]  # the CUDA runtime comes through torch
    assert list(facts.libraries) == [TORCH_C]
    lib = facts.libraries[TORCH_C]
    major, minor = ARCH.split(".")
    assert lib.device_code == {f"sm_{major}{minor}"}  # TORCH_CUDA_ARCH_LIST, nothing more, no PTX
    assert {"libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libcudart.so.13"} <= set(lib.needed)
    assert lib.runpath == () and lib.rpath == () and not lib.opens_driver


TORCH_PROBE = f"""
import json, torchsaxpy
print(json.dumps({{
    "check": torchsaxpy.check(n=4096, device="cpu"),
    "cuda_kernel": torchsaxpy.has_cuda_kernel(),
    "cudart": [p for p in {MAPS} if "libcudart.so" in p][:1],
}}))
"""

BARE_LOAD = """
import ctypes, json, sys
try:
    ctypes.CDLL(sys.argv[1])
    print(json.dumps({"loaded": True}))
except OSError as exc:
    print(json.dumps({"loaded": False, "error": str(exc)}))
"""


@pytest.mark.network
def test_torch_extension_runs_on_torchs_cuda_runtime(
    torch_python: str, torch_wheel: tuple[Path, WheelFacts], tmp_path: Path
) -> None:
    wheel, _ = torch_wheel
    site = install_into(wheel, tmp_path / "site")
    probe = run_python(torch_python, TORCH_PROBE, site=site, cwd=tmp_path, env=_env())
    check = probe["check"]
    assert check["max_abs_diff"] == 0.0 and check["backend"] == "cpu"
    assert probe["cuda_kernel"] is True
    torch_site = subprocess.run(
        [torch_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    cudart = Path(torch_site).resolve() / "nvidia" / "cu13" / "lib" / "libcudart.so.13"
    assert probe["cudart"] == [str(cudart)]
    # Without torch imported first, nothing finds torch's libraries: no RUNPATH of its own.
    bare = subprocess.run(
        [torch_python, "-c", BARE_LOAD, str(site / TORCH_C)],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    loaded = json.loads(bare.stdout.strip().splitlines()[-1])
    assert loaded["loaded"] is False and ".so" in loaded["error"]


@pytest.mark.network
def test_torch_finds_a_toolkit_with_nvcc_off_path(torch_python: str) -> None:
    """Hiding nvcc and unsetting CUDA_HOME is not enough: torch falls back to /usr/local/cuda."""
    env = _env(PATH=_path_without_nvcc(os.environ["PATH"]))
    out = subprocess.run(
        [
            torch_python,
            "-c",
            "import json; from torch.utils import cpp_extension as c; print(json.dumps(c.CUDA_HOME))",
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert found == ("/usr/local/cuda" if Path("/usr/local/cuda").exists() else None)
