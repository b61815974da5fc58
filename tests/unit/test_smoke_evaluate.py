"""The smoke verdict from a probe report (pure). Real installs are in tests/integration/test_smoke.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from release.core.errors import InputError
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.smoke.evaluate import evaluate
from release.smoke.run import DEFAULT_PROBE_TIMEOUT_S, PROBE_TIMEOUT_VAR, install_args, probe_timeout

ROOT = Path(__file__).resolve().parents[2]
SITE = "/tmp/v/lib/python3.12/site-packages"


@pytest.fixture(scope="module")
def rows() -> dict[str, Row]:
    return {r.id: r for r in expand(load_policy(ROOT / "rows.toml"))}


def probe(**kw: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"import": "ok", "python": "3.12", "site": SITE, "loaded": [], "run_check": False}
    base.update(kw)
    return base


def test_runtime_from_environment_passes_and_says_skipped(rows: dict[str, Row]) -> None:
    out = evaluate(
        rows["cu130-py312-x86_64"],
        probe(loaded=[f"{SITE}/nvidia/cu13/lib/libcudart.so.13"], no_gpu_reason="no CUDA driver"),
    )
    assert out.passed
    assert not out.executed
    assert out.skipped_reason == "no CUDA driver"
    assert any(line.startswith("- no GPU here: execution skipped") for line in out.lines)


def test_runtime_from_loader_cache_fails(rows: dict[str, Row]) -> None:
    out = evaluate(rows["cu130-py312-x86_64"], probe(loaded=["/usr/local/cuda-13.0/lib/libcudart.so.13"]))
    assert not out.passed
    assert "libcudart came from /usr/local/cuda-13.0/lib/libcudart.so.13" in "\n".join(out.lines)


def test_cu12_runtime_must_come_from_cuda_runtime_folder(rows: dict[str, Row]) -> None:
    row = rows["cu126-py312-x86_64"]
    good = evaluate(row, probe(loaded=[f"{SITE}/nvidia/cuda_runtime/lib/libcudart.so.12"]))
    bad = evaluate(row, probe(loaded=[f"{SITE}/nvidia/cu13/lib/libcudart.so.13"]))
    assert good.passed and not bad.passed


def test_no_runtime_loaded_fails_for_cuda(rows: dict[str, Row]) -> None:
    assert not evaluate(rows["cu130-py312-x86_64"], probe()).passed


def test_import_failure_fails(rows: dict[str, Row]) -> None:
    out = evaluate(
        rows["cu130-py312-x86_64"], {"import": "ImportError: libcudart.so.13: cannot open shared object file"}
    )
    assert not out.passed
    assert "libcudart.so.13" in out.lines[0]


def test_cpu_wheel_runs_check_and_must_not_load_cuda(rows: dict[str, Row]) -> None:
    row = rows["cpu-py312-x86_64"]
    ok = evaluate(row, probe(run_check=True, check={"backend": "cpu", "max_abs_diff": 0.0}))
    assert ok.passed and ok.executed
    bad = evaluate(row, probe(run_check=True, check={"max_abs_diff": 0.0}, loaded=["/x/libcudart.so.13"]))
    assert not bad.passed


def test_gpu_result_must_match_reference(rows: dict[str, Row]) -> None:
    row = rows["cu130-py312-x86_64"]
    loaded = [f"{SITE}/nvidia/cu13/lib/libcudart.so.13"]
    assert evaluate(
        row, probe(loaded=loaded, run_check=True, check={"max_abs_diff": 0.0, "device": "H200"})
    ).passed
    assert not evaluate(row, probe(loaded=loaded, run_check=True, check={"max_abs_diff": 0.5})).passed
    no_image = evaluate(
        row,
        probe(
            loaded=loaded, run_check=True, check_error="BackendError: cudaErrorNoKernelImageForDevice (209)"
        ),
    )
    assert not no_image.passed
    assert "cudaErrorNoKernelImageForDevice" in "\n".join(no_image.lines)


def test_cpp_consumer_runtime_checked(rows: dict[str, Row]) -> None:
    row = rows["cu130-py312-x86_64"]
    loaded = [f"{SITE}/nvidia/cu13/lib/libcudart.so.13"]
    sdk = [f"{SITE}/tinyaxpy/lib/libtinyaxpy_kernels.so"]
    libs = ["tinyaxpy_kernels"]
    assert evaluate(row, probe(loaded=loaded), {"loaded": [*sdk, *loaded], "libraries": libs}).passed
    assert not evaluate(
        row, probe(loaded=loaded), {"loaded": [*sdk, "/usr/lib/libcudart.so.13"], "libraries": libs}
    ).passed
    assert not evaluate(row, probe(loaded=loaded), {"error": "link failed"}).passed
    # checks that could pass without checking anything must fail instead
    assert not evaluate(row, probe(loaded=loaded), {"loaded": loaded, "libraries": []}).passed
    assert not evaluate(row, probe(loaded=loaded), {"loaded": loaded, "libraries": libs}).passed
    assert not evaluate(row, probe(loaded=loaded), {"loaded": sdk, "libraries": libs}).passed


def test_install_args_neutral_and_ordered() -> None:
    args = install_args(
        None, "tinyaxpy", index_url="http://127.0.0.1:1/cu130/simple/", extra_index_urls=["http://x/simple/"]
    )
    assert args[:2] == ["install", "--isolated"]
    assert args[-1] == "tinyaxpy"
    assert args.index("--index-url") < args.index("--extra-index-url")


def test_unreadable_sdk_fails(rows: dict[str, Row]) -> None:
    loaded = [f"{SITE}/nvidia/cu13/lib/libcudart.so.13"]
    out = evaluate(
        rows["cu130-py312-x86_64"], probe(loaded=loaded, sdk_error="tinyaxpy:sdk_paths returned str")
    )
    assert not out.passed
    assert "the SDK paths could not be read" in "\n".join(out.lines)


def test_probe_timeout_from_flag_then_environment_then_default() -> None:
    assert probe_timeout(None, {}) == DEFAULT_PROBE_TIMEOUT_S
    assert probe_timeout(None, {PROBE_TIMEOUT_VAR: "90"}) == 90.0
    assert probe_timeout(30.0, {PROBE_TIMEOUT_VAR: "90"}) == 30.0  # the flag wins
    for bad in ("0", "-5", "soon", "nan", "inf"):
        with pytest.raises(InputError, match=f"{PROBE_TIMEOUT_VAR}='{bad}': give a positive, finite number"):
            probe_timeout(None, {PROBE_TIMEOUT_VAR: bad})
    with pytest.raises(InputError, match="--probe-timeout 0: give a positive"):
        probe_timeout(0.0, {})
