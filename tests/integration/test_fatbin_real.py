"""The fatbin reader on real binaries, checked entry by entry against cuobjdump.

Libraries are compiled here with the host nvcc (CUDA 13.0) and extracted from the
published CUDA wheels pinned in tests/helpers/real_wheels.py (fetched by name and sha256 into a
cache; a wheel that cannot be fetched fails its test). Members of 400 MB and more
(libtorch_cuda.so, libtorch_cpu.so, libcublasLt.so) are left out unless
``WHEELWRIGHT_BIG_BINARIES=1``; ``WHEELWRIGHT_FATBIN_MAX_MB`` moves the cut-off.

cuobjdump comes from ``ensure_cuobjdump`` (pip, cached under
``$WHEELWRIGHT_CACHE``, default ``~/.cache/wheelwright``), hence the ``network`` mark on the tests that use it.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.real_wheels import PINS, Pin, real_wheel

from release.binary.cuobjdump import (
    cross_check,
    ensure_cuobjdump,
    expected_listing,
    find_cuobjdump,
    header_dump,
    list_device_code,
    parse_listing,
)
from release.binary.elf import ElfError, is_elf, read_elf
from release.binary.fatbin import FatbinError, all_entries, has_device_code, read_fatbins
from release.core import proc
from release.core.errors import InputError, ToolError
from release.core.machine import default_cache_dir

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NVCC = Path(os.environ.get("NVCC", "/usr/local/bin/nvcc"))
CACHE_DIR = default_cache_dir(os.environ)
BIG = os.environ.get("WHEELWRIGHT_BIG_BINARIES") == "1"
MAX_BYTES = int(float(os.environ.get("WHEELWRIGHT_FATBIN_MAX_MB", "400")) * 1_000_000)

KERNEL = """
__global__ void scale(float* x, float a) { x[threadIdx.x] *= a; }
extern "C" void launch_scale(float* x, float a) { scale<<<1, 32>>>(x, a); }
"""


def gencode(arch: str, code: str) -> list[str]:
    return ["-gencode", f"arch={arch},code={code}"]


@dataclass(frozen=True)
class Build:
    name: str
    flags: tuple[str, ...]
    expected: frozenset[str]  # the exact set of entry names
    source: str = KERNEL


BUILDS = [
    Build(
        "mixed",
        (
            *gencode("compute_80", "sm_80"),
            *gencode("compute_90a", "sm_90a"),
            *gencode("compute_100f", "sm_100f"),
            *gencode("compute_120", "compute_120"),
            "-Xlinker",
            "--enable-new-dtags",
            "-Xlinker",
            "-rpath,$ORIGIN/../nvidia/cu13/lib:$ORIGIN",
            "-Xlinker",
            "-soname,libmixed.so.1",
        ),
        frozenset({"sm_80", "sm_90a", "sm_100f", "compute_120"}),
    ),
    Build(
        "variants",
        (
            *gencode("compute_75", "sm_75"),
            *gencode("compute_90a", "compute_90a"),
            *gencode("compute_100a", "sm_100a"),
            *gencode("compute_100f", "compute_100f"),
            *gencode("compute_103f", "sm_103f"),
            *gencode("compute_120f", "sm_121f"),
            *gencode("compute_121a", "sm_121a"),
            *gencode("compute_110", "sm_110"),
            "-Xlinker",
            "--disable-new-dtags",
            "-Xlinker",
            "-rpath,/usr/local/cuda/lib64",
        ),
        frozenset(
            {
                "sm_75",
                "compute_90a",
                "sm_100a",
                "compute_100f",
                "sm_103f",
                "sm_121f",
                "sm_121a",
                "sm_110",
            }
        ),
    ),
    # PTX only: nvcc also writes an empty fatbinary (payload size 0).
    Build("ptx_only", (*gencode("compute_120", "compute_120"),), frozenset({"compute_120"})),
    # LTO-IR survives into a shared library; cuobjdump does not list it.
    Build(
        "lto",
        (*gencode("compute_90", "lto_90"), *gencode("compute_80", "sm_80")),
        frozenset({"lto_90", "sm_80"}),
    ),
    # No kernels and no -gencode: nvcc still embeds its default target (sm_75 + PTX).
    Build(
        "host_nvcc",
        (),
        frozenset({"sm_75", "compute_75"}),
        'extern "C" int host_add(int a, int b) { return a + b; }\n',
    ),
]


def _compile(build: Build, out: Path) -> Path:
    src = out / f"{build.name}.cu"
    src.write_text(build.source)
    lib = out / f"lib{build.name}.so"
    proc.run(
        [NVCC, "-shared", "-Xcompiler", "-fPIC", "-cudart", "shared", *build.flags, src, "-o", lib],
        timeout=300,
    )
    return lib


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if not os.access(NVCC, os.X_OK):
        pytest.skip(f"no nvcc at {NVCC}")
    out = tmp_path_factory.mktemp("nvcc")
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        libs = dict(zip([b.name for b in BUILDS], pool.map(lambda b: _compile(b, out), BUILDS), strict=True))
    # A host-only library from the host C compiler: no .nv_fatbin at all.
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is not None:
        src = out / "plain.c"
        src.write_text("int plain_add(int a, int b) { return a + b; }\n")
        libs["plain"] = out / "libplain.so"
        proc.run([cxx, "-shared", "-fPIC", "-x", "c", src, "-o", libs["plain"]], timeout=120)
    return libs


@pytest.fixture(scope="session")
def cuobjdump() -> Path:
    return ensure_cuobjdump(CACHE_DIR)


# --------------------------------------------------------------------------- nvcc builds


@pytest.mark.parametrize("build", BUILDS, ids=[b.name for b in BUILDS])
def test_exact_entries_of_nvcc_builds(built: dict[str, Path], build: Build) -> None:
    lib = built[build.name]
    assert has_device_code(lib)
    fbs = read_fatbins(lib)
    assert fbs
    assert {e.name for fb in fbs for e in fb.entries} == build.expected
    info = read_elf(lib)
    section = info.section(".nv_fatbin")
    assert section is not None
    # Fatbinaries lie inside the section, in order, without overlapping.
    end = section.offset
    for fb in fbs:
        assert fb.offset >= end
        assert fb.offset % 8 == 0
        end = fb.offset + fb.size
        for e in fb.entries:
            assert fb.offset < e.offset < end
    assert end <= section.offset + section.size


def test_variant_flag_bits(built: dict[str, Path]) -> None:
    by_name = {e.name: e for e in all_entries(built["variants"])}
    assert by_name["sm_100a"].flags & 0x100000
    assert not by_name["sm_100a"].flags & 0x200000
    assert by_name["sm_103f"].flags & 0x200000
    assert not by_name["sm_103f"].flags & 0x100000
    assert by_name["compute_90a"].flags & 0x100000
    assert by_name["compute_100f"].flags & 0x200000
    assert not by_name["sm_110"].flags & 0x300000


def test_plain_host_library_has_no_device_code(built: dict[str, Path]) -> None:
    if "plain" not in built:
        pytest.skip("no host C compiler")
    assert is_elf(built["plain"])
    assert not has_device_code(built["plain"])
    assert read_fatbins(built["plain"]) == ()


def _readelf_dynamic(path: Path) -> dict[str, list[str]]:
    out = proc.run(["readelf", "-dW", path]).stdout
    found: dict[str, list[str]] = {"NEEDED": [], "RPATH": [], "RUNPATH": [], "SONAME": []}
    for m in re.finditer(r"\((NEEDED|RPATH|RUNPATH|SONAME)\)\s+[^\[]*\[(.*)\]", out):
        found[m[1]].append(m[2])
    return found


def _readelf_fatbin(path: Path) -> tuple[int, int] | None:
    out = proc.run(["readelf", "-SW", path]).stdout
    m = re.search(r"\]\s+\.nv_fatbin\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", out)
    return None if m is None else (int(m[1], 16), int(m[2], 16))


def _same_as_readelf(path: Path) -> None:
    if shutil.which("readelf") is None:
        return
    info = read_elf(path)
    ref = _readelf_dynamic(path)
    assert list(info.needed) == ref["NEEDED"]
    # as glibc reads them: an empty element of a value ('$ORIGIN:') is the working directory, kept
    assert list(info.rpath) == [p for v in ref["RPATH"] if v for p in v.split(":")]
    assert list(info.runpath) == [p for v in ref["RUNPATH"] if v for p in v.split(":")]
    assert info.soname == (ref["SONAME"][0] if ref["SONAME"] else None)
    section = info.section(".nv_fatbin")
    assert (None if section is None else (section.offset, section.size)) == _readelf_fatbin(path)


def test_elf_reader_agrees_with_readelf(built: dict[str, Path]) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    mixed = read_elf(built["mixed"])
    assert mixed.runpath == ("$ORIGIN/../nvidia/cu13/lib", "$ORIGIN")
    assert mixed.rpath == ()
    assert mixed.soname == "libmixed.so.1"
    assert "libcudart.so.13" in mixed.needed
    variants = read_elf(built["variants"])
    assert variants.rpath == ("/usr/local/cuda/lib64",)
    assert variants.runpath == ()
    for lib in built.values():
        _same_as_readelf(lib)


@pytest.mark.network
@pytest.mark.parametrize("build", BUILDS, ids=[b.name for b in BUILDS])
def test_nvcc_builds_match_cuobjdump(built: dict[str, Path], cuobjdump: Path, build: Build) -> None:
    check = cross_check(built[build.name], cuobjdump=cuobjdump)
    assert check.differences() == []
    assert check.same_order
    assert check.ours


@pytest.mark.network
def test_cuobjdump_drops_the_family_suffix_of_cubins(built: dict[str, Path], cuobjdump: Path) -> None:
    listed = list_device_code(built["mixed"], cuobjdump=cuobjdump)
    ours = {e.name for e in all_entries(built["mixed"])}
    assert "sm_100f" in ours
    assert ("sass", "sm_100") in listed
    assert ("sass", "sm_100f") not in listed
    assert ("sass", "sm_90a") in listed  # the `a` is kept
    listed = list_device_code(built["variants"], cuobjdump=cuobjdump)
    assert ("ptx", "compute_100f") in listed  # PTX keeps `f`
    assert ("sass", "sm_103") in listed
    assert ("sass", "sm_121") in listed and ("sass", "sm_121a") in listed


@pytest.mark.network
def test_cuobjdump_skips_lto_ir(built: dict[str, Path], cuobjdump: Path) -> None:
    entries = all_entries(built["lto"])
    assert "lto_90" in {e.name for e in entries}
    listed = list_device_code(built["lto"], cuobjdump=cuobjdump)
    assert {name for _, name in listed} == {"sm_80"}
    assert expected_listing(entries) == listed


# ------------------------------------------------------------------ cuobjdump's quirks


@pytest.mark.network
def test_quirk_two_files_print_usage_and_exit_0(built: dict[str, Path], cuobjdump: Path) -> None:
    result = proc.run([cuobjdump, "--list-elf", built["mixed"], built["variants"]], check=False)
    assert result.returncode == 0
    assert "Usage" in result.stdout
    with pytest.raises(ToolError, match="printed its usage instead of a listing"):
        parse_listing("sass", built["mixed"], result)


@pytest.mark.network
def test_quirk_no_device_code_exit_255(built: dict[str, Path], cuobjdump: Path, tmp_path: Path) -> None:
    if "plain" in built:
        result = proc.run([cuobjdump, "--list-elf", built["plain"]], check=False)
        assert result.returncode == 255
        assert list_device_code(built["plain"], cuobjdump=cuobjdump) == ()
    # A text file gets the same answer, though it is not ELF at all.
    script = tmp_path / "libfoo.so"
    script.write_text("INPUT(libfoo.so.1)\n")
    assert list_device_code(script, cuobjdump=cuobjdump) == ()
    with pytest.raises(ElfError, match="not an ELF file"):
        has_device_code(script)


@pytest.mark.network
def test_quirk_truncated_elf_reads_as_no_device_code(
    built: dict[str, Path], cuobjdump: Path, tmp_path: Path
) -> None:
    # cuobjdump calls a cut-off library "does not contain device code" (exit 255):
    # the exit code cannot decide "has device code"; the ELF reader refuses the file.
    data = built["mixed"].read_bytes()
    cut = tmp_path / "libcut.so"
    cut.write_bytes(data[: len(data) // 2])
    assert list_device_code(cut, cuobjdump=cuobjdump) == ()
    with pytest.raises(InputError):
        read_fatbins(cut)
    with pytest.raises(InputError):
        has_device_code(cut)


@pytest.mark.network
def test_quirk_info_line_when_one_kind_is_absent(built: dict[str, Path], cuobjdump: Path) -> None:
    result = proc.run([cuobjdump, "--list-elf", built["ptx_only"]], check=False)
    assert result.returncode == 0
    assert result.stdout.strip() == ""
    assert "No ELF file found" in result.stderr
    assert parse_listing("sass", built["ptx_only"], result) == ()
    # The same empty stdout without the info line is not trusted as "none".
    bare = proc.Result(result.args, 0, "", "")
    with pytest.raises(ToolError, match="no ELF entries and no 'No ELF file found' line"):
        parse_listing("sass", built["ptx_only"], bare)
    assert list_device_code(built["ptx_only"], cuobjdump=cuobjdump) == (("ptx", "compute_120"),)


@pytest.mark.network
@pytest.mark.parametrize(
    ("name", "content", "listed", "option", "parsed"),
    [
        # a missing file: refused before cuobjdump runs; cuobjdump itself exits 1 on it
        ("missing.so", None, (InputError, r"missing\.so: not a file"), "--list-elf",
         (InputError, "cuobjdump cannot read it")),
        # an empty file: cuobjdump exits 1 on it; exit 1 for a bad option is the tool failing
        ("empty.so", b"", (InputError, r"empty\.so: cuobjdump cannot read it"), "--no-such-option",
         (ToolError, "failed")),
    ],
    ids=["missing", "empty"],
)  # fmt: skip
def test_quirk_exit_1(
    name: str,
    content: bytes | None,
    listed: tuple[type[Exception], str],
    option: str,
    parsed: tuple[type[Exception], str],
    cuobjdump: Path,
    tmp_path: Path,
) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(listed[0], match=listed[1]):
        list_device_code(path, cuobjdump=cuobjdump)
    result = proc.run([cuobjdump, option, path], check=False)
    assert result.returncode == 1
    with pytest.raises(parsed[0], match=parsed[1]):
        parse_listing("sass", path, result)


@pytest.mark.network
def test_file_named_like_an_option(built: dict[str, Path], cuobjdump: Path, tmp_path: Path) -> None:
    odd = tmp_path / "-lelf.so"
    shutil.copy(built["mixed"], odd)
    assert cross_check(odd, cuobjdump=cuobjdump).differences() == []


@pytest.mark.network
def test_ensure_cuobjdump_reuses_the_cache(cuobjdump: Path) -> None:
    assert ensure_cuobjdump(CACHE_DIR) == cuobjdump
    assert find_cuobjdump(CACHE_DIR) == cuobjdump


def test_cuobjdump_env_must_be_executable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    not_a_tool = tmp_path / "cuobjdump"
    not_a_tool.write_text("")
    monkeypatch.setenv("CUOBJDUMP", str(not_a_tool))
    with pytest.raises(ToolError, match=r"CUOBJDUMP=.* is not an executable file"):
        find_cuobjdump()
    with pytest.raises(ToolError):
        list_device_code(not_a_tool)


# ------------------------------------------------------------- binaries from real wheels


@dataclass(frozen=True)
class Member:
    wheel: Path
    name: str
    size: int


def _wheel_members(pin: Pin) -> tuple[list[Member], list[Member]]:
    """(.so members of the pinned wheel within the size limit, the big ones), one copy of each file."""
    small: list[Member] = []
    big: list[Member] = []
    wheel = real_wheel(pin.key)
    seen: set[tuple[str, int, int]] = set()
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            base = Path(info.filename).name
            if info.is_dir() or not re.search(r"\.so(\.|$)", base):
                continue
            key = (base, info.CRC, info.file_size)
            if key in seen:
                continue
            seen.add(key)
            member = Member(wheel, info.filename, info.file_size)
            (big if info.file_size >= MAX_BYTES else small).append(member)
    return small, big


def _extract(member: Member, into: Path) -> Path:
    out = into / Path(member.name).name
    with zipfile.ZipFile(member.wheel) as z, z.open(member.name) as src, out.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    return out


def _check_member(path: Path, cuobjdump: Path) -> None:
    if not is_elf(path):
        with pytest.raises(ElfError):
            read_fatbins(path)
        return
    _same_as_readelf(path)
    check = cross_check(path, cuobjdump=cuobjdump)
    assert check.differences() == [], f"{path.name}: {check.differences()}"
    assert check.same_order
    if not has_device_code(path):
        assert check.theirs == ()


def _check_members(members: list[Member], cuobjdump: Path, tmp_path: Path) -> None:
    """Every member against cuobjdump; one failure does not hide the next."""
    failures: list[str] = []
    for member in members:
        path = _extract(member, tmp_path)
        try:
            _check_member(path, cuobjdump)
        except AssertionError as exc:
            failures.append(f"{member.name}: {exc}")
        finally:
            path.unlink()
    assert not failures, "\n".join(failures)


@pytest.mark.network
@pytest.mark.parametrize("pin", PINS, ids=[p.key for p in PINS])
def test_wheel_binaries_match_cuobjdump(pin: Pin, cuobjdump: Path, tmp_path: Path) -> None:
    small, _big = _wheel_members(pin)
    _check_members(small, cuobjdump, tmp_path)


@pytest.mark.network
@pytest.mark.skipif(not BIG, reason="set WHEELWRIGHT_BIG_BINARIES=1 for 400 MB+ libraries")
@pytest.mark.parametrize("pin", PINS, ids=[p.key for p in PINS])
def test_big_wheel_binaries_match_cuobjdump(pin: Pin, cuobjdump: Path, tmp_path: Path) -> None:
    _small, big = _wheel_members(pin)
    _check_members(big, cuobjdump, tmp_path)


def test_wheels_hold_device_code_to_check() -> None:
    # Guards against the sweep above silently checking nothing.
    small = {Path(m.name).name for m in _wheel_members(next(p for p in PINS if p.key == "nvidia_curand"))[0]}
    assert "libcurand.so.10" in small
    nvrtc = {
        Path(m.name).name for m in _wheel_members(next(p for p in PINS if p.key == "nvidia_cuda_nvrtc"))[0]
    }
    assert "libnvrtc.so.13" in nvrtc
    big = {Path(m.name).name for m in _wheel_members(next(p for p in PINS if p.key == "nvidia_cublas"))[1]}
    assert "libcublasLt.so.13" in big  # cuBLASLt: the sweep's largest NVIDIA library


# ------------------------------------------------------------- cost on a large library


def _largest_device_library(tmp_path: Path) -> Path:
    """libtorch_cuda.so with WHEELWRIGHT_BIG_BINARIES=1, else libcurand."""
    pin = next(p for p in PINS if p.key == ("torch" if BIG else "nvidia_curand"))
    small, big = _wheel_members(pin)
    wanted = "libtorch_cuda.so" if BIG else "libcurand.so"
    candidates = [m for m in (big + small if BIG else small) if Path(m.name).name.startswith(wanted)]
    assert candidates, f"{pin.filename} holds no {wanted}"
    return _extract(max(candidates, key=lambda m: m.size), tmp_path)


def test_header_only_read_is_small(tmp_path: Path) -> None:
    """Reading a big library's fatbins reads headers, not payloads: memory stays bounded. (Its
    speed is measured in benchmarks/, never timed in a test.)"""
    lib = _largest_device_library(tmp_path)
    code = (
        "import resource, sys\n"
        "from release.binary.fatbin import read_fatbins\n"
        "fbs = read_fatbins(sys.argv[1])\n"
        "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "print(rss, sum(len(f.entries) for f in fbs))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = proc.run([sys.executable, "-c", code, lib], cwd=root).stdout.split()
    rss_kib, entries = int(out[0]), int(out[1])
    assert entries > 0
    assert rss_kib < 400 * 1024, f"read_fatbins peaked at {rss_kib / 1024:.0f} MiB on {lib.name}"


def test_fatbin_error_names_file_and_offset(built: dict[str, Path], tmp_path: Path) -> None:
    # Corrupt one real entry's kind: the reader names the file and the entry's offset.
    lib = tmp_path / "libbroken.so"
    data = bytearray(built["mixed"].read_bytes())
    entry = all_entries(built["mixed"])[1]
    data[entry.offset] = 0x7F
    lib.write_bytes(bytes(data))
    with pytest.raises(
        FatbinError,
        match=rf"libbroken\.so: malformed \.nv_fatbin at file offset {entry.offset:#x}: unknown entry kind 127",
    ):
        read_fatbins(lib)


# ------------------------------------------------ relocatable device code, PTX ISA, compression


def _nvcc(nvcc: Path, out: Path, *args: str | Path) -> None:
    proc.run([nvcc, *args], cwd=out, timeout=300)


@pytest.mark.network
def test_relocatable_device_code_as_cuobjdump_reads_it(cuobjdump: Path, tmp_path: Path) -> None:
    """``-rdc=true`` without a device link leaves only ``__nv_relfatbin``; cuobjdump reads it then, and
    only the executable ``.nv_fatbin`` once the library is device-linked (``-all``: both)."""
    if not os.access(NVCC, os.X_OK):
        pytest.skip(f"no nvcc at {NVCC}")
    src = tmp_path / "k.cu"
    src.write_text(KERNEL)
    flags = (*gencode("compute_80", "sm_80"), *gencode("compute_90", "[sm_90,compute_90]"))
    _nvcc(NVCC, tmp_path, "-rdc=true", "-c", "-Xcompiler", "-fPIC", *flags, src, "-o", tmp_path / "k.o")
    unlinked = tmp_path / "libunlinked.so"
    proc.run(["g++", "-shared", tmp_path / "k.o", "-o", unlinked], timeout=120)
    linked = tmp_path / "liblinked.so"
    _nvcc(NVCC, tmp_path, "-shared", "-rdc=true", *gencode("compute_80", "sm_80"), *gencode("compute_90", "sm_90"),
          tmp_path / "k.o", "-o", linked)  # fmt: skip
    assert has_device_code(unlinked) and read_fatbins(unlinked) == ()
    reloc = read_fatbins(unlinked, relocatable=True)
    assert {e.name for fb in reloc for e in fb.entries} == {"sm_80", "sm_90", "compute_90"}
    assert all(fb.relocatable for fb in reloc)
    assert {e.name for fb in read_fatbins(linked) for e in fb.entries} == {
        "sm_80",
        "sm_90",
    }  # the link drops PTX
    for lib in (unlinked, linked):
        check = cross_check(lib, cuobjdump=cuobjdump)
        assert check.differences() == [] and check.ours, lib.name


@pytest.mark.network
def test_ptx_isa_and_compression_match_the_header_dump(cuobjdump: Path, tmp_path: Path) -> None:
    """nvcc 13.0 writes PTX ISA 9.0, 13.2 writes 9.2 (cuobjdump's ``code version``); PTX is zstd-compressed."""
    toolkits = [(NVCC, (9, 0))]
    cuda132 = default_cache_dir(os.environ) / "cuda-13.2.86" / "nvidia" / "cu13" / "bin" / "nvcc"
    if cuda132.is_file():
        toolkits.append((cuda132, (9, 2)))
    for nvcc, isa in toolkits:
        if not os.access(nvcc, os.X_OK):
            pytest.skip(f"no nvcc at {nvcc}")
        out = tmp_path / f"{isa[0]}{isa[1]}"
        out.mkdir()
        src = out / "k.cu"
        src.write_text(KERNEL)
        lib = out / "libk.so"
        _nvcc(
            nvcc,
            out,
            "-shared",
            "-Xcompiler",
            "-fPIC",
            *gencode("compute_80", "[sm_80,compute_80]"),
            src,
            "-o",
            lib,
        )
        ptx = [e for e in all_entries(lib) if e.kind == "ptx"]
        assert [(e.ptx_isa, e.compression) for e in ptx] == [(isa, "zstd")]
        assert cross_check(lib, cuobjdump=cuobjdump).differences() == []
        assert [h for h in header_dump(lib, cuobjdump=cuobjdump) if h[0] == "ptx"] == [
            ("ptx", "sm_80", isa, True)
        ]
