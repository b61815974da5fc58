"""The C++ consumer check on SDKs whose headers include the CUDA toolkit's (``cuda_runtime.h``), as NVIDIA's
own wheels do: the audit compiles them as a consumer would, with the CUDA headers of the wheel's CUDA
major found on this machine (this machine: the nvcc 13.0 on PATH, a wrapper script for
/usr/local/cuda-13.0), and fails closed, naming the header and how to make it available, when there are
none. A header that is neither the wheel's nor CUDA's still fails as a broken SDK.

Each case runs ``python -m release audit WHEEL --runs-on 9.0 --json --no-record --checks cpp_consumer``
from an empty folder on a generated SDK wheel (a real library built by gcc, a real header) or a real one
(nvidia-cufile 1.15.1.6, whose cufile.h includes cuda.h; nvidia-cusparse 12.6.3.3's headers, as pip
installs them; nvidia-nvshmem-cu13 3.4.5's, C++ only). The toolkit is hidden with CUDA_HOME pointing at an empty folder, or with no CUDA_HOME,
no nvcc on PATH and an empty wheelwright cache.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from helpers.real_wheels import real_wheel

from release.audit.claim import claim_expectation
from release.audit.cpp import early as cpp_early
from release.audit.cpp.cuda_headers import SITE_VAR, CudaHeaders, cuda_env, find_cuda_headers, toolkit_package
from release.audit.reading.archive import open_wheel

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
TAG = "py3-none-manylinux_2_28_x86_64"
LIB_C = "int fx_version(void) { return 13000; }\nint fx_last_error(void) { return 0; }\n"
HEADER = """#pragma once
%s
#ifdef __cplusplus
extern "C" {
#endif
int fx_version(void);
cudaError_t fx_last_error(void); /* a type of the CUDA runtime's headers */
#ifdef __cplusplus
}
#endif
"""


def _sdk_wheel(
    tmp: Path, includes: str, *, version: str = "1.0+cu130", requires: tuple[str, ...] = ()
) -> Path:
    """``fxsdk``: fxsdk/include/fx.h next to fxsdk/lib/libfx.so (gcc), with a RECORD."""
    src = tmp / "fx.c"
    src.write_text(LIB_C, encoding="utf-8")
    lib = tmp / "libfx.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True, timeout=120)
    info = f"fxsdk-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: fxsdk\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    files = {
        "fxsdk/lib/libfx.so": lib.read_bytes(),
        "fxsdk/include/fx.h": (HEADER % includes).encode(),
        f"{info}/METADATA": metadata.encode(),
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {TAG}\n".encode(),
    }
    record = "".join(
        f"{name},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for name, data in files.items()
    )
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    path = tmp / f"fxsdk-{version}-{TAG}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(name, (2024, 1, 1, 0, 0, 0)), data)
    return path


def _audit(wheel: Path, tmp: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """The audit as a user runs it, from an empty folder: its exit code and its one cpp_consumer finding."""
    cwd = tmp / "cwd"
    cwd.mkdir(exist_ok=True)
    ran = subprocess.run(
        [sys.executable, "-m", "release", "audit", str(wheel), "--runs-on", "9.0", "--json", "--no-record",
         "--checks", "cpp_consumer"],
        cwd=cwd, env=env | {"PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    findings = [f for r in json.loads(ran.stdout)["results"] for f in r["findings"]]
    assert len(findings) == 1 and findings[0]["check"] == "cpp_consumer", ran.stdout + ran.stderr
    return ran.returncode, findings[0]


def _plain_env(tmp: Path) -> dict[str, str]:
    """This machine's environment without CUDA_HOME and with an empty package folder: the toolkit is the
    nvcc on PATH (then the wheelwright cache's PyPI toolchains)."""
    empty = tmp / "no-packages"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "CUDA_HOME"}
    return env | {SITE_VAR: str(empty)}


def _hidden_env(tmp: Path, how: str) -> dict[str, str]:
    """No CUDA headers to be found: CUDA_HOME at an empty folder, or no CUDA_HOME, no nvcc on PATH and an
    empty wheelwright cache (package folders empty in both)."""
    empty = tmp / "empty"
    empty.mkdir(exist_ok=True)
    env = _plain_env(tmp) | {"WHEELWRIGHT_CACHE": str(empty), SITE_VAR: str(empty)}
    env["PATH"] = os.pathsep.join(p for p in env["PATH"].split(os.pathsep) if not (Path(p) / "nvcc").exists())
    assert shutil.which("nvcc", path=env["PATH"]) is None and shutil.which("g++", path=env["PATH"])
    return env | {"CUDA_HOME": str(empty)} if how == "CUDA_HOME empty" else env


def _toolkit(tmp: Path) -> CudaHeaders:
    found = find_cuda_headers(cuda_env(_plain_env(tmp))).select(13)
    assert found, "this machine has a CUDA 13 toolkit (the nvcc 13.0 on PATH)"
    return found[-1]


def test_this_machines_toolkit_is_found_and_its_headers_are_known(tmp_path: Path) -> None:
    """nvcc on PATH is a wrapper script (/usr/local/bin/nvcc): the folders come from nvcc itself. Every
    top-level header of every toolkit found is a CUDA toolkit header by cuda.toml's `[[headers.toolkit]]` (how the list was
    checked against real toolkits)."""
    search = find_cuda_headers(cuda_env(_plain_env(tmp_path)))
    toolkit = _toolkit(tmp_path)
    assert toolkit.source.startswith("nvcc on PATH: ") and toolkit.version.startswith("13.")
    assert toolkit.holds("cuda_runtime.h") and toolkit.holds("crt/host_defines.h")
    assert any(Path(d).name == "cccl" for d in toolkit.dirs) and toolkit.holds("thrust/version.h")
    for found in search.toolkits:
        for folder in found.dirs:
            for entry in Path(folder).iterdir():
                name = f"{entry.name}/x.h" if entry.is_dir() else entry.name
                assert toolkit_package(name) is not None, f"{found.where}: {entry.name}"


@pytest.mark.parametrize("how", ["nvcc on PATH", "CUDA_HOME"])
def test_cuda_runtime_header_compiles_with_the_toolkit(tmp_path: Path, how: str) -> None:
    """Must pass: fx.h includes <cuda_runtime.h>, which the wheel does not ship; the consumer compiles
    with the machine's CUDA 13 headers after the wheel's and links libfx.so."""
    toolkit = _toolkit(tmp_path)
    env = _plain_env(tmp_path) | ({"CUDA_HOME": toolkit.where} if how == "CUDA_HOME" else {})
    code, finding = _audit(_sdk_wheel(tmp_path, "#include <cuda_runtime.h>"), tmp_path, env)
    assert code == 0 and finding["ok"], finding["message"]
    assert f"with the CUDA {toolkit.version} headers of {toolkit.where}" in finding["message"]
    assert "referencing 2 declared functions" in finding["message"]
    used = finding["details"]["cuda_headers"]
    assert [u["where"] for u in used] == [toolkit.where] and used[0]["version"] == toolkit.version
    assert used[0]["source"] == (f"CUDA_HOME={toolkit.where}" if how == "CUDA_HOME" else toolkit.source)


@pytest.mark.parametrize("how", ["CUDA_HOME empty", "no CUDA_HOME, no nvcc, empty cache"])
def test_without_cuda_headers_it_fails_closed(tmp_path: Path, how: str) -> None:
    """Must fail, as unable to check (not as a broken SDK): names the header, its package, how to get it."""
    code, finding = _audit(
        _sdk_wheel(tmp_path, "#include <cuda_runtime.h>"), tmp_path, _hidden_env(tmp_path, how)
    )
    message = finding["message"]
    assert code == 1 and not finding["ok"] and finding["details"]["cannot_check"] is True
    assert message.startswith(
        "cannot check: fxsdk/include/fx.h includes cuda_runtime.h, a CUDA toolkit header"
    )
    assert "(pip: nvidia-cuda-runtime, which the wheel does not declare)" in message
    assert "no CUDA 13 headers were found" in message and "CUDA_HOME=<a CUDA 13 toolkit>" in message
    assert f"{SITE_VAR}=DIR" in message and "does not compile" not in message
    assert ("CUDA_HOME=" if how == "CUDA_HOME empty" else "no nvcc on PATH") in message


@pytest.mark.parametrize("hidden", [False, True])
def test_a_header_that_is_not_cudas_still_fails(tmp_path: Path, hidden: bool) -> None:
    """Must fail as a broken SDK, with or without the toolkit: the missing header is nobody's."""
    includes = "#include <cuda_runtime.h>\n#include <wheelwright_no_such_header.h>"
    env = _hidden_env(tmp_path, "CUDA_HOME empty") if hidden else _plain_env(tmp_path)
    wheel = _sdk_wheel(tmp_path, includes if not hidden else "#include <wheelwright_no_such_header.h>")
    code, finding = _audit(wheel, tmp_path, env)
    assert code == 1 and not finding["ok"] and "cannot_check" not in finding["details"]
    assert "does not compile" in finding["message"]
    assert "fatal error: wheelwright_no_such_header.h: No such file or directory" in finding["message"]
    assert ("with the CUDA 13" in finding["message"]) is not hidden


def test_the_wheels_cuda_major_chooses_the_headers(tmp_path: Path) -> None:
    """Must fail closed: a CUDA 12.6 wheel (+cu126) is not compiled with this machine's CUDA 13 headers."""
    wheel = _sdk_wheel(tmp_path, "#include <cuda_runtime.h>", version="1.0+cu126")
    code, finding = _audit(wheel, tmp_path, _plain_env(tmp_path))
    message = finding["message"]
    assert code == 1 and finding["details"]["cannot_check"] is True, message
    assert "(pip: nvidia-cuda-runtime-cu12, which the wheel does not declare)" in message
    assert "no CUDA 12 headers were found" in message and "another CUDA release" in message
    assert "the wheel is CUDA 12 (its local version label +cu126)" in message


@pytest.mark.network
def test_declared_packages_installed_in_a_package_folder(tmp_path: Path) -> None:
    """cusparse.h is in no toolkit here: without it, fail closed naming nvidia-cusparse (declared); with
    nvidia-cusparse 12.6.3.3's headers where pip installs them (nvidia/cu13/include) in
    WHEELWRIGHT_CUDA_SITE, the consumer compiles with them, then the toolkit (cusparse.h includes
    cuda_runtime_api.h)."""
    wheel = _sdk_wheel(tmp_path, "#include <cusparse.h>", requires=("nvidia-cusparse",))
    code, finding = _audit(wheel, tmp_path, _plain_env(tmp_path))
    assert code == 1 and finding["details"]["cannot_check"] is True
    assert (
        "includes cusparse.h, a CUDA toolkit header (pip: nvidia-cusparse, which the wheel declares)"
        in (finding["message"])
    )
    site = tmp_path / "site"
    with zipfile.ZipFile(real_wheel("nvidia_cusparse")) as zf:
        headers = [n for n in zf.namelist() if n.startswith("nvidia/cu13/include/")]
        assert "nvidia/cu13/include/cusparse.h" in headers
        zf.extractall(site, headers)
    code, finding = _audit(wheel, tmp_path, _plain_env(tmp_path) | {SITE_VAR: str(site)})
    assert code == 0 and finding["ok"], finding["message"]
    used = [u["where"] for u in finding["details"]["cuda_headers"]]
    assert used == [str(site / "nvidia" / "cu13" / "include"), _toolkit(tmp_path).where]


@pytest.mark.network
def test_real_nvidia_wheel_cufile(tmp_path: Path) -> None:
    """nvidia-cufile 1.15.1.6: cufile.h includes <cuda.h>. Before: 'does not compile ... cuda.h: No such
    file or directory'. With the toolkit: compiles and links; without: fails closed naming cuda.h."""
    wheel = real_wheel("nvidia_cufile")
    code, finding = _audit(wheel, tmp_path, _plain_env(tmp_path))
    assert code == 0 and finding["ok"], finding["message"]
    assert "compiles against nvidia/cu13/include (cufile.h) with the CUDA 13" in finding["message"]
    code, finding = _audit(wheel, tmp_path, _hidden_env(tmp_path, "CUDA_HOME empty"))
    assert code == 1 and finding["details"]["cannot_check"] is True
    assert "nvidia/cu13/include/cufile.h includes cuda.h" in finding["message"]
    assert "(pip: nvidia-cuda-runtime, which the wheel does not declare)" in finding["message"]


@pytest.mark.parametrize("version", ["1.0+cu130", "1.0+cu126"])
def test_early_compile_gives_the_same_finding(tmp_path: Path, version: str) -> None:
    """The compile started while the libraries unpack (release.audit.cpp.early.EarlyCpp) does not know the
    wheel's CUDA major: it uses the first toolkit found, and the check compiles again when the wheel's is
    another (+cu126 here). Either way the finding is the one the check gives on its own."""
    wheel = _sdk_wheel(tmp_path, "#include <cuda_runtime.h>", version=version)
    expectation = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="9.0")
    early = cpp_early.EarlyCpp(True)
    with early, open_wheel(wheel, on_others_done=early.start) as opened:
        assert list(early.futures) == [("fxsdk/include", ("fx.h",))]
        first, _ = cpp_early.cached_check(opened, expectation, early)
        alone, _ = cpp_early.cached_check(opened, expectation, cpp_early.EarlyCpp(False))
    assert [(f.ok, f.message, f.details) for f in first] == [(f.ok, f.message, f.details) for f in alone]
    assert first[0].ok is (version == "1.0+cu130"), first[0].message


@pytest.mark.network
def test_real_nvidia_wheel_curand_device_headers(tmp_path: Path) -> None:
    """nvidia-curand 10.4.0.35: 10 of its 17 headers are device code for nvcc (QUALIFIERS: static
    __forceinline__ __device__). Before: 'does not compile', curand_discrete2.h's errors (it compiles only
    after curand_kernel.h, with nvcc). Now they are left out and named, and the host headers compile; the
    check fails for what it is for: curand.h declares curandGenerateBinomial and
    curandGenerateBinomialMethod, which libcurand.so.10 does not export (C's enumeration finds curand.h's
    functions though curand_mtgp32_host.h is C++ only)."""
    code, finding = _audit(real_wheel("nvidia_curand"), tmp_path, _plain_env(tmp_path))
    message = finding["message"]
    assert code == 1 and not finding["ok"] and "does not compile" not in message, message
    assert "compiles but does not link against nvidia/cu13/lib/libcurand.so.10" in message
    assert "undefined reference to `curandGenerateBinomial'" in message
    device = finding["details"]["device_headers"]
    assert (
        device["count"] == 10 and device["first"]["curand_kernel.h"] == "QUALIFIERS (a macro for __device__)"
    )
    assert {"curand_discrete2.h", "curand_precalc.h", "curand_mtgp32_kernel.h"} <= set(device["first"])
    assert (
        "10 device headers, for nvcc, left to a CUDA consumer: curand_discrete2.h, curand_kernel.h" in message
    )
    functions = finding["details"]["functions"]
    assert "curand.h" not in device["first"] and "curandCreateGenerator" in functions["first"], functions


@pytest.mark.network
def test_real_nvidia_wheel_cublas_exclusive_headers(tmp_path: Path) -> None:
    """nvidia-cublas 13.1.1.3: cublas.h and cublas_v2.h #error when both are included (cublasXt.h includes
    cublas_v2.h). Before: 'does not compile', that #error. Now cublasXt.h and cublas_v2.h compile in a
    second program and both programs link: the check fails for what it is for, cublasLt.h declaring
    cublasLtDisableCpuInstructionsSetMask, which libcublasLt.so.13 does not export. cublas_api.h's C++
    overloads of cublasGemmEx are referenced through the C declaration's type."""
    code, finding = _audit(real_wheel("nvidia_cublas"), tmp_path, _plain_env(tmp_path))
    message = finding["message"]
    assert code == 1 and not finding["ok"] and "compiles but does not link" in message, message
    assert (
        "cublasXt.h, cublas_v2.h compiled in a second program: they cannot be included with the others"
        in message
    )
    assert finding["details"]["apart"] == {
        "headers": ["cublasXt.h", "cublas_v2.h"],
        "error": '"It is an error to include both cublas.h and cublas_v2.h"',
    }
    assert "undefined reference to `cublasLtDisableCpuInstructionsSetMask'" in message
    assert "address of overloaded function" not in message and finding["details"]["functions"]["count"] > 700


@pytest.mark.network
def test_real_nvidia_wheel_nvshmem_declares_no_c_function(tmp_path: Path) -> None:
    """nvidia-nvshmem-cu13 3.4.5: nvshmem.h, nvshmem_host.h and nvshmemx.h compile for C++ (with the CUDA 13
    headers) and are not C, so C's parser lists no function. Before: a pass "referencing 0 declared
    functions", having linked an empty program. Now: nothing to check, said so; and no program is linked."""
    code, finding = _audit(real_wheel("nvidia_nvshmem_cu13"), tmp_path, _plain_env(tmp_path))
    message = finding["message"]
    assert code == 0 and finding["ok"] and finding["details"]["nothing_to_check"] is True, message
    assert message.startswith(
        "nothing to check: ['nvidia/nvshmem/include/nvshmem.h', 'nvidia/nvshmem/include/nvshmem_host.h', "
        "'nvidia/nvshmem/include/nvshmemx.h'] compile for C++ with the CUDA 13"
    ), message
    assert "but declare no C function to link (C's parser lists none of theirs)" in message
    assert finding["details"]["functions"] == {"count": 0, "first": []}
