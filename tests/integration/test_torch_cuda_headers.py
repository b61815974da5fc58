"""A torch extension written as PyTorch's tutorial writes one builds on the host backend (issue 24, item 10).

tests/fixtures/torchctx's kernel includes ``ATen/cuda/CUDAContext.h``, which includes ``cusparse.h`` and
``cublas_v2.h``: headers a toolkit of only the compiler and runtime (this machine's CUDA 13.0, PyPI's
toolchain) lacks and torch's own CUDA packages (``nvidia/cu13/include`` in the build environment) hold.

Must pass: ``python -m release build`` of its row with the host backend writes the wheel, its ``_C``
carrying the row's device code. Must fail: the same header through nvcc with torch's own include
paths, in the row's environment without the pip packages' include folders
(``pip_cuda_headers(..., enabled=False)``), stops at ``cusparse.h: No such file or directory``; with
them it preprocesses.

Cost: the build environment is the one examples/torchsaxpy builds in (same requirements, cached under
``$WHEELWRIGHT_CACHE/build-envs/``; torch comes from the index on first use, hence ``network``); the
compile of one arch and its PTX, measured 80-162 s wall (59 s CPU) on the 2 shared cores while others
worked; the must-fail case a few seconds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from release.binary.fatbin import all_entries
from release.core.machine import default_cache_dir, find_python
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.wheelbuild.environment import build_environment, pip_cuda_headers, pip_cuda_include_dirs
from release.wheelbuild.host import isolated
from release.wheelbuild.toolchain import resolve_toolchain

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
PROJECT = ROOT / "tests" / "fixtures" / "torchctx"
POLICY = PROJECT / "rows.toml"
WHEEL = "torchctx-0.1.0+cu130-cp310-abi3-manylinux_2_34_x86_64.whl"
TORCH_INCLUDES = """
import json, sysconfig
from torch.utils.cpp_extension import include_paths
print(json.dumps([*include_paths("cuda"), sysconfig.get_paths()["include"]]))
"""


@pytest.fixture(scope="module")
def row() -> Row:
    (only,) = expand(load_policy(POLICY))
    return only


def test_torch_extension_including_cudacontext_builds_on_the_host(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "release", "build", "--policy", str(POLICY), "--backend", "host",
         "--dist", str(tmp_path / "dist"), "cu130-py311"],
        cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-6000:]
    wheel = tmp_path / "dist" / "cu130" / WHEEL
    assert wheel.is_file(), proc.stdout + proc.stderr
    with zipfile.ZipFile(wheel) as zf:
        (tmp_path / "_C.so").write_bytes(zf.read("torchctx/_C.abi3.so"))
    assert {e.name for e in all_entries(tmp_path / "_C.so")} >= {"sm_90"}


def test_without_the_packages_headers_cudacontext_is_missing_cusparse(row: Row) -> None:
    cache = default_cache_dir(os.environ)
    system = isolated.read_build_system(PROJECT)
    python = find_python("3.11", env=os.environ)
    spec = isolated.env_spec(
        python, system.requires, isolated.read_constraints([isolated.base_constraints()]), cache
    )
    isolated.ensure_build_env(spec, system, env=os.environ, row_id="torchctx headers")
    toolchain = resolve_toolchain(row, env=os.environ, cache_dir=cache)
    assert toolchain is not None
    env = build_environment(row, toolchain, kernel_cache=None, base=os.environ)
    env.pop("CPATH", None)
    includes = json.loads(
        subprocess.run(
            [str(spec.interpreter), "-c", TORCH_INCLUDES], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    source = PROJECT / "csrc" / "scale_cuda.cu"
    argv = [
        str(toolchain.nvcc),
        "-E",
        "-x",
        "cu",
        *(f"-I{d}" for d in includes),
        str(source),
        "-o",
        os.devnull,
    ]

    site = spec.folder / "lib" / "python3.11" / "site-packages"
    present = [str(p.relative_to(site)) for p in site.glob("nvidia/*/include")]
    dirs = pip_cuda_include_dirs(13, present)
    assert "nvidia/cu13/include" in dirs
    off = subprocess.run(argv, env={**env, **pip_cuda_headers(row, str(site), dirs, None, enabled=False)},
                         capture_output=True, text=True, check=False)  # fmt: skip
    assert off.returncode != 0
    assert "cusparse.h: No such file or directory" in off.stdout + off.stderr
    on = subprocess.run(argv, env={**env, **pip_cuda_headers(row, str(site), dirs, None)},
                        capture_output=True, text=True, check=False)  # fmt: skip
    assert on.returncode == 0, on.stderr[-3000:]
