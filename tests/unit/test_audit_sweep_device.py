"""What the sweep of 18 third-party CUDA wheels found in the device-code checks, as classes of failure.

* A cubin's ELF header by its ABI version: version 7 (every ptxas up to CUDA 12.x) keeps the SM in
  the low byte of ``e_flags``, version 8 (CUDA 13) in bits 8-15. The header values below are those
  of real cubins (``tests/integration/test_audit_sweep_device_real.py`` compiles them and reads CUPTI
  13.0's against cuobjdump).
* ``--runs-on X`` where some translation units hold kernels only for other GPUs (cuBLAS's
  arch-specific units) runs on X, with a note; a strict ``X.Y`` claim (a row's) still holds every unit.
* Device code only embedded as data is device code, but not code a GPU claim can be held to.
* A host-only library wheel (no device code) is told how it is audited: ``--variant cpu``.
"""

from __future__ import annotations

import struct
from dataclasses import replace

from helpers.audit import contents, cuda, fatbin, lib

from release.audit.checks import device_code, gpus, libraries
from release.audit.claim import apply_options
from release.audit.model import Expectation, Finding, Library
from release.binary.cubin import cubin_target, header_target
from release.binary.embedded import EmbeddedImage
from release.binary.fatbin import Fatbinary, FatbinEntry
from release.policy.archs import parse_claim_list

ROW = "cu130-py312-x86_64"


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def passing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if f.ok]


def claim(text: str) -> Expectation:
    return replace(cuda(), gpu_archs=parse_claim_list(text))


def header(abi: int, flags: int, e_version: int) -> bytes:
    """A cubin's 64-byte ELF header: ELFCLASS64, little-endian, OS/ABI 0x33 (ABI 7) or 0x41 (ABI 8)."""
    head = bytearray(0x40)
    head[:4] = b"\x7fELF"
    head[4], head[5], head[6] = 2, 1, 1
    head[7], head[8] = (0x41 if abi >= 8 else 0x33), abi
    struct.pack_into("<HHI", head, 0x10, 2, 190, e_version)
    struct.pack_into("<I", head, 0x30, flags)
    return bytes(head)


# --------------------------------------------------------------------------- cubin headers


def test_abi7_keeps_the_sm_in_the_low_byte_and_a_in_bit_11() -> None:
    # CUDA 12.4's ptxas: sm_80 0x500550, sm_90 0x5a055a, sm_90a 0x5a0d5a; e_version 124
    assert header_target(header(7, 0x500550, 124)) == (80, "")
    assert header_target(header(7, 0x5A055A, 124)) == (90, "")
    assert header_target(header(7, 0x5A0D5A, 124)) == (90, "a")
    # CUPTI 13.0's sm_60 cubin of CUDA 9.0: bit 0x800 is EF_CUDA_SW_1729687 there, not "a"
    assert header_target(header(7, 0x3C0D3C, 90)) == (60, "")
    target = cubin_target(header(7, 0x5A0D5A, 124), b"\0.text._Z1kPf\0")
    assert target is not None
    assert (target.arch, target.variant, target.toolkit, target.kernels) == (90, "a", (12, 4), True)
    old = cubin_target(header(7, 0x230523, 90), b"")
    assert old is not None and (old.arch, old.toolkit) == (35, (9, 0))


def test_abi8_keeps_the_sm_in_bits_8_to_15_and_the_variant_in_its_note() -> None:
    # nvcc 13.0: sm_80 0x6005004; sm_90 and sm_90a both 0x6005a04; sm_100a and sm_100f 0x6006402
    assert header_target(header(8, 0x6005004, 1)) == (80, "")
    assert header_target(header(8, 0x6005A04, 1)) == (90, "")
    note = b"\0Cuda compilation tools, release 13.0, V13.0.88\0-arch sm_90a -m 64 \0"
    target = cubin_target(header(8, 0x6005A04, 1), note)
    assert target is not None and (target.arch, target.variant, target.toolkit) == (90, "a", (13, 0))
    family = cubin_target(header(8, 0x6006402, 1), b"\0-arch sm_100f -m 64 \0")
    assert family is not None and (family.arch, family.variant, family.toolkit) == (100, "f", None)


def test_a_note_for_another_arch_leaves_the_header_variant() -> None:
    target = cubin_target(header(7, 0x5A0D5A, 124), b"\0-arch sm_80 -m 64 \0")
    assert target is not None and (target.arch, target.variant) == (90, "a")


# --------------------------------------------------------------------------- --runs-on and partial units

# cuBLAS 13.1's shape: units for every GPU, units for sm_100 only, units for sm_90a only
CUBLAS_LIKE = lib(
    "pkg/lib/libk.so",
    fatbin("sm_75", "sm_80", "sm_90", "sm_100", "sm_120", "compute_120"),
    fatbin("sm_100"),
    fatbin("sm_100"),
    fatbin("sm_90a"),
)


def test_partial_on_a_gpu_of_runs_on_passes_with_a_note() -> None:
    found = gpus.check(contents(CUBLAS_LIKE), apply_options(claim("sm_75;sm_90a;sm_100"), runs_on="8.0"))
    assert not failing(found)
    note = next(f for f in found if f.details.get("support") == "partial")
    assert note.message == (
        "libk.so runs on A100 (8.0), which --runs-on names, in 1 of its 4 translation units with "
        "kernels; the other 3 hold kernels only for other GPUs (2 with sm_100; 1 with sm_90a; e.g. the unit "
        "at file offset 0x0: sm_100): its host code must call them only on those GPUs, which the audit "
        "cannot see (a claim of 8.0 holds every unit to it)"
    )
    assert note.details["units_for_other_gpus"] == 3
    assert note.details["target_sets"] == {"sm_100": 2, "sm_90a": 1}
    summary = passing(found)[0]
    assert summary.endswith("(--runs-on); 1 only in part of its translation units (noted below)")


def test_none_on_a_gpu_of_runs_on_fails() -> None:
    k = lib("pkg/lib/libk.so", fatbin("sm_90a"), fatbin("sm_100"))
    msgs = failing(gpus.check(contents(k), apply_options(claim("sm_90a;sm_100"), runs_on="8.0")))
    assert msgs == [
        "libk.so does not run on A100 (8.0), which --runs-on names: 2 of its 2 translation units with "
        "kernels have neither SASS nor PTX for it"
    ]


def test_a_strict_claim_still_holds_every_unit() -> None:
    """A row's gpu_archs are strict: a unit its build left without the row's 8.0 fails, --runs-on or not."""
    k = lib("pkg/lib/libk.so", fatbin("sm_80", "sm_90", "compute_90"), fatbin("sm_90", "compute_90"))
    row = replace(cuda("8.0;9.0+PTX"), row_id=ROW)
    assert not failing(device_code.check(contents(k), row))  # the union covers the list
    for exp in (row, apply_options(row, runs_on="8.0")):
        msgs = failing(gpus.check(contents(k), exp))
        assert msgs == [
            "libk.so does not run natively on A100 (8.0), which the row claims: 1 of its 2 translation "
            "units with kernels carry no SASS for it; their kernels cannot run there"
        ]


def test_partial_on_a_driver_that_refuses_the_path_fails() -> None:
    jit_only = Fatbinary(0, (FatbinEntry("ptx", 80, "", code_version=(9, 2)),))  # PTX of CUDA 13.2
    k = lib("pkg/lib/libk.so", jit_only, fatbin("sm_100"))
    exp = apply_options(claim("compute_80;sm_100"), runs_on="8.0", driver="13.0")
    msgs = failing(gpus.check(contents(k), exp))
    assert any(m.startswith("libk.so does not run on A100 (8.0)") for m in msgs)
    assert not any(f.details.get("support") == "partial" for f in gpus.check(contents(k), exp) if f.ok)
    assert not failing(gpus.check(contents(k), apply_options(claim("compute_80;sm_100"), runs_on="8.0")))


# --------------------------------------------------------------------------- embedded only, host only


def _embedded_only() -> Library:
    images = (
        EmbeddedImage(".rodata", 0x2CA400, "cubin", 2984, ("sm_80",)),
        EmbeddedImage(".rodata", 0x3ACE00, "fatbin", 4096, ("sm_75", "sm_90")),
    )
    return replace(lib("nvidia/cu13/lib/libcupti.so.13", device=False), embedded=images)


def test_allowed_embedded_code_is_not_called_no_device_code() -> None:
    cupti = _embedded_only()
    exp = apply_options(cuda(None), runs_on="8.0", allow=["embedded-device-code"])
    found = device_code.check(contents(cupti), exp)
    assert any("embeds device code as data" in m and "allowed" in m for m in passing(found))
    assert failing(found) == [
        "the wheel's only device code is embedded as data (2 images in libcupti.so.13), which each library "
        "loads itself: the audit cannot tie it to a kernel or a GPU, so the GPUs of --runs-on cannot be "
        "confirmed from it (no library has a .nv_fatbin or __nv_relfatbin section, and the wheel has no "
        ".cubin/.fatbin/.ptx file)"
    ]
    with_claim = failing(device_code.check(contents(cupti), replace(exp, gpu_archs=parse_claim_list("8.0"))))
    assert (
        len(with_claim) == 1 and "the claimed GPU architectures ['80'] cannot be confirmed" in with_claim[0]
    )
    gpu = failing(gpus.check(contents(cupti), exp))
    assert gpu == [
        "the wheel's only device code is embedded as data (in libcupti.so.13), which the audit cannot tie "
        "to a GPU: none of the claimed GPUs can be confirmed"
    ]
    assert not any(
        "no library carries device code" in m or "no device code:" in m for m in [*gpu, *with_claim]
    )


def test_embedded_code_not_allowed_fails_once() -> None:
    cupti = _embedded_only()
    msgs = failing(device_code.check(contents(cupti), apply_options(cuda(None), runs_on="8.0")))
    assert len(msgs) == 1 and msgs[0].startswith("libcupti.so.13 embeds device code as data")


def test_a_host_only_library_wheel_is_told_to_use_variant_cpu() -> None:
    host = lib("nvidia/cu13/lib/libnvJitLink.so.13", device=False)
    exp = apply_options(cuda(None), runs_on="8.0")
    (lib_msg,) = failing(libraries.check(contents(host), exp))
    assert lib_msg.startswith("none of the 1 inspected ELF files carries device code")
    assert "a cu130 wheel without device code runs on no GPU" in lib_msg  # the verdict stays
    assert lib_msg.endswith(libraries.HOST_ONLY_HINT)
    assert "--variant cpu" in libraries.HOST_ONLY_HINT
    (gpu_msg,) = failing(gpus.check(contents(host), exp))
    assert (
        gpu_msg == f"no device code: the wheel runs on none of the claimed GPUs; {libraries.HOST_ONLY_HINT}"
    )
    unreadable = lib("pkg/lib/libk.so", fatbin_error="bad magic")
    assert failing(gpus.check(contents(unreadable), exp)) == [
        "no readable device code: the wheel runs on none of the claimed GPUs"
    ]
