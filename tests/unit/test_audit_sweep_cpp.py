"""The C++ consumer check's CUDA headers (release.audit.cpp_tools / cpp_consumer): which includes are CUDA
toolkit headers, which the wheel lacks, where the CUDA headers of a consumer are looked for, and the
compiler's "No such file or directory" read back. The compile with a real toolkit, the fail-closed audit
and real NVIDIA wheels: tests/integration/test_audit_sweep_cpp_real.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from release.audit.cpp_consumer import cuda_includes
from release.audit.cpp_tools import (
    SITE_VAR,
    CudaHeaders,
    CudaSearch,
    cuda_env,
    find_cuda_headers,
    missing_header,
    toolkit_package,
)


@pytest.mark.parametrize(
    ("header", "major", "package"),
    [
        ("cuda_runtime.h", None, "nvidia-cuda-runtime"),
        ("cuComplex.h", 13, "nvidia-cuda-runtime"),
        ("driver_types.h", 13, "nvidia-cuda-runtime"),
        ("cuda.h", 13, "nvidia-cuda-runtime"),
        ("crt/host_defines.h", 13, "nvidia-cuda-crt"),
        ("thrust/device_vector.h", 13, "nvidia-cuda-cccl"),
        ("cuda/std/atomic", 13, "nvidia-cuda-cccl"),
        ("nvtx3/nvToolsExt.h", 13, "nvidia-nvtx"),
        ("cupti.h", 13, "nvidia-cuda-cupti"),
        ("cublas_v2.h", 13, "nvidia-cublas"),
        ("cusparse.h", 13, "nvidia-cusparse"),
        # CUDA 12's names come from wheelwright's CUDA table (release/resources/cuda.toml)
        ("cuda_runtime.h", 12, "nvidia-cuda-runtime-cu12"),
        ("cublas_v2.h", 12, "nvidia-cublas-cu12"),
        ("crt/host_config.h", 12, "the CUDA 12 form of nvidia-cuda-crt"),
    ],
)
def test_toolkit_headers_are_named_by_their_package(header: str, major: int | None, package: str) -> None:
    assert toolkit_package(header, major) == package


@pytest.mark.parametrize(
    "header",
    [
        "CL/cl.h",
        "vdpau/vdpau.h",
        "stdio.h",
        "vector",
        "cudnn.h",
        "nccl.h",
        "cusparseLt.h",
        "wheelwright_nope.h",
    ],
)
def test_other_headers_are_not_the_toolkits(header: str) -> None:
    """Must not match: system, third-party and other NVIDIA products' headers (cuDNN, NCCL, cuSPARSELt)."""
    assert toolkit_package(header) is None


def test_cuda_includes_lists_the_toolkit_headers_the_wheel_lacks() -> None:
    files = {
        "fx.h": b'#include <cuda_runtime.h>\n#include "sub/b.h"\n#include <vector>\n#include <CL/cl.h>\n',
        "sub/b.h": b'#include "crt/host_defines.h"\n#include "c.h"\n#if __has_include(<cublas_v2.h>)\n#endif\n',
        "sub/c.h": b"int c(void);\n",
    }
    assert cuda_includes(files) == ("crt/host_defines.h", "cublas_v2.h", "cuda_runtime.h")
    # a header the wheel ships itself is not wanted from a toolkit (its own cuda_runtime.h, relative or not)
    files["cuda_runtime.h"] = b""
    files["sub/crt/host_defines.h"] = b""
    assert cuda_includes(files) == ("cublas_v2.h",)
    assert cuda_includes({"tinyaxpy.h": b"#include <stddef.h>\nint f(void);\n"}) == ()


def test_missing_header_read_from_the_compiler(tmp_path: Path) -> None:
    """The real g++'s message for a header it cannot find, as the check runs it (plain diagnostics)."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "fx.h").write_text("#pragma once\n#include <cuda_runtime.h>\n", encoding="utf-8")
    (tmp_path / "consumer.cpp").write_text('#include "fx.h"\n', encoding="utf-8")
    ran = subprocess.run(
        ["g++", "-fdiagnostics-plain-output", "-E", "-Iinclude", "consumer.cpp", "-o", "/dev/null"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
    )
    assert ran.returncode != 0
    assert missing_header(ran.stderr) == ("cuda_runtime.h", "include/fx.h")
    assert missing_header("fx.h:3:10: error: expected ';'\n") is None


def _toolkit(home: Path, version: int, *, cccl: bool = False) -> Path:
    """A toolkit's header tree without nvcc: include/cuda_runtime_api.h as CUDA writes its version."""
    (home / "include").mkdir(parents=True)
    (home / "include" / "cuda_runtime_api.h").write_text(
        f"#pragma once\n#define CUDART_VERSION {version}\n", encoding="utf-8"
    )
    if cccl:
        (home / "include" / "cccl").mkdir()
    return home


def _env(tmp_path: Path, **values: str) -> dict[str, str]:
    empty = tmp_path / "empty"
    empty.mkdir(exist_ok=True)
    base = {"PATH": str(empty), "HOME": str(empty), "WHEELWRIGHT_CACHE": str(empty), SITE_VAR: str(empty)}
    return base | values


def test_nothing_found_says_where_it_looked(tmp_path: Path) -> None:
    search = find_cuda_headers(cuda_env(_env(tmp_path)))
    assert search.packages == () and search.toolkits == () and search.select(13) == ()
    text = search.looked_at()
    assert "no nvcc on PATH" in text and "no PyPI toolchain in the wheelwright cache" in text
    assert "no CUDA package's headers installed in" in text


def test_cuda_home_is_the_only_toolkit_when_set(tmp_path: Path) -> None:
    home = _toolkit(tmp_path / "cuda-12.4", 12040, cccl=True)
    cache = tmp_path / "cache"
    _toolkit(cache / "cuda-13.2.86" / "nvidia" / "cu13", 13020)
    (cache / "cuda-13.2.86" / "wheelwright-toolchain.json").write_text('{"cuda_home": "nvidia/cu13"}')
    search = find_cuda_headers(cuda_env(_env(tmp_path, CUDA_HOME=str(home), WHEELWRIGHT_CACHE=str(cache))))
    assert search.toolkits == (
        CudaHeaders(
            (str(home / "include"), str(home / "include" / "cccl")), "12.4", str(home), f"CUDA_HOME={home}"
        ),
    )
    assert "no other toolkit was looked at" in search.looked_at()
    assert (
        search.select(13) == ()
        and search.select(12) == search.toolkits
        and search.select(None) == search.toolkits
    )
    # an empty CUDA_HOME: nothing, and it says so (the fail-closed case)
    empty = find_cuda_headers(cuda_env(_env(tmp_path, CUDA_HOME=str(tmp_path / "empty"))))
    assert empty.toolkits == () and f"CUDA_HOME={tmp_path / 'empty'}: no CUDA headers" in empty.looked_at()


def test_pypi_toolchains_in_the_cache_newest_first(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for name, version in (("cuda-13.0.88", 13000), ("cuda-13.2.86", 13020)):
        _toolkit(cache / name / "nvidia" / "cu13", version)
        (cache / name / "wheelwright-toolchain.json").write_text(json.dumps({"cuda_home": "nvidia/cu13"}))
    _toolkit(tmp_path / "outside", 13090)
    (cache / "cuda-13.9.0").mkdir()  # a manifest pointing out of its folder is not followed
    (cache / "cuda-13.9.0" / "wheelwright-toolchain.json").write_text('{"cuda_home": "../../outside"}')
    (cache / "cuda-13.8.0").mkdir()
    (cache / "cuda-13.8.0" / "wheelwright-toolchain.json").write_text("not json")
    search = find_cuda_headers(cuda_env(_env(tmp_path, WHEELWRIGHT_CACHE=str(cache))))
    assert [t.version for t in search.toolkits] == ["13.2", "13.0"]
    assert search.select(13) == search.toolkits[:1]
    assert search.toolkits[0].source == "PyPI toolchain in the wheelwright cache"


def test_installed_packages_come_first(tmp_path: Path) -> None:
    """The folders where the wheel's CUDA packages install (cuda.toml's installs_to, beside lib/), in a
    pip --target folder: for CUDA 13 nvidia/cu13/include, for CUDA 12 one per package."""
    site = tmp_path / "site"
    (site / "nvidia" / "cu13" / "include" / "cccl").mkdir(parents=True)
    (site / "nvidia" / "cu13" / "include" / "cublas_v2.h").write_text("", encoding="utf-8")
    (site / "nvidia" / "cublas" / "include").mkdir(parents=True)
    home = _toolkit(tmp_path / "cuda-13.0", 13000)
    search = find_cuda_headers(cuda_env(_env(tmp_path, CUDA_HOME=str(home), **{SITE_VAR: str(site)})))
    cu13 = site / "nvidia" / "cu13" / "include"
    assert [(p.dirs, p.version) for p in search.packages] == [
        ((str(cu13), str(cu13 / "cccl")), "13"),
        ((str(site / "nvidia" / "cublas" / "include"),), "12"),
    ]
    assert [h.where for h in search.select(13)] == [str(cu13), str(home)]
    assert [h.where for h in search.select(12)] == [str(site / "nvidia" / "cublas" / "include")]
    holder = search.holding("cublas_v2.h")
    assert holder is not None and holder.where == str(cu13)
    assert search.holding("cusparse.h") is None


def test_select_with_an_unknown_major_takes_the_first_toolkits() -> None:
    t13 = CudaHeaders(("/a",), "13.0", "/a", "x")
    t12 = CudaHeaders(("/b",), "12.4", "/b", "y")
    p12 = CudaHeaders(("/c",), "12", "/c", "z")
    search = CudaSearch((p12,), (t13, t12), ())
    assert search.select(None) == (t13,)
    assert search.select(12) == (p12, t12)
    assert CudaSearch((), (), ()).select(None) == ()
