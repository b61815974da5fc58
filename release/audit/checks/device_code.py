"""Check ``device_code``: every library with device code matches the claimed architectures.

Each library is judged on its own: one library's SASS never covers for another's
(no union across libraries; a model that calls into the library missing an arch
fails on that GPU). Within a library, the fatbinaries of all its translation units
count together here; :mod:`release.audit.checks.gpus` looks at each translation unit.
A library may have a claim of its own (``libgemm.so=...``); the others are held
to the wheel's list. Device code shipped as ``.cubin``/``.fatbin``/``.ptx`` files counts
as a library's.

For every library with device code (a ``.nv_fatbin`` or ``__nv_relfatbin`` section, or a
device code file):

* it can be loaded: relocatable device code (``nvcc -rdc=true``) that was never
  device-linked leaves the host code calling a ``__cudaRegisterLinkedBinary_*`` no file
  defines, and the loader refuses the library (``undefined symbol``);
* SASS for every claimed architecture (``9.0`` is also met by ``sm_90a``/``sm_90f``,
  which run on 9.0; ``9.0a`` and ``10.0f`` need exactly that variant);
* PTX for every architecture claimed with ``+PTX`` or as ``compute_XY``;
* no plain architecture the claim did not name, as SASS or PTX: that means the build
  ignored the row's list (a detected GPU, a default ``-arch``);
* arch-specific (``sm_90a``) and family (``sm_100f``) code the claim did not name is
  governed by the policy's ``extra_variants`` (``reject`` fails, ``allow`` notes it);
* device code embedded as data (:mod:`release.binary.embedded`) cannot be tied to a
  kernel or a GPU: it fails unless the row allows it (``embedded_device_code``).

LTO-IR entries are link-time input, not code a GPU runs: they are counted in the
details and otherwise ignored. A CPU wheel may carry no device code at all.
:func:`library_claim` reads a library's device code back as a claim that passes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from release.audit.checks.gpus import fatbin_support
from release.audit.checks.link_state import cannot_load, entry_name_key
from release.audit.model import (
    Check,
    Contents,
    Expectation,
    Finding,
    Library,
    arch_label,
    fail,
    label_sort_key,
    ok,
)
from release.binary.fatbin import Fatbinary
from release.policy.archs import Arch, Variant, claim_text
from release.resources.cuda import cuda

CHECK = "device_code"

Target = tuple[int, str]  # (compute capability like 90, variant '' | 'a' | 'f')


def _labels(targets: Iterable[Target]) -> list[str]:
    return sorted((arch_label(cc, v) for cc, v in set(targets)), key=label_sort_key)


def claim_units(lib: Library) -> tuple[Fatbinary, ...]:
    """The fatbinaries a claim is about: those with kernels (nvcc's link-step unit and units of host
    code carry the link's or nvcc's default targets, and run nothing); all when none holds kernels."""
    return lib.kernel_units or lib.fatbins


def targets(lib: Library, kind: str) -> set[Target]:
    units = lib.fatbins if kind == "ltoir" else claim_units(lib)
    return {(e.arch, e.variant) for fb in units for e in fb.entries if e.kind == kind}


def _entry_names(lib: Library) -> list[str]:
    return sorted({e.name for fb in (*lib.fatbins, *lib.relocatable) for e in fb.entries}, key=entry_name_key)


# --------------------------------------------------------------------------- read back


def _variant(v: str) -> Variant:
    return "a" if v == "a" else "f" if v == "f" else ""


def library_claim(lib: Library) -> tuple[Arch, ...]:
    """The library's device code as a claim that passes when fed back: every SASS and PTX target,
    spelled ``X.Y`` (or ``X.Y+PTX``) where every translation unit with kernels runs natively on
    X.Y, else nvcc's ``sm_XY`` / ``compute_XY``. Variants keep their suffix. Empty without device code."""
    fatbins = claim_units(lib) or lib.relocatable
    sass, ptx = set(), set()
    for fb in fatbins:
        for e in fb.entries:
            if e.kind == "sass":
                sass.add((e.arch, e.variant))
            elif e.kind == "ptx":
                ptx.add((e.arch, e.variant))
    units = lib.kernel_units or tuple(fb for fb in fatbins if any(e.kind != "ltoir" for e in fb.entries))
    known = set(cuda().capabilities)
    out: list[Arch] = []
    for cc, v in sorted(sass | ptx, key=lambda t: (t[0], t[1])):
        major, minor = divmod(cc, 10)
        if (major, minor) not in known:
            continue  # no spelling for it; the device_code check reports it as unclaimed
        has_sass, has_ptx = (cc, v) in sass, (cc, v) in ptx
        strict = has_sass and all(fatbin_support(fb, major, minor) == "native" for fb in units)
        if strict:
            out.append(Arch(major, minor, _variant(v), ptx=has_ptx))
            continue
        if has_sass:
            out.append(Arch(major, minor, _variant(v), ptx=False, strict=False))
        if has_ptx:
            out.append(Arch(major, minor, _variant(v), ptx=True, ships_sass=False, strict=False))
    return tuple(out)


def arch_list_found(contents: Contents) -> str | None:
    """The wheel's device code as a claim: one list when every library carries the same, else one
    list per library (``lib/liba.so=7.5;8.0 lib/libb.so=9.0+PTX``). Fed back, it passes
    ``device_code`` and ``gpus``. None when no library carries readable device code."""
    claims = {lib.path: claim_text(c) for lib in _readable(contents) if (c := library_claim(lib))}
    if not claims:
        return None
    distinct = set(claims.values())
    if len(distinct) == 1:
        return distinct.pop()
    return " ".join(f"{path}={text}" for path, text in sorted(claims.items()))


def _readable(contents: Contents) -> list[Library]:
    return [lib for lib in contents.libraries if lib.has_device_code and lib.fatbin_error is None]


# --------------------------------------------------------------------------- the check


def _missing_message(
    lib: Library, archs: tuple[Arch, ...], missing: set[Target], sass: set[Target], ptx: set[Target]
) -> str:
    claimed = _labels({(a.cc, a.variant) for a in archs if a.ships_sass})
    carried = f"only carries device code for {_labels(sass)}" if sass else "carries no SASS"
    head = f"{lib.name} claims GPU architectures {claimed} but {carried}"
    fails, jit, other = [], [], []
    for cc, v in sorted(missing):
        gpu = cuda().gpu(*divmod(cc, 10))  # its own rule: a Tegra GPU (Orin 8.7) runs only its own SASS
        runs = [f"sm_{a}{w}" for a, w in sorted(sass) if gpu.runs_sass(a, w)]
        jits = [f"compute_{a}{w}" for a, w in sorted(ptx) if gpu.runs_ptx(a, w)]
        label = arch_label(cc, v)
        if runs:
            other.append(f"{label} (runs {', '.join(runs)} instead)")
        elif jits:
            jit.append(f"{label} (JIT from {', '.join(jits)})")
        else:
            fails.append(label)
    parts = []
    if fails:
        parts.append(f"a model would fail on hardware needing {sorted(fails, key=label_sort_key)}")
    if jit:
        parts.append(f"hardware needing {jit} would have to JIT-compile PTX")
    if other:
        parts.append(f"the code the claim names is missing for {other}")
    return head + "; " + "; ".join(parts)


def _embedded(lib: Library, expectation: Expectation) -> Finding:
    kinds = Counter(image.kind for image in lib.embedded)
    sections = sorted({image.section for image in lib.embedded})
    found = sorted({t for image in lib.embedded for t in image.targets}, key=entry_name_key)
    what = " and ".join(f"{n:,} {kind}{'s' if n != 1 else ''}" for kind, n in sorted(kinds.items()))
    shown = found if len(found) <= 12 else [*found[:12], f"... {len(found) - 12} more"]
    text = (
        f"{lib.name} embeds device code as data: {what} in {', '.join(sections)} ({', '.join(shown)}); the "
        "library loads it itself, so the audit cannot tie it to a kernel or a GPU, and it is not in the GPU table"
    )
    details = {"images": len(lib.embedded), "sections": sections, "targets": found}
    # a row's policy allows it with its key; an audit of a wheel by hand, with the command's flag
    how = 'embedded_device_code = "allow"' if expectation.row_id else "--allow embedded-device-code"
    if expectation.embedded_device_code == "allow":
        return ok(CHECK, text + f"; allowed ({how})", lib.path, **details)
    return fail(CHECK, text + f"; if that is intended, allow it ({how})", lib.path, **details)


def _check_library(lib: Library, expectation: Expectation) -> list[Finding]:
    archs = expectation.archs_for(lib.path)
    row = expectation.row_id is not None
    who_not = "the row did not claim" if row else "the claim does not name"
    whose = "the row's arch list" if row else "the arch list"
    claimed_sass: set[Target] = {(a.cc, a.variant) for a in archs if a.ships_sass}
    claimed_ptx: set[Target] = {(a.cc, a.variant) for a in archs if a.ptx}
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
    missing = {
        (cc, v)
        for cc, v in claimed_sass
        if (cc, v) not in sass and not (v == "" and any((cc, w) in sass for w in ("a", "f")))
    }
    if missing:
        out.append(
            fail(
                CHECK,
                _missing_message(lib, archs, missing, sass, ptx),
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
                f"{lib.name} carries no PTX for {names}: the newest claimed architecture must also ship as "
                "PTX so newer GPUs can JIT-compile it",
                lib.path,
                missing_ptx=names,
                **entries,
            )
        )
    plain_sass = {t for t in sass if t[1] == "" and t not in claimed_sass}
    plain_ptx = {t for t in ptx if t[1] == "" and t not in claimed_ptx}
    extra_plain = sorted(
        {f"sm_{label}" for label in _labels(plain_sass)}
        | {f"compute_{label}" for label in _labels(plain_ptx)},
        key=entry_name_key,
    )
    if extra_plain:
        out.append(
            fail(
                CHECK,
                f"{lib.name} carries device code {who_not}: {extra_plain}; the build ignored {whose} {claimed}",
                lib.path,
                unclaimed=extra_plain,
                **entries,
            )
        )
    extra_variant = sorted(
        {f"sm_{label}" for label in _labels({t for t in sass if t[1] and t not in claimed_sass})}
        | {f"compute_{label}" for label in _labels({t for t in ptx if t[1] and t not in claimed_ptx})},
        key=entry_name_key,
    )
    if extra_variant:
        what = "arch-specific/family device code (sm_XYa runs on X.Y only, sm_XYf on the X.Y family)"
        if expectation.extra_variants == "allow":
            out.append(
                ok(
                    CHECK,
                    f'{lib.name} also carries {what} {extra_variant}, allowed by extra_variants = "allow"',
                    lib.path,
                    extra_variants=extra_variant,
                )
            )
        else:
            out.append(
                fail(
                    CHECK,
                    f"{lib.name} carries {what} {who_not}: {extra_variant}; the policy has "
                    'extra_variants = "reject" (claim them in the arch list, or set extra_variants = "allow" '
                    "if they are intended)",
                    lib.path,
                    unclaimed_variants=extra_variant,
                    **entries,
                )
            )
    return out


def _unknown_library_claims(contents: Contents, expectation: Expectation) -> list[Finding]:
    device = [lib for lib in contents.libraries if lib.has_device_code]
    out = []
    for pattern, _archs in expectation.library_archs:
        matched = [lib for lib in device if expectation.archs_for(lib.path) is _archs]
        if not matched:
            out.append(
                fail(
                    CHECK,
                    f"the claim names {pattern!r}, but no library with device code of the wheel matches it "
                    f"(with device code: {', '.join(lib.path for lib in device) or 'none'})",
                    claim=pattern,
                )
            )
    return out


def _cpu(contents: Contents) -> list[Finding]:
    cpu = [
        fail(
            CHECK,
            f"{lib.name} carries device code ({', '.join(_entry_names(lib)) or 'unreadable'}) but this is "
            "a CPU wheel; the CPU wheel ships no device code (was it built with a CUDA toolkit?)",
            lib.path,
        )
        for lib in contents.libraries
        if lib.has_device_code or lib.embedded
    ]
    return cpu or [ok(CHECK, "no device code in any library, as a CPU wheel must be")]


def _nothing_to_hold(contents: Contents, expectation: Expectation) -> Finding:
    """No library carries device code in a section or a device code file. Device code embedded as
    data (allowed, or this is not reached) is device code, but not code a GPU claim can be held to."""
    claimed = expectation.arch_labels
    embedded = [lib for lib in contents.libraries if lib.embedded]
    if embedded:
        images = sum(len(lib.embedded) for lib in embedded)
        names = ", ".join(lib.name for lib in embedded)
        what = f"the claimed GPU architectures {claimed}" if claimed else "the GPUs of --runs-on"
        return fail(
            CHECK,
            f"the wheel's only device code is embedded as data ({images:,} image{'s' if images != 1 else ''} "
            f"in {names}), which each library loads itself: the audit cannot tie it to a kernel or a GPU, so "
            f"{what} cannot be confirmed from it (no library has a .nv_fatbin or __nv_relfatbin section, and "
            "the wheel has no .cubin/.fatbin/.ptx file)",
            embedded_only=[lib.path for lib in embedded],
        )
    return fail(
        CHECK,
        f"no library carries device code, so none of the claimed GPU architectures {claimed} is covered"
        if claimed
        else "no library carries device code, so it runs on no GPU",
    )


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    libs = contents.libraries
    if not expectation.is_cuda:
        return _cpu(contents)
    if not expectation.has_arch_claim and not expectation.runs_on:
        return [
            fail(
                CHECK,
                f"no GPU architecture list to hold the device code to: a {expectation.variant} wheel is "
                "audited against the architectures its row claims (pass --row, or --gpu-archs or --runs-on)",
            )
        ]
    out: list[Finding] = []
    for lib in libs:
        if lib.elf is None and lib.device_file is None:
            out.append(
                fail(CHECK, f"cannot tell whether {lib.name} carries device code: {lib.error}", lib.path)
            )
        elif lib.fatbin_error is not None:
            out.append(
                fail(CHECK, f"{lib.name}: its device code could not be read: {lib.fatbin_error}", lib.path)
            )
        if lib.embedded:
            out.append(_embedded(lib, expectation))
    out += _unknown_library_claims(contents, expectation)
    device = [lib for lib in libs if lib.has_device_code and lib.fatbin_error is None]
    if not device:
        if not any(not f.ok for f in out):
            by_design = expectation.by_design
            out.append(
                ok(CHECK, f"note: {by_design}") if by_design else _nothing_to_hold(contents, expectation)
            )
        return out
    passing: list[Library] = []
    for lib in device:
        if lib.cannot_load:
            out.append(cannot_load(lib, CHECK))
            continue
        if not expectation.has_arch_claim:
            passing.append(lib)
            continue
        found = _check_library(lib, expectation)
        out.extend(found)
        if all(f.ok for f in found):
            passing.append(lib)
    if not expectation.has_arch_claim:
        out.append(
            ok(
                CHECK,
                "no arch list claimed: the device code is held to --runs-on (see gpus); read back: "
                + (arch_list_found(contents) or "none"),
            )
        )
        return out
    claimed = expectation.arch_labels
    if len(passing) == len(device) and all(f.ok for f in out) and not expectation.library_archs:
        out.append(
            ok(
                CHECK,
                f"device code covers every claimed GPU architecture {claimed}",
                libraries=[lib.path for lib in device],
            )
        )
    else:
        for lib in passing:
            own = [f"{a.cc}{a.variant}" for a in expectation.archs_for(lib.path) if a.ships_sass]
            shown = sorted(set(own), key=label_sort_key)
            out.append(
                ok(CHECK, f"{lib.name}: device code covers every claimed GPU architecture {shown}", lib.path)
            )
    return out


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "device code", check)
