"""Byte sizes: the units the limits are written in, and how messages write a size."""

from __future__ import annotations

__all__ = ["GIB", "KIB", "MIB", "size"]

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def size(n: int) -> str:
    """``1.5 GiB``, ``16 MiB``, ``512 bytes``: sizes in messages."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale:
            value = n / scale
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"
