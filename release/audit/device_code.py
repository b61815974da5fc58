"""Check ``device_code``: every library with device code matches the claimed architectures.

Each library is judged on its own: one library's SASS never covers for another's
(no union across libraries; a model that calls into the library missing an arch
fails on that GPU). Within a library, the fatbinaries of all its translation units
count together here; :mod:`release.audit.gpus` looks at each translation unit.

For every library whose ELF has a non-empty ``.nv_fatbin`` section:

* SASS for every claimed architecture (``sm_80``; ``sm_90a`` when ``9.0a`` is claimed);
* PTX for every architecture claimed with ``+PTX`` (the newest of a row);
* no plain architecture the row did not claim, as SASS or PTX: that means the build
  ignored the row's list (a detected GPU, a default ``-arch``);
* arch-specific (``sm_90a``) and family (``sm_100f``) code the row did not ask for is
  governed by the policy's ``extra_variants`` (``reject`` fails, ``allow`` notes it).

LTO-IR entries are link-time input, not code a GPU runs: they are counted in the
details and otherwise ignored. A CPU wheel may carry no device code at all.
"""

from __future__ import annotations

from collections.abc import Iterable

from release.audit.model import Contents, Expectation, Finding, Library, arch_label, fail, label_sort_key, ok
from release.policy.archs import Arch, torch_cuda_arch_list

CHECK = "device_code"

Target = tuple[int, str]  # (compute capability like 90, variant '' | 'a' | 'f')


def _labels(targets: Iterable[Target]) -> list[str]:
    return sorted((arch_label(cc, v) for cc, v in set(targets)), key=label_sort_key)


def targets(lib: Library, kind: str) -> set[Target]:
    return {(e.arch, e.variant) for fb in lib.fatbins for e in fb.entries if e.kind == kind}


def _name_key(name: str) -> tuple[tuple[int, str], int]:
    """``sm_80`` < ``compute_80`` < ``sm_86``: by architecture, SASS before PTX."""
    prefix, _, label = name.partition("_")
    return label_sort_key(label), {"sm": 0, "compute": 1}.get(prefix, 2)


def _entry_names(lib: Library) -> list[str]:
    return sorted({e.name for fb in lib.fatbins for e in fb.entries}, key=_name_key)


def arch_list_found(contents: Contents) -> str | None:
    """The arch list the build used, read back from the device code (``7.5;8.0;12.0+PTX``).

    Per library, the plain architectures that at least half of its translation units
    (fatbinaries) carry: the list every kernel file was built with, without the odd
    kernel that adds ``sm_89`` or ``sm_90a`` on its own; then the union over libraries.
    ``+PTX`` likewise. A report line for reading a published wheel's list (to seed or
    check a row); no verdict depends on it.
    """
    sass: set[Target] = set()
    ptx: set[Target] = set()
    for lib in contents.device_libraries:
        units = [fb for fb in lib.fatbins if any(e.kind in ("sass", "ptx") for e in fb.entries)]
        if lib.fatbin_error is not None or not units:
            continue
        for kind, found in (("sass", sass), ("ptx", ptx)):
            counts: dict[int, int] = {}
            for fb in units:
                for cc in {e.arch for e in fb.entries if e.kind == kind and not e.variant}:
                    counts[cc] = counts.get(cc, 0) + 1
            found |= {(cc, "") for cc, n in counts.items() if 2 * n >= len(units)}
    archs = tuple(Arch(cc // 10, cc % 10, "", (cc, v) in ptx) for cc, v in sorted(sass | ptx))
    return torch_cuda_arch_list(archs) if archs else None


def _check_library(lib: Library, expectation: Expectation) -> list[Finding]:
    claimed_sass: set[Target] = {(a.cc, a.variant) for a in expectation.gpu_archs}
    claimed_ptx: set[Target] = {(a.cc, a.variant) for a in expectation.gpu_archs if a.ptx}
    sass = targets(lib, "sass")
    ptx = targets(lib, "ptx")
    claimed = _labels(claimed_sass)
    entries = {
        "sass": _labels(sass),
        "ptx": _labels(ptx),
        "ltoir": _labels(targets(lib, "ltoir")),
        "fatbinaries": len(lib.fatbins),
    }
    out: list[Finding] = []
    missing = claimed_sass - sass
    if missing:
        out.append(
            fail(
                CHECK,
                f"{lib.name} claims GPU architectures {claimed} but only carries device code for "
                f"{_labels(sass)}; a model would fail on hardware needing {_labels(missing)}",
                lib.path,
                missing=_labels(missing),
                **entries,
            )
        )
    missing_ptx = claimed_ptx - ptx
    if missing_ptx:
        names = [f"compute_{label}" for label in _labels(missing_ptx)]
        out.append(
            fail(
                CHECK,
                f"{lib.name} carries no PTX for {names}: the newest claimed architecture must also "
                "ship as PTX so newer GPUs can JIT-compile it",
                lib.path,
                missing_ptx=names,
                **entries,
            )
        )
    extra_plain = sorted(
        {f"sm_{label}" for label in _labels({t for t in sass if t[1] == "" and t not in claimed_sass})}
        | {f"compute_{label}" for label in _labels({t for t in ptx if t[1] == "" and t not in claimed_ptx})},
        key=_name_key,
    )
    if extra_plain:
        out.append(
            fail(
                CHECK,
                f"{lib.name} carries device code the row did not claim: {extra_plain}; the build "
                f"ignored the row's arch list {claimed}",
                lib.path,
                unclaimed=extra_plain,
                **entries,
            )
        )
    extra_variant = sorted(
        {f"sm_{label}" for label in _labels({t for t in sass if t[1] and t not in claimed_sass})}
        | {f"compute_{label}" for label in _labels({t for t in ptx if t[1] and t not in claimed_ptx})},
        key=_name_key,
    )
    if extra_variant:
        if expectation.extra_variants == "allow":
            out.append(
                ok(
                    CHECK,
                    f"{lib.name} also carries arch-specific/family device code {extra_variant}, "
                    'allowed by extra_variants = "allow"',
                    lib.path,
                    extra_variants=extra_variant,
                )
            )
        else:
            out.append(
                fail(
                    CHECK,
                    f"{lib.name} carries arch-specific/family device code the row did not ask for: "
                    f'{extra_variant}; the policy has extra_variants = "reject" (claim them in the arch '
                    'list, or set extra_variants = "allow" if they are intended)',
                    lib.path,
                    unclaimed_variants=extra_variant,
                    **entries,
                )
            )
    return out


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    libs = contents.libraries
    if not expectation.is_cuda:
        cpu = [
            fail(
                CHECK,
                f"{lib.name} carries device code ({', '.join(_entry_names(lib)) or 'unreadable'}) but this is "
                "a CPU wheel; the CPU wheel ships no device code (was it built with a CUDA toolkit?)",
                lib.path,
            )
            for lib in libs
            if lib.has_device_code
        ]
        return cpu or [ok(CHECK, "no device code in any library, as a CPU wheel must be")]
    if not expectation.gpu_archs:
        return [
            fail(
                CHECK,
                f"no GPU architecture list to hold the device code to: a {expectation.variant} wheel is "
                "audited against the architectures its row claims (pass --row, or --gpu-archs with --variant)",
            )
        ]
    out: list[Finding] = []
    for lib in libs:
        if lib.elf is None:
            out.append(
                fail(CHECK, f"cannot tell whether {lib.name} carries device code: {lib.error}", lib.path)
            )
        elif lib.fatbin_error is not None:
            out.append(
                fail(CHECK, f"{lib.name}: its device code could not be read: {lib.fatbin_error}", lib.path)
            )
    device = [lib for lib in libs if lib.has_device_code and lib.fatbin_error is None]
    claimed = expectation.arch_labels
    if not device:
        if not out:
            out.append(
                fail(
                    CHECK,
                    f"no library carries device code, so none of the claimed GPU architectures {claimed} "
                    "is covered",
                )
            )
        return out
    passing: list[Library] = []
    for lib in device:
        found = _check_library(lib, expectation)
        out.extend(found)
        if all(f.ok for f in found):
            passing.append(lib)
    if len(passing) == len(device) and all(f.ok for f in out):
        out.append(
            ok(
                CHECK,
                f"device code covers every claimed GPU architecture {claimed}",
                libraries=[lib.path for lib in device],
            )
        )
    else:
        out.extend(
            ok(CHECK, f"{lib.name}: device code covers every claimed GPU architecture {claimed}", lib.path)
            for lib in passing
        )
    return out
