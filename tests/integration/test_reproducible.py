"""Reproducible wheels: two cold builds of one commit are byte-identical, and a kernel-cache
hit gives the same wheel as a cold build (the library keeps its file mode).

What used to differ between two cold builds of tinyaxpy's cu130 row, and what fixes it:

- nvcc names a source's anonymous namespaces ``_GLOBAL__N__<8 hex>_..._<8 hex>``; the first
  hash is derived from the source file's absolute path (measured with nvcc 13.0: the same
  file under two folders gives two hashes; the same path gives the same hash across runs,
  across mtimes and inodes, and through a symlink, which is resolved). It lands in the
  kernel's symbol names, in the ``.nv_fatbin`` cubins as well as the host code. wheelwright
  builds every row of a project's variant from one fixed source folder
  (``/tmp/wheelwright-src/<project>-<variant>/src``, :mod:`release.wheelbuild.host.stage`), the same
  on every machine, instead of a random temporary one or one in the cache (a cache under
  another home folder gave another hash: ``67973857...`` vs ``35fbb264...`` for cu130-py312);
- nvcc writes its intermediate files as ``/tmp/tmpxft_<pid>_00000000-6_<name>.cudafe1.cpp``
  and that name becomes the object's STT_FILE symbol, which a linked library keeps in its
  ``.symtab``; ``-objtemp`` (``NVCC_APPEND_FLAGS``, set for every CUDA row) names them after
  the object instead;
- zip timestamps come from ``SOURCE_DATE_EPOCH`` (the last commit's time).

nvcc 13.0 and 13.2 have ``-frandom-seed`` ("to generate deterministically identical ptx and
object files"; 12.4 has none), but measured with 13.0 it does not reach this hash: the same
file under two folders with ``-frandom-seed=wheelwright`` still gets two hashes.
``-Xcudafe --orig_src_path_name=<fixed>`` does reach it (host and device names), but names one
file, so it cannot be given to a whole build. A fixed real path is the lever, as the container
build's ``/project`` is.

The second half: tinyaxpy's kernel cache key lands in the wheel (``_build_info.py``) and used to
hash the toolchain's path, so a PyPI toolchain in two caches gave two wheels (cu132-py312:
``93b9bfea...`` vs ``53c31c89...``); it now hashes what the toolchain is.

The cache-hit half needs tinyaxpy's kernel cache to restore the library's mode (0755): a hit
used to copy it as 0644, the only byte that differed (the zip entry's mode).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.core.machine import default_cache_dir
from release.wheelbuild.run import build_row

pytestmark = [pytest.mark.integration, pytest.mark.slow]

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


# --------------------------------------------------------------------------- any machine

PYPI_TOOLCHAIN = CACHE / "cuda-13.2.86"  # the cu132 train's pinned PyPI toolchain, once installed here


def _cold(tmp_path: Path, name: str, row: str, *, toolchain: Path | None = None) -> tuple[Path, Path, Path]:
    """A cold build of ``row`` with a cache and a HOME of its own; (wheel, cache, home).

    What differs between two calls: the cache folder (build environments, kernel cache, logs,
    and for a PyPI toolchain its path: a hard-linked copy in each cache, so nvcc, its headers and
    libcudart lie at two real paths) and HOME (XDG_CACHE_HOME unset). What is the same: this
    machine's CPython (pyenv, PYENV_ROOT kept), g++, the host nvcc of the cu130 row, TMPDIR.
    """
    cache, home = tmp_path / name / "cache", tmp_path / name / "home"
    home.mkdir(parents=True)
    if toolchain is not None:
        shutil.copytree(toolchain, cache / toolchain.name, symlinks=True, copy_function=os.link)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP", "XDG_CACHE_HOME")
    }
    env.update(HOME=str(home), WHEELWRIGHT_CACHE=str(cache), SOURCE_DATE_EPOCH="1700000000")
    (built,) = build_row(
        ROWS[row],
        policy_path=POLICY,
        dist_dir=tmp_path / name / "dist",
        cache_dir=cache,
        backend="host",
        env=env,
    )
    return built.wheel, cache, home


def _leaks(wheel: Path, *paths: Path) -> list[str]:
    """Members of ``wheel`` whose bytes name any of ``paths`` (RECORD, .so strings, dist-info)."""
    needles = [str(p).encode() for p in paths]
    with zipfile.ZipFile(wheel) as zf:
        return [i.filename for i in zf.infolist() if any(n in zf.read(i) for n in needles)]


def _twice(tmp_path: Path, row: str, toolchain: Path | None = None) -> None:
    one, cache_one, home_one = _cold(tmp_path, "one", row, toolchain=toolchain)
    two, cache_two, home_two = _cold(tmp_path, "two", row, toolchain=toolchain)
    assert one.name == two.name
    assert hashlib.sha256(one.read_bytes()).hexdigest() == hashlib.sha256(two.read_bytes()).hexdigest(), (
        f"{row}: two cold builds with caches {cache_one} and {cache_two} differ"
    )
    assert _leaks(one, cache_one, home_one, tmp_path) == []
    assert _leaks(two, cache_two, home_two, tmp_path) == []


@pytest.mark.parametrize(
    "row",
    [
        "cpu-py312-x86_64",
        pytest.param(
            "cu130-py312-x86_64",
            marks=pytest.mark.skipif(not HAS_NVCC_13_0, reason="needs the host nvcc 13.0"),
        ),
    ],
)
def test_two_machines_cold_builds_are_byte_identical(tmp_path: Path, row: str) -> None:
    """Another cache folder and another HOME (another user's machine) give the same wheel."""
    _twice(tmp_path, row)


@pytest.mark.skipif(not PYPI_TOOLCHAIN.is_dir(), reason=f"needs the cu132 PyPI toolchain in {PYPI_TOOLCHAIN}")
def test_a_pypi_toolchain_in_two_caches_gives_one_wheel(tmp_path: Path) -> None:
    """The toolchain itself at two real paths (each cache's own copy): still one wheel."""
    _twice(tmp_path, "cu132-py312-x86_64", toolchain=PYPI_TOOLCHAIN)
