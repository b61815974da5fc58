"""Check ``gpus``: which named GPUs each library runs on, per translation unit.

For every named GPU of :mod:`release.resources.cuda` and every library with device code:

* ``native``: every fatbinary (one per translation unit) of the library has SASS that
  runs on the GPU (:func:`release.policy.archs.sass_runs_on`);
* ``ptx-jit``: every fatbinary has SASS or PTX for it (:func:`release.policy.archs.ptx_runs_on`),
  some only PTX: the driver JIT-compiles on first use (slow start, needs a new enough
  driver);
* ``none``: some fatbinary has neither: its kernels cannot run on that GPU.

A library runs natively only if all of its translation units do: a kernel file built
without the row's list (a CMake target that ignored it) is invisible in the union
over the library and shows up here. Fatbinaries with only LTO-IR are skipped (link-time
input). The check fails for a GPU whose exact capability the row claims and where a
library is not native. The whole table is the "which GPUs can run this wheel" report.
"""

from __future__ import annotations

from release.audit.fatbin import Fatbinary
from release.audit.model import Contents, Expectation, Finding, GpuRow, Library, fail, ok
from release.policy.archs import Support, ptx_runs_on, sass_runs_on
from release.resources.cuda import cuda

CHECK = "gpus"
_RANK: dict[Support, int] = {"native": 2, "ptx-jit": 1, "none": 0}


def fatbin_support(fb: Fatbinary, major: int, minor: int) -> Support:
    if any(e.kind == "sass" and sass_runs_on(e.arch, e.variant, major, minor) for e in fb.entries):
        return "native"
    if any(e.kind == "ptx" and ptx_runs_on(e.arch, e.variant, major, minor) for e in fb.entries):
        return "ptx-jit"
    return "none"


def runnable_units(lib: Library) -> list[Fatbinary]:
    return [fb for fb in lib.fatbins if any(e.kind in ("sass", "ptx") for e in fb.entries)]


def library_support(lib: Library, major: int, minor: int) -> tuple[Support, dict[Support, int]]:
    """The library's support on a GPU and how many of its fatbinaries have each level."""
    counts: dict[Support, int] = {"native": 0, "ptx-jit": 0, "none": 0}
    for fb in runnable_units(lib):
        counts[fatbin_support(fb, major, minor)] += 1
    if not any(counts.values()):
        return "none", counts
    worst = min((s for s, n in counts.items() if n), key=lambda s: _RANK[s])
    return worst, counts


def _claimed(expectation: Expectation, major: int, minor: int) -> bool:
    return any((a.major, a.minor) == (major, minor) for a in expectation.gpu_archs)


def gpu_table(contents: Contents, expectation: Expectation) -> tuple[GpuRow, ...]:
    libs = [lib for lib in contents.device_libraries if lib.fatbin_error is None]
    if not libs:
        return ()
    rows = []
    for gpu in cuda().gpus:
        name, major, minor = gpu.name, gpu.major, gpu.minor
        per_lib = {lib.path: library_support(lib, major, minor)[0] for lib in libs}
        wheel = min(per_lib.values(), key=lambda s: _RANK[s])
        rows.append(GpuRow(name, major, minor, _claimed(expectation, major, minor), per_lib, wheel))
    return tuple(rows)


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    if not expectation.is_cuda:
        return [ok(CHECK, "CPU wheel: runs on no GPU by design")]
    if not expectation.gpu_archs:
        return [fail(CHECK, "no GPU architecture list: cannot say which GPUs must run natively")]
    libs = [lib for lib in contents.device_libraries if lib.fatbin_error is None]
    if not libs:
        return [fail(CHECK, "no readable device code: the wheel runs natively on none of the claimed GPUs")]
    claimed = [(g.name, g.major, g.minor) for g in cuda().gpus if _claimed(expectation, g.major, g.minor)]
    out: list[Finding] = []
    for lib in libs:
        total = len(runnable_units(lib))
        for name, major, minor in claimed:
            support, counts = library_support(lib, major, minor)
            if support == "native":
                continue
            lacking = counts["ptx-jit"] + counts["none"]
            how = (
                "the driver would have to JIT-compile their PTX"
                if support == "ptx-jit"
                else "their kernels cannot run there"
            )
            out.append(
                fail(
                    CHECK,
                    f"{lib.name} does not run natively on {name} ({major}.{minor}), which the row claims: "
                    f"{lacking} of its {total} fatbinaries (translation units) carry no SASS for it; {how}",
                    lib.path,
                    gpu=name,
                    cc=f"{major}.{minor}",
                    support=support,
                    fatbinaries=counts,
                )
            )
    if not out:
        names = [name for name, _, _ in claimed]
        out.append(
            ok(
                CHECK,
                f"every library runs natively, in every translation unit, on every claimed GPU: {names}"
                if names
                else "no claimed architecture matches a named GPU; see the GPU table",
                libraries=[lib.path for lib in libs],
            )
        )
    return out
