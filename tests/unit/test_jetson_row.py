"""``[[jetson]]`` rows (release/policy/jetson.py, release/coverage/jetson.py): loaded from the example policy,
and decided from synthetic dependency libraries by the Tegra rule: filled in where the dependency has SASS
of the GPU's own capability or PTX it can JIT, refused with the reason (naming the wheel) where it has
neither; undecided, said, where the wheel was not read. torch's real aarch64 wheel:
tests/integration/test_coverage_torch.py."""

from __future__ import annotations

from pathlib import Path

from helpers.audit import fatbin, lib

from release.coverage.dependency import DependencyCode
from release.coverage.jetson import decide
from release.policy.load import load_policy
from release.policy.model import JetsonRow

ROOT = Path(__file__).resolve().parents[2]
WHEEL = "torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl"


def _rows() -> dict[str, JetsonRow]:
    policy = load_policy(ROOT / "examples" / "torchsaxpy" / "rows.toml")
    return {r.gpu.name: r for r in policy.jetsons}


def _torch(*targets: str) -> DependencyCode:
    return DependencyCode(
        "torch", WHEEL, (lib("torch/lib/libtorch_cuda.so", fatbin(*targets)),), 0.0, "cd" * 32
    )


def test_the_example_declares_an_orin_and_a_thor_row() -> None:
    rows = _rows()
    assert {name: (r.id, r.gpu.cc, r.train, r.python) for name, r in rows.items()} == {
        "Jetson Orin": ("cu130-py311-jetson-orin", "8.7", "13.0", "3.11"),
        "Jetson Thor": ("cu130-py311-jetson-thor", "11.0", "13.0", "3.11"),
    }
    assert {r.platform for r in rows.values()} == {"aarch64"}  # from the GPU entry's cpus


def test_no_code_for_orin_refuses_its_row_naming_the_wheel() -> None:  # must refuse: sm_80 is not Orin's
    d = decide(_rows()["Jetson Orin"], [_torch("sm_80", "sm_90", "sm_110")])
    assert d.verdict == "refused" and d.gpu_archs == ()
    assert d.reason.startswith(
        f"torch 2.14.1 ({WHEEL}) has no device code for Jetson Orin (8.7): it carries sm_80,"
    )
    assert "a wheel here would install and then fail" in d.reason
    assert d.read == (f"torch 2.14.1 ({WHEEL} sha256 {'cd' * 32})",)


def test_code_for_the_gpu_fills_its_row_in() -> None:
    thor = decide(_rows()["Jetson Thor"], [_torch("sm_80", "sm_110")])
    assert (thor.verdict, thor.arch_list) == ("filled", "11.0")
    assert thor.reason.startswith(f"torch 2.14.1 runs on it (native, {WHEEL})")
    orin = decide(_rows()["Jetson Orin"], [_torch("sm_80", "compute_80")])  # PTX JITs on a Tegra GPU too
    assert (orin.verdict, orin.arch_list) == ("filled", "8.7")
    assert "ptx-jit" in orin.reason
    assert "build does not build [[jetson]] rows yet" in orin.line()


def test_an_unread_dependency_leaves_the_row_undecided() -> None:
    d = decide(_rows()["Jetson Thor"], [], ["torch: no wheel of torch for aarch64"])
    assert (d.verdict, d.gpu_archs) == ("undecided", ())
    assert d.line().endswith("undecided: torch: no wheel of torch for aarch64")
