"""The device_code check's message asks each claimed GPU's own rule (release/resources/cuda_gpus.py): a claim
of 8.7 (Jetson Orin, a Tegra GPU) with only sm_80 present does not run there, while a claim of 8.6 (a
discrete A10) with the same sm_80 runs it by the desktop minor-version rule."""

from __future__ import annotations

from helpers.audit import contents, cuda, fatbin, lib

from release.audit.checks import device_code


def _missing(claim: str, *targets: str) -> str:
    """The check's message for the claimed architectures the library lacks."""
    found = device_code.check(contents(lib("pkg/lib/libk.so", fatbin(*targets))), cuda(claim))
    (message,) = [f.message for f in found if not f.ok and f.message.startswith("libk.so claims")]
    return message


def test_a_claimed_tegra_gpu_does_not_run_older_sass() -> None:  # must fail: no "runs sm_80 instead"
    message = _missing("8.0;8.7", "sm_80")
    assert "a model would fail on hardware needing ['87']" in message
    assert "runs sm_80 instead" not in message


def test_a_claimed_discrete_gpu_runs_older_sass_of_its_major() -> None:  # must pass the desktop rule
    message = _missing("8.0;8.6", "sm_80")
    assert "the code the claim names is missing for ['86 (runs sm_80 instead)']" in message
    assert "would fail on hardware" not in message


def test_a_claimed_tegra_gpu_jits_older_ptx() -> None:  # PTX is the same rule on every GPU
    message = _missing("8.0;8.7+PTX", "sm_80", "compute_80", "compute_87")
    assert (
        "hardware needing ['87 (JIT from compute_80, compute_87)'] would have to JIT-compile PTX" in message
    )
