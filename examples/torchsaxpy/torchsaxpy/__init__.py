"""torchsaxpy: a*x+y for float32 tensors, as the PyTorch operator torch.ops.torchsaxpy.saxpy.

CUDA builds register a CUDA kernel beside the CPU one; the CUDA runtime they link is the
one torch loads (torch's own CUDA dependencies), so importing needs torch first.
"""

from __future__ import annotations

from typing import Any

import torch

from . import _C  # noqa: F401  (loading the library registers the operator)

__all__ = ["check", "has_cuda_kernel", "saxpy", "saxpy_reference"]
__version__ = "0.1.0"


def saxpy(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """a*x+y on x's device, through the extension's kernel for that device."""
    out: torch.Tensor = torch.ops.torchsaxpy.saxpy.default(x, y, a)
    return out


def saxpy_reference(a: float, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The same with torch's own CPU operators."""
    return torch.tensor(a, dtype=torch.float32) * x.cpu() + y.cpu()


def has_cuda_kernel() -> bool:
    """Whether this build registered a CUDA kernel (it was compiled with a CUDA toolkit)."""
    return bool(torch.ops.torchsaxpy.saxpy.default.has_kernel_for_dispatch_key("CUDA"))


def check(n: int = 1 << 20, device: str | None = None) -> dict[str, Any]:
    """Run saxpy on exactly representable data on ``device`` and compare with the reference.

    ``device`` defaults to "cuda" where torch sees a GPU, else "cpu".
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    i = torch.arange(n, dtype=torch.int64)
    x = (i % 2001 - 1000).to(torch.float32)
    y = (i * 7 % 1000).to(torch.float32)
    got = saxpy(2.0, x.to(device), y.to(device))
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    diff = (got.cpu() - saxpy_reference(2.0, x, y)).abs().max().item() if n else 0.0
    capability = None
    if device.startswith("cuda"):
        capability = "{}.{}".format(*torch.cuda.get_device_capability(device))
    return {
        "backend": "cuda" if device.startswith("cuda") else "cpu",
        "device": torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu",
        "compute_capability": capability,
        "cuda_kernel": has_cuda_kernel(),
        "max_abs_diff": float(diff),
        "n": n,
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
    }
