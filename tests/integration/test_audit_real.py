"""The audit on published wheels: NVIDIA's CUDA library wheels and torch 2.14.1 cu130.

They are read from the local wheel store (never copied into the repository) and the
tests skip when it is absent. torch (555 MB) runs only with WHEELWRIGHT_BIG_BINARIES=1.
docs/audit.md records what the audit reports on each of them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from release.audit.model import AuditResult, Expectation
from release.audit.run import audit_wheel
from release.policy.archs import parse_arch_list
from release.policy.load import load_policy

pytestmark = pytest.mark.integration

STORE = Path(os.environ.get("WHEELWRIGHT_WHEEL_STORE", "/opt/pypi-more/files"))
ROOT = Path(__file__).resolve().parents[2]
TORCH = STORE / "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
TORCH_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0"  # read back from the wheel: see docs/audit.md


def store_wheel(prefix: str) -> Path:
    found = sorted(STORE.glob(f"{prefix}-*.whl"))
    if not found:
        pytest.skip(f"no {prefix} wheel in {STORE}")
    return found[0]


def cu130(archs: str | None) -> Expectation:
    return Expectation.for_variant(
        "cu130", parse_arch_list(archs) if archs else (), load_policy(ROOT / "rows.toml")
    )


def messages(result: AuditResult, check: str) -> list[str]:
    return [f.message for f in result.findings if f.check == check and not f.ok]


def test_nvtx_has_no_device_code() -> None:
    result = audit_wheel(store_wheel("nvidia_nvtx"), cu130(None))
    assert result.arch_list_found is None
    assert any("carries device code" in m for m in messages(result, "libraries"))
    assert not messages(result, "hygiene")


def test_cufile_links_system_rdma_libraries() -> None:
    result = audit_wheel(store_wheel("nvidia_cufile"), cu130("7.5;8.0;8.6+PTX"))
    assert result.arch_list_found == "7.5;8.0;8.6+PTX"
    platform = messages(result, "hygiene")
    assert platform and all("linux_x86_64 at best" in m and "libibverbs.so.1" in m for m in platform)


def test_cupti_tag_between_auditwheel_policies_is_honest() -> None:
    result = audit_wheel(store_wheel("nvidia_cuda_cupti"), cu130(None))
    ok = [f.message for f in result.findings if f.check == "hygiene" and f.ok]
    assert any(m.startswith("platform tag manylinux_2_25_x86_64 is honest") for m in ok)


@pytest.mark.skipif(
    os.environ.get("WHEELWRIGHT_BIG_BINARIES") != "1", reason="set WHEELWRIGHT_BIG_BINARIES=1 for torch"
)
def test_torch() -> None:
    if not TORCH.is_file():
        pytest.skip(f"{TORCH} is absent")
    result = audit_wheel(TORCH, cu130(TORCH_ARCHS))
    assert result.arch_list_found == TORCH_ARCHS
    device = messages(result, "device_code")
    assert any(
        m.startswith("libtorch_cuda_linalg.so claims GPU architectures") and "needing ['75']" in m
        for m in device
    )
    assert any("['sm_89']" in m for m in device)
    assert any("sm_90a" in m and "sm_103f" in m for m in device)
    assert any("T4 / RTX 20" in m for m in messages(result, "gpus"))
    hygiene = messages(result, "hygiene")
    assert hygiene == [
        "the same ELF file is shipped 2 times under different names: torch/bin/protoc, torch/bin/protoc-3.21.12.0"
    ]
    assert result.timings["total"] < 120
