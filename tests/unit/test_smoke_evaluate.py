"""The smoke verdict from a probe report (pure). Real installs are in tests/integration/test_smoke.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.policy import stub_project

from release.core.errors import InputError
from release.policy.load import load_policy
from release.policy.matrix import Row, expand
from release.policy.model import Project
from release.smoke.evaluate import NO_CHECK, driver_import_note, evaluate, judge_check
from release.smoke.libraries import library_name, site_relative
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


# ---------------------------------------------------------------- shipped libraries, no check, tolerance

RUNTIME = f"{SITE}/nvidia/cu13/lib/libcudart.so.13"
KERNELS = {"member": "lazysaxpy/libk.so", "path": f"{SITE}/lazysaxpy/libk.so", "needs": ["libcudart.so.13"]}


def test_a_lazily_loaded_library_proves_the_runtime(rows: dict[str, Row]) -> None:
    """Importing loaded nothing native; loading the shipped kernels library brought libcudart in
    from the environment: that passes, and says which library was loaded."""
    row = rows["cu130-py312-x86_64"]
    out = evaluate(row, probe(loaded_by_import=[], loaded=[RUNTIME], libraries=[{**KERNELS, "error": None}]))
    assert out.passed, out.lines
    assert out.lines[1] == (
        "✓ loaded the shipped library that links a CUDA library, after the import: "
        "lazysaxpy/libk.so (libcudart.so.13)"
    )
    assert out.libcudart == RUNTIME


def test_a_shipped_library_that_does_not_load_fails(rows: dict[str, Row]) -> None:
    row = rows["cu130-py312-x86_64"]
    error = "libcudart.so.13: cannot open shared object file: No such file or directory"
    out = evaluate(row, probe(loaded=[], libraries=[{**KERNELS, "error": error}]))
    assert not out.passed
    text = "\n".join(out.lines)
    assert (
        f"✗ lazysaxpy/libk.so (links libcudart.so.13) does not load after importing the package: {error}"
        in text
    )
    assert (
        "✗ no libcudart was loaded by importing the package and loading its 1 shipped library that link"
        in text
    )
    # one the probe never reached (it stopped), or whose headers were unreadable, fails too
    assert not evaluate(row, probe(loaded=[RUNTIME], libraries=[KERNELS])).passed
    unreadable = {**KERNELS, "problem": "its ELF headers cannot be read: truncated"}
    assert not evaluate(row, probe(loaded=[RUNTIME], libraries=[unreadable])).passed
    assert not evaluate(row, probe(loaded=[RUNTIME], libraries=["lazysaxpy/libk.so"])).passed


def test_a_library_needing_the_driver_is_excused_only_without_one(rows: dict[str, Row]) -> None:
    row = rows["cu130-py312-x86_64"]
    driver = {**KERNELS, "needs": ["libcuda.so.1", "libcudart.so.13"], "error": "libcuda.so.1: cannot open"}
    no_driver = "no CUDA driver (libcuda.so.1 cannot be loaded)"
    out = evaluate(row, probe(loaded=[RUNTIME], libraries=[driver], no_gpu_reason=no_driver))
    assert out.passed, out.lines
    assert "- lazysaxpy/libk.so was not loaded: it needs the CUDA driver (libcuda.so.1)" in "\n".join(
        out.lines
    )
    with_gpu = probe(loaded=[RUNTIME], libraries=[driver], gpus=1, no_gpu_reason=None)
    assert not evaluate(row, with_gpu).passed


def test_no_cuda_library_shipped_and_none_loaded(rows: dict[str, Row]) -> None:
    assert not evaluate(rows["cu130-py312-x86_64"], probe(libraries=[])).passed
    cpu = evaluate(rows["cpu-py312-x86_64"], probe(libraries=[], run_check=True, check={"max_abs_diff": 0.0}))
    assert cpu.passed and "✓ no shipped library links a CUDA library" in cpu.lines


def test_without_a_check_the_record_says_import_and_load_only(rows: dict[str, Row]) -> None:
    for row_id in ("cu130-py312-x86_64", "cpu-py312-x86_64"):
        loaded = [RUNTIME] if row_id.startswith("cu") else []
        out = evaluate(rows[row_id], probe(loaded=loaded, no_check=True, run_check=False))
        assert out.passed and not out.executed
        assert out.skipped_reason == NO_CHECK
        assert f"- {NO_CHECK}" in out.lines


def _project(tmp: Path, **keys: object) -> Project:
    text = (ROOT / "examples" / "lazysaxpy" / "rows.toml").read_text(encoding="utf-8")
    extra = "".join(f"\n{k} = {v!r}" for k, v in keys.items())
    (tmp / "rows.toml").write_text(text.replace('wheel_tags = "py3-none"', 'wheel_tags = "py3-none"' + extra))
    stub_project(tmp)  # lazysaxpy's project.path is "."
    return load_policy(tmp / "rows.toml").project


@pytest.mark.parametrize(
    ("keys", "result", "passed", "fragment"),
    [
        ({}, {"max_abs_diff": 0.0, "device": "H200"}, True, "max |diff| vs CPU reference = 0"),
        ({}, {"max_abs_diff": 6e-8}, False, "expected max_abs_diff == 0.0 (exact: set project.atol"),
        ({}, {"max_abs_diff": False}, False, "expected a dict with a number max_abs_diff"),
        ({}, {"max_abs_diff": float("nan")}, False, "expected a dict with a number max_abs_diff"),
        ({}, [0.0], False, "expected a dict with a number max_abs_diff"),
        ({"atol": 1e-6}, {"max_abs_diff": 6e-8, "device": "H200"}, True, "= 6e-08 <= 1e-06 (atol 1e-06)"),
        ({"atol": 1e-9}, {"max_abs_diff": 6e-8}, False, "max_abs_diff 6e-08 is over the tolerance 1e-09"),
        (
            {"rtol": 1e-7},
            {"max_abs_diff": 6e-8, "max_abs_reference": 1.0},
            True,
            "rtol 1e-07 x max |reference| 1",
        ),
        ({"rtol": 1e-7}, {"max_abs_diff": 6e-8}, False, "project.rtol needs it to report max_abs_reference"),
        (
            {"rtol": 1e-7, "atol": 1e-9},
            {"max_abs_diff": 2e-6, "max_abs_reference": 4.0},
            False,
            "over the tolerance",
        ),
    ],
)
def test_the_check_is_exact_unless_the_policy_sets_a_tolerance(
    rows: dict[str, Row], tmp_path: Path, keys: dict[str, float], result: object, passed: bool, fragment: str
) -> None:
    project = _project(tmp_path, **keys)
    row = rows["cu130-py312-x86_64"]
    out = evaluate(row, probe(loaded=[RUNTIME], run_check=True, check=result), project=project)
    assert out.passed is passed, out.lines
    assert fragment in out.lines[-1], out.lines[-1]
    assert judge_check(result, project) == (passed, out.lines[-1])


def test_library_names_and_where_members_install() -> None:
    assert library_name("pkg/libk.so") and library_name("pkg/libk.so.13") and library_name("pkg/_C.abi3.so")
    assert not library_name("pkg/so.py") and not library_name("pkg/libk.sox")
    assert site_relative("pkg/libk.so", "pkg-1.0.data") == "pkg/libk.so"
    assert site_relative("pkg-1.0.data/platlib/pkg/libk.so", "pkg-1.0.data") == "pkg/libk.so"
    assert site_relative("pkg-1.0.data/purelib/pkg/./libk.so", "pkg-1.0.data") == "pkg/libk.so"
    assert site_relative("pkg-1.0.data/scripts/tool", "pkg-1.0.data") is None
    assert site_relative("pkg-1.0.dist-info/RECORD", None) is None
    assert site_relative("pkg/", None) is None


def test_a_check_that_names_no_device_is_not_said_to_run_on_none() -> None:
    """Seen on an H100 (idiom fixture driver_target, whose check returns no "device"): the line read
    "ran on None"."""
    ok, line = judge_check({"max_abs_diff": 0.0, "n": 4096, "driver_version": 13000}, None)
    assert ok and line == "✓ check computation ran: max |diff| vs CPU reference = 0"
    ok, line = judge_check({"max_abs_diff": 0.0, "device": "cuda:0"}, None)
    assert ok and line == "✓ check computation ran on cuda:0: max |diff| vs CPU reference = 0"


# seen here (no NVIDIA driver) for idiom (g), tests/fixtures/idioms/driver_target, which links CUDA::cuda_driver
DRIVER_IMPORT_ERROR = "ImportError: libcuda.so.1: cannot open shared object file: No such file or directory"


def test_an_import_that_needs_the_missing_driver_fails_saying_why_and_what_verifies_it() -> None:
    note = driver_import_note(DRIVER_IMPORT_ERROR)
    assert note is not None and note.startswith("- the import needs the CUDA driver (libcuda.so.1)")
    assert "GPU machine" in note and "dlopen" in note


def test_must_fail_another_import_error_gets_no_driver_note() -> None:
    assert driver_import_note("ImportError: libcudart.so.13: cannot open shared object file") is None
    assert driver_import_note("ModuleNotFoundError: No module named 'idiom_driver._core'") is None
