"""The survey of real CUDA wheels (docs/survey.md), run as a user runs it: ``audit W --json`` from an empty folder.

Ten of the survey's wheels (285 MB together, pinned by name and sha256 in tests/helpers/real_wheels.py's
SURVEY_PINS, fetched into the cache once), each audited standalone with no claim and no rows.toml:
the verdict is 0 or 1, never 2, and the findings that make it are the ones docs/survey.md explains.
Three are the false findings the survey found and the audit no longer makes:

* jax_cuda12_plugin's libmosaic_gpu_runtime.so exports the driver API and forwards to libcuda.so.1:
  a shim, not "a copy of the CUDA driver";
* torchaudio's doctest line ``>>> ... LibriMix("/home/datasets/", ...)`` is no build path;
* bitsandbytes' libbitsandbytes_cuda121.so needs libcudart.so.12, whose package is CUDA 12's
  (nvidia-cuda-runtime-cu12), not that of the wheel's first library's CUDA 11;

and cucim's RUNPATH ``:::::::`` is one empty entry, reported once; every translation unit of every
library is looked into (spconv's LZ4 PTX entries, padded to 8 bytes, were "unknown" in 242 units). A tenth, nvidia_cufile (the
corpus's, 1 MB), is the sibling case: libcufile_rdma.so.1 needs libcufile.so.0, which the wheel ships
beside it, and has no RUNPATH to find it; not a library "which neither the wheel nor a declared CUDA
package provides".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.proc import audit_json
from helpers.real_wheels import SURVEY_TESTED, real_wheel, survey_wheel

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]


# bitsandbytes 0.50.2: a library per CUDA release, each with its own architectures
BITSANDBYTES = [
    *((v, "6.0;7.0;7.5;8.0;8.6;8.9;9.0") for v in (118, 121, 124, 126)),
    (128, "7.0;7.5;8.0;8.6;8.9;9.0;10.0;12.0"),
    *((v, "7.5;8.0;8.6;8.9;9.0;10.0;12.0") for v in (130, 132)),
]

# per wheel: the exit, the checks that fail, the device code read back, and messages (by a part of
# each) that must be among the failing findings (+) or among the passing ones (=)
EXPECTED: dict[str, tuple[int, list[str], str | None, list[str]]] = {
    "rmm_cu12": (
        1,
        ["hygiene"],
        None,
        ["+it links librapids_logger.so, librmm.so, which manylinux_2_24_x86_64 does not allow"],
    ),
    "torchaudio": (
        1,
        ["hygiene", "loader"],
        "7.5;8.0;8.6;9.0;10.0;12.0+PTX",
        [
            "+WHEEL lists the tags ['py3-none-linux_x86_64'] but the file name says ['py3-none-manylinux_2_28_x86_64']",
            "+libtorchaudio.so needs libcudart.so.13, which neither the wheel nor a CUDA package the wheel declares",
            "+it links libc10.so, libc10_cuda.so, libtorch.so",
        ],
    ),
    "xformers": (
        1,
        ["hygiene", "loader"],
        "7.5;8.0+PTX;9.0a",
        [
            "+_C.so needs libcudart.so.12, which neither the wheel nor a CUDA package the wheel declares (none) "
            "provides; for CUDA 12 nvidia-cuda-runtime-cu12 ships it"
        ],
    ),
    "jax_cuda12_plugin": (
        0,
        [],
        "5.0;6.0;7.0;8.0;9.0;10.0;10.1;12.0+PTX",
        [
            "=jax_cuda12_plugin/libmosaic_gpu_runtime.so exports the CUDA driver's functions (cuDriverGetVersion) "
            "but looks them up at run time (dlsym) and never calls ioctl"
        ],
    ),
    "cucim_cu12": (
        1,
        ["loader"],
        "5.0;5.2;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0;10.0;10.1;10.3;12.0;12.1+PTX",
        [
            "+_cucim.cpython-312-x86_64-linux-gnu.so has an absolute RUNPATH entry '/__w/cucim/cucim/install/lib'",
            "+libcucim.so.26 has an empty RUNPATH entry (':::::::')",
        ],
    ),
    "cumm_cu120": (
        1,
        ["hygiene"],
        None,
        [
            "+cumm_cu120.libs/libcudart-5a077122.so.12.0.107 is the CUDA runtime of CUDA 12",
            "+cumm_cu120.libs/libnvrtc-d7c32a86.so.12.0.140 is NVRTC of CUDA 12",
            "+cumm/gemm/cutlasstest.py names a path of the build machine: 'CUTLASS_ROOT = Path(\"/home/yy/",
        ],
    ),
    "ctranslate2": (0, [], "5.3;6.0;6.1;7.0;7.5;8.0;8.6+PTX", []),
    "bitsandbytes": (
        1,
        ["hygiene", "loader"],
        " ".join(f"bitsandbytes/libbitsandbytes_cuda{v}.so={archs}" for v, archs in BITSANDBYTES),
        [
            "+libbitsandbytes_cuda121.so has an absolute RUNPATH entry '/usr/local/cuda-12.1/targets/x86_64-linux/lib'",
            "+libbitsandbytes_cuda121.so needs libcudart.so.12, which neither the wheel nor a CUDA package "
            "the wheel declares (none) provides; for CUDA 12 nvidia-cuda-runtime-cu12 ships it",
            "+libbitsandbytes_cuda130.so needs libcublas.so.13, which neither the wheel nor a CUDA package "
            "the wheel declares (none) provides; for CUDA 13 nvidia-cublas ships it",
        ],
    ),
    "spconv_cu126": (
        1,
        ["hygiene"],
        "sm_50;sm_52;6.0;6.1;7.0;7.5;8.0;8.6;8.9;9.0+PTX",
        ["+spconv_cu126.libs/libcudart-53d54daa.so.12.6.68 is the CUDA runtime of CUDA 12"],
    ),
    "cupy_cuda13x": (
        1,
        ["hygiene", "loader"],
        "7.5;8.0;8.6;8.9;9.0;10.0f;compute_120;12.0f",
        [
            "+WHEEL lists the tags ['cp312-cp312-linux_x86_64'] but the file name says "
            "['cp312-cp312-manylinux2014_x86_64']",
            "+_carray.cpython-312-x86_64-linux-gnu.so needs GLIBCXX_3.4.21",
            "+cublas.cpython-312-x86_64-linux-gnu.so needs libcublas.so.13, which neither the wheel nor a CUDA "
            "package the wheel declares (cuda-pathfinder) provides",
        ],
    ),
}


def audit(wheel: Path, cwd: Path) -> tuple[int, dict[str, Any]]:
    """``python -m release audit WHEEL --json`` in ``cwd``, an empty folder, as docs/survey.md ran it."""
    return audit_json(wheel, cwd=cwd)


def test_every_tested_wheel_has_its_expectation() -> None:
    assert sorted(EXPECTED) == sorted(SURVEY_TESTED)


@pytest.mark.parametrize("key", SURVEY_TESTED)
def test_a_survey_wheel_gets_its_verdict(key: str, tmp_path: Path) -> None:
    wheel = survey_wheel(key)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, result = audit(wheel, empty)
    exit_code, failed, found, messages = EXPECTED[key]
    failing = [f["message"] for f in result["findings"] if not f["ok"]]
    passing = [f["message"] for f in result["findings"] if f["ok"]]
    assert (code, sorted(result["failed_checks"])) == (exit_code, failed), failing
    assert result["arch_list_found"] == found
    for wanted in messages:
        pool = failing if wanted[0] == "+" else passing
        assert any(wanted[1:] in m for m in pool), (wanted, pool)
    unknown = {i["library"]: i["units"] for i in result["inventory"] if (i.get("units") or {}).get("unknown")}
    assert not unknown, unknown  # every unit's kernels looked into
    assert not any("a copy of the CUDA driver" in m for m in failing)
    assert not any("/home/datasets/" in m for m in failing)
    for library in {f["library"] for f in result["findings"] if f["library"]}:
        messages_of = [m for f in result["findings"] if f["library"] == library for m in [f["message"]]]
        assert len(messages_of) == len(set(messages_of)), f"a finding repeated for {library}"
    assert sorted(p.name for p in empty.iterdir()) == []  # a standalone audit writes nothing here


def test_a_shipped_sibling_out_of_the_search_path_is_named_as_shipped(tmp_path: Path) -> None:
    code, result = audit(real_wheel("nvidia_cufile"), tmp_path)
    failing = [f["message"] for f in result["findings"] if not f["ok"]]
    assert (code, sorted(result["failed_checks"])) == (1, ["hygiene", "loader"]), failing
    (sibling,) = [m for m in failing if m.startswith("libcufile_rdma.so.1 needs libcufile.so.0")]
    assert sibling.startswith(
        "libcufile_rdma.so.1 needs libcufile.so.0, which the wheel ships (nvidia/cu13/lib/libcufile.so.0), "
        "but it has no RPATH/RUNPATH to reach nvidia/cu13/lib"
    )
    assert sibling.endswith("; add '$ORIGIN'")
    assert not any("neither the wheel nor" in m for m in failing)
