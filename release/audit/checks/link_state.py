"""The one finding for a library the CUDA runtime cannot load (relocatable device code never
device-linked: :attr:`release.audit.model.Library.why_cannot_load`). ``device_code`` reports it
when it runs; ``loader`` reports it otherwise (a standalone audit without a claim), so a library
that cannot load always fails the audit, once."""

from __future__ import annotations

from release.audit.model import Finding, Library, fail, label_sort_key

__all__ = ["cannot_load", "entry_name_key"]


def entry_name_key(name: str) -> tuple[tuple[int, str], int]:
    """``sm_80`` < ``compute_80`` < ``sm_86``: by architecture, SASS before PTX."""
    prefix, _, label = name.partition("_")
    return label_sort_key(label), {"sm": 0, "compute": 1}.get(prefix, 2)


def cannot_load(lib: Library, check: str) -> Finding:
    names = ", ".join(sorted({e.name for fb in lib.relocatable for e in fb.entries}, key=entry_name_key))
    only = "only " if not lib.fatbins else ""
    return fail(
        check,
        f"{lib.name} cannot be loaded: it carries {only}relocatable device code (__nv_relfatbin: {names}) that "
        f"was never device-linked, and its host code calls {lib.link_needs[0]}"
        + (f" (and {len(lib.link_needs) - 1} more)" if len(lib.link_needs) > 1 else "")
        + ", which neither it nor a library of its NEEDED closure (found through its RPATH/RUNPATH, as the "
        "loader finds them) defines: loading it fails with 'undefined symbol'; device-link it "
        "(nvcc -dlink, or link with nvcc -rdc=true; CMake: CUDA_RESOLVE_DEVICE_SYMBOLS ON)",
        lib.path,
        link_needs=list(lib.link_needs),
        relocatable=names,
        why=lib.why_cannot_load,
    )
