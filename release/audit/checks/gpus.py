"""Check ``gpus``: which named GPUs each library runs on, per translation unit that holds kernels.

For every named GPU of :mod:`release.resources.cuda` the wheel can reach (its CPU's, :func:`population`)
and every library with device code, each
of its translation units that holds kernels (:attr:`Library.kernel_units`: nvcc's link-step
fatbinary and units of host code only run nothing, and are listed apart) is:

* ``native``: it has SASS that runs on the GPU (:meth:`release.resources.cuda.Gpu.runs_sass`:
  ``sm_XY`` on X.Z for Z >= Y, ``sm_XYa`` on X.Y only, ``sm_XYf`` on the X family from X.Y, on a
  discrete GPU; on a Tegra GPU (Jetson Orin 8.7, Thor 11.0) only SASS built for its own capability);
* ``ptx-jit``: no such SASS, but PTX the driver JIT-compiles for it (slow first start);
* ``none``: neither, or a driver that cannot run it (``--driver``/the train's oldest driver:
  PTX newer than the driver's release, or a CUDA major newer than the driver's).

A library's support is the worst over its kernel units (a kernel file built without the row's
list shows up here, invisible in the union over the library); each cell also carries the oldest
driver its path needs (:mod:`release.audit.drivers`). A library that cannot load (relocatable
device code never device-linked) runs on nothing.

The check fails:

* for a GPU whose exact capability is claimed strictly (``9.0``, not ``sm_90``) where a library
  is not native in every translation unit with kernels (``ptx-jit``, ``partial`` or ``none``): a
  row's ``gpu_archs`` are such claims, so a unit its build left without the row's list fails
  here, whatever the unit is for;
* for a GPU of ``--runs-on`` where a library is ``none``: no unit has SASS or PTX for it, or the
  driver (when one is given) refuses its path;
* with a driver given, for a library whose PTX the driver cannot JIT-compile on GPUs only its
  PTX serves.

``partial`` on a GPU of ``--runs-on`` passes, with a note: some units run there, the others hold
kernels only for other GPUs (cuBLAS 13.1's Lt library: 868 units for sm_90a and sm_120f, 780
for sm_100 only, 273 for sm_90a only). Arch-specific units are the rule in NVIDIA's libraries,
whose host code dispatches each only on the GPUs it targets; the binary does not show that
dispatch, so the note names how many units hold kernels only for other GPUs and their targets,
and a claim that must hold every unit says ``X.Y``. The table is the "which GPUs can run this
wheel" report.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from release.audit.checks.libraries import HOST_ONLY_HINT
from release.audit.drivers import Need, library_cuda_major, need_for_entry, need_for_gpu, need_for_major
from release.audit.model import Check, Contents, Expectation, Finding, GpuRow, Library, fail, ok
from release.binary.fatbin import Fatbinary
from release.policy.archs import Support, ptx_runs_on
from release.resources.cuda import Gpu, cuda

CHECK = "gpus"
_RANK: dict[Support, int] = {"native": 3, "ptx-jit": 2, "partial": 1, "none": 0}


@dataclass(frozen=True)
class Cell:
    """How one library runs on one GPU."""

    support: Support  # on the given driver, if any
    counts: Mapping[Support, int]  # kernel units per support level
    needs: Need | None  # the oldest driver this path needs; None: nothing known beyond the GPU
    without_driver: Support  # the support on a driver new enough for everything
    why: str = ""  # for "none" because of the driver or the loader


def fatbin_support_on(fb: Fatbinary, gpu: Gpu) -> Support:
    """How one fatbinary runs on ``gpu``, by the GPU's own rule (:meth:`Gpu.runs_sass`: a Tegra GPU runs
    only SASS built for its own capability)."""
    if any(e.kind == "sass" and gpu.runs_sass(e.arch, e.variant) for e in fb.entries):
        return "native"
    if any(e.kind == "ptx" and gpu.runs_ptx(e.arch, e.variant) for e in fb.entries):
        return "ptx-jit"
    return "none"


def fatbin_support(fb: Fatbinary, major: int, minor: int) -> Support:
    """How one fatbinary runs on a GPU of capability ``major.minor`` (the named GPU's rule)."""
    return fatbin_support_on(fb, cuda().gpu(major, minor))


def _jit_need(fb: Fatbinary, major: int, minor: int) -> Need | None:
    """What the PTX a driver would JIT for this GPU needs: the newest PTX target that runs on it."""
    usable = [e for e in fb.entries if e.kind == "ptx" and ptx_runs_on(e.arch, e.variant, major, minor)]
    if not usable:
        return None
    best = max(usable, key=lambda e: (e.arch, e.variant == ""))
    return need_for_entry(best)


def runnable_units(lib: Library) -> tuple[Fatbinary, ...]:
    return lib.kernel_units


def cell(lib: Library, gpu: Gpu, expectation: Expectation) -> Cell:
    """How ``lib`` runs on ``gpu`` (on ``expectation.driver`` when given)."""
    counts: dict[Support, int] = {"native": 0, "ptx-jit": 0, "none": 0}
    if lib.cannot_load:
        return Cell(
            "none", counts, None, "none", "it cannot be loaded (relocatable device code never device-linked)"
        )
    units = lib.kernel_units
    major = library_cuda_major(lib, expectation)
    needs: list[Need] = [n for n in (need_for_gpu(gpu), need_for_major(major) if major else None) if n]
    for fb in units:
        level = fatbin_support_on(fb, gpu)
        counts[level] += 1
        if level == "ptx-jit" and (jit := _jit_need(fb, gpu.major, gpu.minor)) is not None:
            needs.append(jit)
    if not units or not any(counts.values()):
        return Cell("none", counts, None, "none")
    worst: Support = min((s for s, n in counts.items() if n), key=lambda s: _RANK[s])
    if worst == "none" and (counts["native"] or counts["ptx-jit"]):
        worst = "partial"
    need = max(needs) if needs and worst != "none" else None
    driver = expectation.driver
    if driver is not None and need is not None and not need.met_by(driver):
        why = f"it needs a driver of {need.label()}; the driver is CUDA {driver.label}"
        return Cell("none", counts, need, worst, why)  # the driver refuses the library's path here
    return Cell(worst, counts, need, worst)


def _libraries(contents: Contents) -> list[Library]:
    return [
        lib
        for lib in contents.device_libraries
        if lib.fatbin_error is None and (lib.kernel_units or lib.cannot_load)
    ]


def population(contents: Contents | None, expectation: Expectation) -> tuple[Gpu, ...]:
    """The named GPUs the wheel can reach: those of its CPU (the row's platform tag, else the wheel's
    own; every GPU when neither names a CPU the table knows) that a generic wheel of its CUDA major can
    reach (a Jetson only through a JetPack on the server-ARM stack of that major)."""
    facts = cuda()
    tags = [expectation.platform_tag] if expectation.platform_tag else []
    if contents is not None and not tags:
        tags = sorted(contents.wheel.platform_tags)
    cpu = next((c for t in tags if (c := facts.cpu_of_platform(t)) is not None), None)
    major = int(expectation.train.split(".")[0]) if expectation.train else None
    return facts.gpus_for(cpu, major)


def gpu_table(contents: Contents, expectation: Expectation) -> tuple[GpuRow, ...]:
    libs = _libraries(contents)
    if not libs:
        return ()
    rows = []
    driver = expectation.driver.label if expectation.driver else None
    for gpu in population(contents, expectation):
        cells = {lib.path: cell(lib, gpu, expectation) for lib in libs}
        per_lib = {path: c.support for path, c in cells.items()}
        wheel = min(per_lib.values(), key=lambda s: _RANK[s])
        needs = {
            path: c.needs.label() for path, c in cells.items() if c.needs is not None and c.support != "none"
        }
        units: dict[str, Mapping[str, int]] = {
            path: {str(k): n for k, n in c.counts.items()} for path, c in cells.items()
        }
        claimed = _claimed(expectation, gpu.major, gpu.minor)
        rows.append(GpuRow(gpu.name, gpu.major, gpu.minor, claimed, per_lib, wheel, needs, units, driver))
    return tuple(rows)


def _claimed(expectation: Expectation, major: int, minor: int) -> bool:
    archs = [*expectation.gpu_archs, *(a for _, archs in expectation.library_archs for a in archs)]
    return any((a.major, a.minor) == (major, minor) for a in archs if a.ships_sass) or (
        (major, minor) in expectation.runs_on
    )


def _strict(lib: Library, expectation: Expectation) -> list[tuple[int, int]]:
    """The capabilities a library's claim promises every kernel unit runs natively on."""
    return sorted({(a.major, a.minor) for a in expectation.archs_for(lib.path) if a.ships_sass and a.strict})


def _gpu(major: int, minor: int) -> Gpu:
    return cuda().gpu(major, minor)


def _not_native(lib: Library, gpu: Gpu, c: Cell, who: str) -> Finding:
    total = sum(c.counts.values())
    lacking = c.counts["ptx-jit"] + c.counts["none"]
    if lib.cannot_load:
        how = c.why
    elif c.without_driver == "ptx-jit" and c.support == "ptx-jit":
        how = f"{lacking} of its {total} translation units with kernels carry no SASS for it; the driver would have to JIT-compile their PTX"
    elif c.support == "none" and c.why:
        how = f"{lacking} of its {total} translation units with kernels carry no SASS for it, and {c.why}"
    else:
        how = f"{lacking} of its {total} translation units with kernels carry no SASS for it; their kernels cannot run there"
    return fail(
        CHECK,
        f"{lib.name} does not run natively on {gpu.name} ({gpu.major}.{gpu.minor}), which {who}: {how}",
        lib.path, gpu=gpu.name, cc=f"{gpu.major}.{gpu.minor}", support=c.support, kernel_units=dict(c.counts),
    )  # fmt: skip


def _on_driver(expectation: Expectation) -> str:
    if expectation.driver and expectation.driver_source:
        return f" on a CUDA {expectation.driver.label} driver ({expectation.driver_source})"
    return ""


def _does_not_run(lib: Library, gpu: Gpu, c: Cell, expectation: Expectation) -> Finding:
    total = sum(c.counts.values())
    if lib.cannot_load or c.why:
        how = c.why
    else:
        how = f"{c.counts['none']} of its {total} translation units with kernels have neither SASS nor PTX for it"
    on = _on_driver(expectation)
    return fail(
        CHECK,
        f"{lib.name} does not run on {gpu.name} ({gpu.major}.{gpu.minor}){on}, which --runs-on names: {how}",
        lib.path, gpu=gpu.name, cc=f"{gpu.major}.{gpu.minor}", support=c.support, kernel_units=dict(c.counts),
        needs_driver=c.needs.label() if c.needs else None,
    )  # fmt: skip


def _targets(fb: Fatbinary) -> str:
    """``sm_90a, compute_100``: what a unit carries for a GPU to run, by architecture."""
    runnable = sorted(
        {e for e in fb.entries if e.kind in ("sass", "ptx")},
        key=lambda e: (e.arch, e.variant, e.kind != "sass"),
    )
    return ", ".join(e.name for e in runnable)


def _runs_in_part(lib: Library, gpu: Gpu, c: Cell, expectation: Expectation) -> Finding:
    """``partial`` on a GPU of --runs-on: a pass, noting the units that hold kernels only for other GPUs."""
    total = sum(c.counts.values())
    elsewhere = [fb for fb in lib.kernel_units if fatbin_support_on(fb, gpu) == "none"]
    sets = Counter(_targets(fb) for fb in elsewhere)
    shown = [f"{n} with {names}" for names, n in sets.most_common(3)]
    if len(sets) > 3:
        shown.append(f"{len(sets) - 3} more target sets")
    example = elsewhere[0]
    cc = f"{gpu.major}.{gpu.minor}"
    return ok(
        CHECK,
        f"{lib.name} runs{_on_driver(expectation)} on {gpu.name} ({cc}), which --runs-on names, in "
        f"{total - len(elsewhere)} of its {total} translation units with kernels; the other {len(elsewhere)} "
        f"hold kernels only for other GPUs ({'; '.join(shown)}; e.g. the unit at file offset {example.offset:#x}: "
        f"{_targets(example)}): its host code must call them only on those GPUs, which the audit cannot see "
        f"(a claim of {cc} holds every unit to it)",
        lib.path, gpu=gpu.name, cc=cc, support=c.support, kernel_units=dict(c.counts),
        units_for_other_gpus=len(elsewhere), target_sets=dict(sets.most_common()),
    )  # fmt: skip


def _driver_findings(lib: Library, expectation: Expectation) -> list[Finding]:
    """With a driver given: the GPUs only the library's PTX serves, where that driver cannot JIT it."""
    driver = expectation.driver
    if driver is None or lib.cannot_load:
        return []
    lost: list[str] = []
    need: Need | None = None
    for gpu in population(None, expectation):
        c = cell(lib, gpu, expectation)
        if c.without_driver == "ptx-jit" and c.support == "none" and c.needs is not None:
            lost.append(f"{gpu.name} ({gpu.major}.{gpu.minor})")
            need = c.needs
    if not lost or need is None:
        return []
    isas = sorted({e.ptx_isa for fb in lib.fatbins for e in fb.entries if e.ptx_isa is not None})
    shown = ", ".join(f"{a}.{b}" for a, b in isas)
    return [
        fail(
            CHECK,
            f"{lib.name}'s PTX (ISA {shown}) needs a driver of {need.label()}, but the claim's driver is CUDA "
            f"{driver.label} ({expectation.driver_source or 'given'}): on {', '.join(lost)}, which only its PTX "
            "serves, the driver refuses it (cudaErrorUnsupportedPtxVersion); build the PTX with the oldest "
            "CUDA the row supports, or ship SASS for those GPUs",
            lib.path, driver=driver.label, needs_driver=need.label(), gpus=lost,
        )
    ]  # fmt: skip


def _no_device_code(contents: Contents) -> Finding:
    """No library with readable device code in a section or a device code file: nothing runs on a GPU
    that the audit can see, whatever is embedded as data."""
    if any(lib.fatbin_error is not None for lib in contents.libraries):
        return fail(CHECK, "no readable device code: the wheel runs on none of the claimed GPUs")
    embedded = [lib for lib in contents.libraries if lib.embedded]
    if embedded:
        return fail(
            CHECK,
            "the wheel's only device code is embedded as data (in "
            + ", ".join(lib.name for lib in embedded)
            + "), which the audit cannot tie to a GPU: none of the claimed GPUs can be confirmed",
            embedded_only=[lib.path for lib in embedded],
        )
    return fail(CHECK, f"no device code: the wheel runs on none of the claimed GPUs; {HOST_ONLY_HINT}")


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    if not expectation.is_cuda:
        return [ok(CHECK, "CPU wheel: runs on no GPU by design")]
    if not expectation.has_arch_claim and not expectation.runs_on:
        return [fail(CHECK, "no GPU architecture list and no --runs-on: cannot say which GPUs must run")]
    libs = _libraries(contents)
    readable = [lib for lib in contents.device_libraries if lib.fatbin_error is None]
    if not readable:
        return [_no_device_code(contents)]
    out: list[Finding] = []
    notes: list[Finding] = []  # partial on a GPU of --runs-on
    for lib in libs:
        for major, minor in _strict(lib, expectation):
            gpu = _gpu(major, minor)
            c = cell(lib, gpu, expectation)
            if c.support != "native":
                out.append(
                    _not_native(lib, gpu, c, "the row claims" if expectation.row_id else "the claim names")
                )
        for major, minor in expectation.runs_on:
            gpu = _gpu(major, minor)
            c = cell(lib, gpu, expectation)
            if c.support == "none":
                out.append(_does_not_run(lib, gpu, c, expectation))
            elif c.support == "partial":
                notes.append(_runs_in_part(lib, gpu, c, expectation))
        out += _driver_findings(lib, expectation)
    stubs = {lib.path: len(lib.stub_units) for lib in readable if lib.stub_units}
    if not out:
        promised = sorted({cc for lib in libs for cc in _strict(lib, expectation)})
        parts = []
        if promised:
            parts.append(
                f"every library runs natively, in every translation unit with kernels, on {[_gpu(*cc).name for cc in promised]}"
            )
        if expectation.runs_on:
            on = f" on a CUDA {expectation.driver.label} driver" if expectation.driver else ""
            some = len({f.library for f in notes})
            parts.append(
                f"every library runs{on} on {[_gpu(*cc).name for cc in expectation.runs_on]} (--runs-on)"
                + (f"; {some} only in part of its translation units (noted below)" if some else "")
            )
        message = (
            "; ".join(parts)
            or "no claimed architecture is promised natively (sm_XY spellings only); see the GPU table"
        )
        out.append(ok(CHECK, message, libraries=[lib.path for lib in libs], units_without_kernels=stubs))
        out += notes
    else:
        out += notes
        if stubs:
            out.append(
                ok(
                    CHECK,
                    f"translation units without kernels, not counted: {stubs}",
                    units_without_kernels=stubs,
                )
            )
    return out


def library_support(lib: Library, major: int, minor: int) -> tuple[Support, dict[Support, int]]:
    """The library's support on a GPU (no driver condition) and how many kernel units have each level."""
    gpu = _gpu(major, minor)
    c = cell(lib, gpu, Expectation("cuda", None, (), ()))
    return c.without_driver, dict(c.counts)


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "GPUs (per translation unit)", check)
