"""Check ``libraries``: a CUDA wheel ships its CUDA libraries, and they could be read.

Fails closed: for a CUDA expectation, no ELF library at all, no library that could
be inspected, or no device code anywhere (a ``.nv_fatbin`` or ``__nv_relfatbin`` section,
a ``.cubin``/``.fatbin``/``.ptx`` file, an image embedded as data) is a failure, never a
silent pass (the message says how a host-only library wheel is audited instead: ``--variant
cpu``). For every wheel, a file named like a shared library
that is not a readable ELF file (a truncated file, a linker script, text) fails:
a loader cannot use it, and the audit cannot see inside it.
"""

from __future__ import annotations

from release.audit.model import CPU_RULES, Check, Contents, Expectation, Finding, fail, ok

CHECK = "libraries"
HOST_ONLY_HINT = (
    "a host-only library wheel (no kernels of its own, no CUDA library linked, no CUDA package declared, "
    "such as NVRTC or nvJitLink) is audited with --variant cpu, which holds it to the CPU rules"
)


def check(contents: Contents, expectation: Expectation) -> list[Finding]:
    libs = contents.libraries
    findings: list[Finding] = []
    for lib in libs:
        if lib.elf is None and lib.device_file is None:
            findings.append(
                fail(
                    CHECK,
                    f"{lib.name} could not be inspected: {lib.error}; a loader cannot use it and the "
                    "audit cannot see what it carries",
                    lib.path,
                )
            )
    inspected = [lib for lib in libs if lib.elf is not None or lib.device_file is not None]
    if not expectation.is_cuda:
        findings.append(
            ok(
                CHECK,
                CPU_RULES,
                rules=[
                    "no device code in any library",
                    "no CUDA package declared",
                    "no CUDA library linked",
                ],
                elf_files=[lib.path for lib in inspected],
            )
        )
        return findings
    variant = expectation.variant
    if not libs:
        findings.append(
            fail(
                CHECK,
                f"the wheel ships no ELF library: a {variant} wheel must carry its CUDA libraries; "
                "nothing could be inspected",
            )
        )
        return findings
    if not inspected:
        findings.append(
            fail(CHECK, f"none of the {len(libs)} library files could be inspected; nothing was checked")
        )
        return findings
    device = [lib for lib in inspected if lib.has_device_code or lib.embedded]
    if not device and expectation.by_design is not None:
        findings.append(
            ok(CHECK, f"note: {expectation.by_design}", elf_files=[lib.path for lib in inspected])
        )
        return findings
    if not device:
        findings.append(
            fail(
                CHECK,
                f"none of the {len(inspected)} inspected ELF files carries device code (a .nv_fatbin or "
                f"__nv_relfatbin section, a .cubin/.fatbin/.ptx file, an image embedded as data): a {variant} "
                f"wheel without device code runs on no GPU; {HOST_ONLY_HINT}",
                elf_files=[lib.path for lib in inspected],
            )
        )
        return findings
    findings.append(
        ok(
            CHECK,
            f"{len(inspected)} ELF file{'s' if len(inspected) != 1 else ''} inspected; "
            f"{len(device)} carr{'ies' if len(device) == 1 else 'y'} device code: "
            + ", ".join(lib.path for lib in device),
            elf_files=[lib.path for lib in inspected],
            device_code=[lib.path for lib in device],
        )
    )
    return findings


# this check, as release.audit.registry lists it
SPEC = Check(CHECK, "libraries", check)
