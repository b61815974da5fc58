"""The audit on published wheels: NVIDIA's CUDA library wheels and torch 2.14.1 cu130.

They are pinned by name and sha256 in tests/helpers/real_wheels.py and fetched into a cache
(never copied into the repository); a wheel that cannot be fetched fails its test.
torch (555 MB) runs only with WHEELWRIGHT_BIG_BINARIES=1 (``nox -s tests`` sets it).
docs/audit.md records what the audit reports on each of them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.real_wheels import BY_KEY, FetchError, Pin, fetch, real_wheel, sha256_of

from release.audit.model import AuditResult, Expectation
from release.audit.run import audit_wheel
from release.policy.archs import parse_arch_list
from release.policy.load import load_policy

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
TORCH_ARCHS = "7.5;8.0;8.6;9.0;10.0;12.0"  # every translation unit of libtorch_cuda.so carries these
TORCH_READ_BACK = (  # the claim the audit reads back: per library, exact, variants kept
    "torch/lib/libtorch_cuda.so=7.5;8.0;8.6;8.9;9.0;9.0a;10.0;10.0a;10.3f;12.0;12.0a;12.1a "
    "torch/lib/libtorch_cuda_linalg.so=8.0;8.6;9.0;10.0;12.0 "
    "torch/lib/libtorch_nvshmem.so=7.5;8.0;8.6;9.0;10.0;12.0"
)


def cu130(archs: str | None) -> Expectation:
    return Expectation.for_variant(
        "cu130", parse_arch_list(archs) if archs else (), load_policy(ROOT / "rows.toml")
    )


def messages(result: AuditResult, check: str) -> list[str]:
    return [f.message for f in result.findings if f.check == check and not f.ok]


def test_nvtx_has_no_device_code() -> None:
    result = audit_wheel(real_wheel("nvidia_nvtx"), cu130(None))
    assert result.arch_list_found is None
    assert any("carries device code" in m for m in messages(result, "libraries"))
    assert not messages(result, "hygiene")


def test_cufile_links_system_rdma_libraries() -> None:
    result = audit_wheel(real_wheel("nvidia_cufile"), cu130("7.5;8.0;8.6+PTX"))
    assert result.arch_list_found == "7.5;8.0;8.6+PTX"
    (item,) = result.inventory
    ptx = next(e for e in item["entries"] if e["kind"] == "ptx")
    assert (ptx["ptx_isa"], ptx["emitted_by"], ptx["compressed"]) == ("7.1", "CUDA 11.1", "lz4")
    platform = messages(result, "hygiene")
    assert platform and all("linux_x86_64 at best" in m and "libibverbs.so.1" in m for m in platform)


def test_cupti_tag_between_auditwheel_policies_is_honest() -> None:
    result = audit_wheel(real_wheel("nvidia_cuda_cupti"), cu130(None))
    ok = [f.message for f in result.findings if f.check == "hygiene" and f.ok]
    assert any(m.startswith("platform tag manylinux_2_25_x86_64 is honest") for m in ok)


@pytest.mark.skipif(
    os.environ.get("WHEELWRIGHT_BIG_BINARIES") != "1", reason="set WHEELWRIGHT_BIG_BINARIES=1 for torch"
)
def test_torch() -> None:
    result = audit_wheel(real_wheel("torch"), cu130(TORCH_ARCHS))
    assert result.arch_list_found == TORCH_READ_BACK
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
        "the same ELF file is shipped 2 times under different names: torch/bin/protoc, torch/bin/protoc-3.21.12.0",
        "torch/share/cmake/ATen/ATenConfig.cmake names a path of the build machine: "
        "'set(ATEN_INCLUDE_DIR \"/tmp/tmpzagopw2n/wheel/platlib/torch/include\")'; it exists on no user's "
        "machine: compute the path at run time or leave it out",
    ]
    inventory = {item["library"]: item for item in result.inventory}
    cuda = inventory["torch/lib/libtorch_cuda.so"]
    assert cuda["units"]["total"] == 475 and cuda["units"]["without_kernels"] == 42
    assert all(e["compressed"] == "zstd" for e in cuda["entries"])
    assert result.timings["total"] < 120


# --------------------------------------------------------------------------- the pinned wheels


def test_a_pinned_wheel_is_fetched_checked_and_reused(tmp_path: Path) -> None:
    pin = BY_KEY["nvidia_nvtx"]
    path = fetch(pin, into=tmp_path)
    assert path == tmp_path / pin.filename and sha256_of(path) == pin.sha256
    assert sorted(p.name for p in tmp_path.iterdir()) == [pin.filename]  # no temporary left
    stamp = path.stat().st_mtime_ns
    assert fetch(pin, into=tmp_path) == path and path.stat().st_mtime_ns == stamp  # reused as is
    path.write_bytes(b"damaged")  # a damaged copy is replaced by the pinned file
    assert sha256_of(fetch(pin, into=tmp_path)) == pin.sha256


def test_a_wheel_that_is_not_the_pin_fails_loudly(tmp_path: Path) -> None:
    pin = BY_KEY["nvidia_nvtx"]
    wrong = Pin(pin.project, pin.version, pin.filename, "0" * 64)
    with pytest.raises(FetchError) as info:
        fetch(wrong, into=tmp_path)
    assert str(info.value).startswith(f"{pin.filename} (sha256 {'0' * 64}) could not be fetched: ")
    assert "--require-hashes" in str(info.value) and f"or put the file into {tmp_path}" in str(info.value)
    assert not (tmp_path / pin.filename).exists()
    missing = Pin(pin.project, "0.0.1", pin.filename.replace("13.0.85", "0.0.1"), pin.sha256)
    with pytest.raises(FetchError, match=r"nvidia_nvtx-0\.0\.1-.*could not be fetched"):
        fetch(missing, into=tmp_path)
