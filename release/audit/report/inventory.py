"""The device code inventory of a wheel, per library: what every JSON report carries. Pure.

For each library (or device code file) with device code, whether it passed or not:

* ``entries``: its SASS, PTX and LTO-IR entries grouped by target, with how many there are,
  the variant, the PTX ISA and the CUDA release that writes it (:mod:`release.resources.cuda`),
  the compression, and whether they are executable (``.nv_fatbin``) or relocatable;
* ``units``: translation units (fatbinaries), those with kernels, those without (nvcc's link
  step, host-only units) and those that could not be looked into;
* ``claim``: the library's device code as a claim that passes when fed back;
* ``loads``: False for relocatable device code never device-linked, with the symbols it lacks;
* ``embedded``: device code images found as data, by section and target;
* ``toolkits``: the ptxas releases its cubins name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from release.audit.checks.device_code import library_claim
from release.audit.drivers import need_for_entry
from release.audit.model import Contents, Library
from release.binary.fatbin import Fatbinary, FatbinEntry
from release.policy.archs import claim_text
from release.resources.cuda import cuda

__all__ = ["inventory", "library_inventory"]


def _emitted_by(entry: FatbinEntry) -> str | None:
    need = need_for_entry(entry)  # the first release writing the entry's PTX ISA
    if need is None:
        return None
    if need.release is None:
        return f"newer than CUDA {cuda().releases[-1].label}"
    return f"CUDA {need.release.label}"


def _entries(units: tuple[Fatbinary, ...]) -> list[dict[str, Any]]:
    groups: Counter[tuple[str, int, str, tuple[int, int] | None, str | None, bool]] = Counter()
    for fb in units:
        for e in fb.entries:
            groups[(e.kind, e.arch, e.variant, e.ptx_isa, e.compression, fb.relocatable)] += 1
    out = []
    for (kind, arch, variant, isa, compression, relocatable), count in sorted(
        groups.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0], kv[0][5], str(kv[0][4]))
    ):
        sample = FatbinEntry(kind, arch, variant, code_version=isa or (0, 0))  # type: ignore[arg-type]
        out.append(
            {
                "target": sample.name,
                "kind": kind,
                "arch": arch,
                "variant": variant,
                "ptx_isa": f"{isa[0]}.{isa[1]}" if isa else None,
                "emitted_by": _emitted_by(sample),
                "compressed": compression,
                "relocatable": relocatable,
                "count": count,
            }
        )
    return out


def library_inventory(lib: Library) -> dict[str, Any]:
    kernels = Counter(
        "unknown" if k is None else "with_kernels" if k else "without_kernels" for k in lib.unit_kernels
    )
    out: dict[str, Any] = {
        "library": lib.path,
        "kind": lib.device_file or "library",
        "entries": _entries(lib.fatbins + lib.relocatable),
        "units": {
            "total": len(lib.fatbins),
            "with_kernels": kernels["with_kernels"],
            "without_kernels": kernels["without_kernels"],
            "unknown": kernels["unknown"],
            "relocatable": len(lib.relocatable),
        },
        "claim": claim_text(library_claim(lib)) or None,
        "loads": not lib.cannot_load,
        "why": lib.why_cannot_load,
        "link_needs": list(lib.link_needs),
        "toolkits": [f"{a}.{b}" for a, b in lib.toolkits],
        "error": lib.fatbin_error,
    }
    if lib.kernels_unknown:
        out["units"]["unknown_why"] = lib.kernels_unknown
    if lib.embedded:
        sections = Counter(image.section for image in lib.embedded)
        targets = Counter(t for image in lib.embedded for t in image.targets)
        out["embedded"] = {
            "images": len(lib.embedded),
            "kinds": dict(Counter(image.kind for image in lib.embedded)),
            "sections": dict(sections),
            "targets": dict(sorted(targets.items())),
        }
    return out


def inventory(contents: Contents) -> tuple[Mapping[str, Any], ...]:
    """One entry per library or device code file that carries device code (embedded included)."""
    return tuple(library_inventory(lib) for lib in contents.libraries if lib.has_device_code or lib.embedded)
