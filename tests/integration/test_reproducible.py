"""Reproducible wheels: two cold builds of one commit are byte-identical, and a kernel-cache
hit gives the same wheel as a cold build (the library keeps its file mode).

What used to differ between two cold builds of tinyaxpy's cu130 row, and what fixes it:

- nvcc names a source's anonymous namespaces ``_GLOBAL__N__<8 hex>_..._<8 hex>``; the first
  hash is derived from the source file's absolute path (measured with nvcc 13.0: the same
  file under two folders gives two hashes; the same path gives the same hash across runs,
  across mtimes and inodes, and through a symlink, which is resolved). It lands in the
  kernel's symbol names, in the ``.nv_fatbin`` cubins as well as the host code. wheelwright
  builds every row of a project's variant from one stable source folder
  (``<cache>/src/<project>-<variant>/src``) instead of a random temporary one;
- nvcc writes its intermediate files as ``/tmp/tmpxft_<pid>_00000000-6_<name>.cudafe1.cpp``
  and that name becomes the object's STT_FILE symbol, which a linked library keeps in its
  ``.symtab``; ``-objtemp`` (``NVCC_APPEND_FLAGS``, set for every CUDA row) names them after
  the object instead;
- zip timestamps come from ``SOURCE_DATE_EPOCH`` (the last commit's time).

nvcc 13.0 and 13.2 have ``-frandom-seed`` ("to generate deterministically identical ptx and
object files"; 12.4 has none), but measured with 13.0 it does not reach this hash: the same
file under two folders with ``-frandom-seed=wheelwright`` still gets two hashes. A stable path
is the lever, so wheels are reproducible for one cache path: the same machine, or machines
that set the same ``WHEELWRIGHT_CACHE`` (container builds: cibuildwheel's fixed ``/project``).

The cache-hit half needs tinyaxpy's kernel cache to restore the library's mode (0755): a hit
used to copy it as 0644, the only byte that differed (the zip entry's mode).
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest
from helpers_rows import rows_by_id

from release.core.machine import default_cache_dir
from release.wheelbuild.run import build_row

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "rows.toml"
ROWS = rows_by_id(POLICY)
CACHE = default_cache_dir(os.environ)
HAS_NVCC_13_0 = Path("/usr/local/cuda-13.0/bin/nvcc").is_file()


def _build(tmp_path: Path, name: str, kernels: Path) -> Path:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}
    env["SOURCE_DATE_EPOCH"] = "1700000000"
    (built,) = build_row(
        ROWS["cu130-py312-x86_64"],
        policy_path=POLICY,
        dist_dir=tmp_path / name,
        cache_dir=CACHE,
        backend="host",
        env=env,
        kernel_cache=kernels,
    )
    return built.wheel


def _modes(wheel: Path) -> dict[str, int]:
    with zipfile.ZipFile(wheel) as zf:
        return {i.filename: (i.external_attr >> 16) & 0o777 for i in zf.infolist()}


@pytest.mark.skipif(not HAS_NVCC_13_0, reason="needs the host nvcc 13.0")
def test_two_cold_builds_and_a_cache_hit_give_one_wheel(tmp_path: Path) -> None:
    first = _build(tmp_path, "one", tmp_path / "kernels-one")
    second = _build(tmp_path, "two", tmp_path / "kernels-two")  # cold: a kernel cache of its own
    assert first.name == second.name
    assert hashlib.sha256(first.read_bytes()).hexdigest() == hashlib.sha256(second.read_bytes()).hexdigest()

    hit = _build(tmp_path, "hit", tmp_path / "kernels-one")  # the first build's kernels
    assert _modes(hit) == _modes(first), "a kernel-cache hit changed a file mode"
    assert hit.read_bytes() == first.read_bytes()
    assert _modes(first)["tinyaxpy/lib/libtinyaxpy_kernels.so"] == 0o755
