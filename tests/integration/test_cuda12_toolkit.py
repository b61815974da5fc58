"""The CUDA 12.4 test toolkit unpacked from Debian trixie (scripts/fetch_cuda12_debian.py).

The parser tests need nothing. The others fetch the toolkit once into
~/.cache/wheelwright/cuda-12.4-debian (about 1 GB download, 45 s cold; 0.2 s once there),
then build a `.cu` shared library the way a cu12 wheel ships it and check the ELF.
"""

from __future__ import annotations

import re
import shutil
import time
from pathlib import Path

import fetch_cuda12_debian as fetch
import pytest

from release.core.proc import run

CU12_RPATH = "$ORIGIN/../nvidia/cuda_runtime/lib"
ARCHS = ("75", "80", "90")

AXPY_CU = r"""
#include <cuda_runtime.h>
__global__ void axpy(float a, const float *x, float *y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}
extern "C" int axpy_launch(float a, const float *x, float *y, int n) {
  axpy<<<(n + 255) / 256, 256>>>(a, x, y, n);
  return (int)cudaGetLastError();
}
"""

# ---------------------------------------------------------------- mirror derivation (offline)

DEB822 = """\
Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.example/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: https://other.example/node
Suites: nodistro
Components: main
"""


def test_deb822_gives_one_entry_per_uri_and_suite() -> None:
    found = fetch.parse_deb822_sources(DEB822, "debian.sources")
    assert [(s.uri, s.suite) for s in found] == [
        ("http://mirror.example/debian", "bookworm"),
        ("http://mirror.example/debian", "bookworm-updates"),
        ("http://mirror.example/debian-security", "bookworm-security"),
        ("https://other.example/node", "nodistro"),
    ]
    assert found[0].signed_by == "/usr/share/keyrings/debian-archive-keyring.gpg"


def test_deb822_skips_disabled_and_source_only_stanzas_and_inline_keys() -> None:
    text = (
        "Types: deb\nURIs: http://a.example/debian\nSuites: trixie\nComponents: main\n"
        "Enabled: no\n\n"
        "Types: deb-src\nURIs: http://b.example/debian\nSuites: trixie\nComponents: main\n\n"
        "Types: deb\nURIs: http://c.example/debian\nSuites: trixie\nComponents: main\n"
        "Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n abc\n"
    )
    found = fetch.parse_deb822_sources(text, "x.sources")
    assert [s.uri for s in found] == ["http://c.example/debian"]
    assert found[0].signed_by is None


def test_one_line_format_with_options_and_comments() -> None:
    text = (
        "# deb http://commented.example/debian bookworm main\n"
        "deb-src http://src.example/debian bookworm main\n"
        "deb [arch=amd64 signed-by=/k.gpg] http://m.example/debian/ bookworm main contrib\n"
        "deb http://security.example/debian-security bookworm-security main\n"
    )
    found = fetch.parse_one_line_sources(text, "sources.list")
    assert [(s.uri, s.suite, s.components, s.signed_by) for s in found] == [
        ("http://m.example/debian", "bookworm", ("main", "contrib"), "/k.gpg"),
        ("http://security.example/debian-security", "bookworm-security", ("main",), None),
    ]


def test_mirror_is_the_debian_main_entry_not_security_nor_third_party() -> None:
    sources = fetch.parse_deb822_sources(DEB822, "debian.sources")
    # A third-party entry listed first must not win, nor the security archive.
    ordered = [sources[3], sources[2], sources[1], sources[0]]
    chosen = fetch.debian_mirror(ordered)
    assert (chosen.uri, chosen.suite) == ("http://mirror.example/debian", "bookworm")


def test_no_debian_entry_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text("deb http://archive.example/ubuntu jammy main\n")
    (tmp_path / "sources.list.d" / "x.list.disabled").write_text("deb http://d/debian trixie main")
    with pytest.raises(fetch.NoDebianSource, match=r"no Debian archive.*sources\.list.*--mirror"):
        fetch.find_debian_mirror(tmp_path)


def test_this_machine_has_a_debian_mirror_and_the_repo_names_none() -> None:
    source = fetch.find_debian_mirror()
    assert source.uri and source.origin.startswith("/etc/apt/")
    script = Path(fetch.__file__).read_text()
    host = re.sub(r"^[a-z+]+://", "", source.uri).split("/")[0]
    assert host not in script, "the mirror host must come from apt sources, not the script"


# ---------------------------------------------------------------- the toolkit (network once)


@pytest.fixture(scope="session")
def cuda12_home() -> Path:
    started = time.monotonic()
    try:
        home = fetch.ensure_cuda12_toolkit()
    except fetch.NoDebianSource as exc:
        pytest.skip(f"not a Debian machine: {exc}")
    print(f"CUDA 12.4 toolkit ready in {time.monotonic() - started:.1f} s: {home}")
    return home


def _nvcc_build(home: Path, work: Path, *, wrap: list[str] | None = None) -> Path:
    (work / "axpy.cu").write_text(AXPY_CU)
    gencode = [f for a in ARCHS for f in ("-gencode", f"arch=compute_{a},code=sm_{a}")]
    gencode += ["-gencode", f"arch=compute_{ARCHS[-1]},code=compute_{ARCHS[-1]}"]
    env = fetch.toolkit_env(home)
    env["TMPDIR"] = str(work)
    out = work / "libaxpy.so"
    run(
        [
            *(wrap or []),
            home / "bin" / "nvcc",
            "-shared",
            "-Xcompiler",
            "-fPIC",
            "-cudart",
            "shared",
            *gencode,
            "-Xlinker",
            f"-rpath,{CU12_RPATH}",
            "-o",
            out,
            work / "axpy.cu",
        ],
        env=env,
        cwd=work,
    )
    return out


@pytest.mark.integration
@pytest.mark.network
def test_nvcc_reports_release_12_4(cuda12_home: Path) -> None:
    assert cuda12_home.name == "cuda-12.4"
    assert fetch.nvcc_release(cuda12_home) == "12.4"
    res = run([cuda12_home / "bin" / "nvcc", "--version"], env=fetch.toolkit_env(cuda12_home))
    assert "release 12.4, V12.4.131" in res.stdout
    # The profile nvcc reads is ours and names no system path.
    profile = (cuda12_home / "bin" / "nvcc.profile").read_text()
    assert "/usr/" not in profile and "$(_HERE_)" in profile
    assert (cuda12_home / "lib64" / "libcudart.so").resolve().name == "libcudart.so.12.4.127"


@pytest.mark.integration
@pytest.mark.network
def test_second_call_reuses_the_tree(cuda12_home: Path) -> None:
    manifest = cuda12_home.parent / "manifest.json"
    before = manifest.stat().st_mtime_ns
    started = time.monotonic()
    assert fetch.ensure_cuda12_toolkit() == cuda12_home
    assert time.monotonic() - started < 10
    assert manifest.stat().st_mtime_ns == before


@pytest.mark.integration
@pytest.mark.network
def test_cu12_library_device_code_and_rpath(cuda12_home: Path, tmp_path: Path) -> None:
    lib = _nvcc_build(cuda12_home, tmp_path)

    sections = run(["readelf", "-S", "-W", lib]).stdout
    assert re.search(r"\]\s+\.nv_fatbin\s", sections), sections

    dynamic = run(["readelf", "-d", "-W", lib]).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic)
    assert "libcudart.so.12" in needed
    paths = re.findall(r"\((?:RPATH|RUNPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", dynamic)
    assert paths == [CU12_RPATH], dynamic

    cuobjdump = cuda12_home / "bin" / "cuobjdump"
    elf = run([cuobjdump, "--list-elf", lib]).stdout
    ptx = run([cuobjdump, "--list-ptx", lib]).stdout
    assert sorted(set(re.findall(r"\.sm_(\d+)\.cubin", elf))) == list(ARCHS)
    assert re.findall(r"\.sm_(\d+)\.ptx", ptx) == [ARCHS[-1]]


def _successful_paths(trace_dir: Path) -> set[Path]:
    """Files opened (resolved by the kernel, from strace -y) or executed, successfully."""
    opened: set[Path] = set()
    for trace in trace_dir.glob("trace.*"):
        for line in trace.read_text(errors="replace").splitlines():
            if line.startswith("openat(") and (m := re.search(r"= \d+<([^>]+)>$", line)):
                opened.add(Path(m[1]))
            elif line.startswith("execve(") and line.endswith("= 0"):
                opened.add(Path(line.split('"', 2)[1]).resolve())
    return opened


@pytest.mark.integration
@pytest.mark.network
def test_nvcc_reads_only_the_private_tree(cuda12_home: Path, tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    traces = tmp_path / "traces"
    traces.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    wrap = ["strace", "-ff", "-qq", "-y", "-e", "trace=openat,execve", "-o", f"{traces}/trace"]
    _nvcc_build(cuda12_home, work, wrap=wrap)
    tree = cuda12_home.parent.resolve()
    cuda_like = re.compile(r"cuda|nvcc|nvvm|cudart|libdevice|cicc|ptxas|fatbin|nvlink", re.I)
    paths = _successful_paths(traces)
    strays = sorted(
        str(p)
        for p in paths
        if cuda_like.search(str(p)) and not p.is_relative_to(tree) and not p.is_relative_to(work)
    )
    assert strays == [], "nvcc used CUDA files outside the private tree"
    names = {p.name for p in paths if p.is_relative_to(tree)}
    assert {"nvcc.profile", "cuda_runtime.h", "cicc", "ptxas", "libcudart.so.12.4.127"} <= names


_WRITES = re.compile(
    r"^(open|openat|creat|mkdir|mkdirat|unlink|unlinkat|rmdir|rename|renameat|renameat2|link|"
    r"linkat|symlink|symlinkat|truncate|chmod|fchmodat|chown|lchown|fchownat|utimensat)\("
)
_PATH_ARG = re.compile(r'(?:(?:AT_FDCWD|\d+)<([^>]*)>,\s*)?"((?:[^"\\]|\\.)*)"')


def _written_paths(trace_dir: Path, cwd: Path) -> set[Path]:
    """Paths that succeeded in a syscall that changes the file system."""
    written: set[Path] = set()
    for trace in trace_dir.glob("trace.*"):
        for line in trace.read_text(errors="replace").splitlines():
            m = _WRITES.match(line)
            if not m or re.search(r"= -1 ", line):
                continue
            call = m[1]
            if call.startswith("open") and not re.search(r"O_WRONLY|O_RDWR|O_CREAT|O_TRUNC", line):
                continue
            args = _PATH_ARG.findall(line)
            if call.startswith("symlink"):
                args = args[1:]  # the first string is the link's target, not written
            for base, path in args:
                full = Path(path) if path.startswith("/") else Path(base or cwd) / path
                written.add(full)
    return written


@pytest.mark.integration
@pytest.mark.network
def test_private_apt_writes_nothing_outside_its_folder(tmp_path: Path) -> None:
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed")
    try:
        source = fetch.find_debian_mirror()
    except fetch.NoDebianSource as exc:
        pytest.skip(f"not a Debian machine: {exc}")
    traces = tmp_path / "traces"
    traces.mkdir()
    root = tmp_path / "apt"
    wrap = ["strace", "-ff", "-qq", "-y", "-o", f"{traces}/trace"]
    apt = fetch.PrivateApt(root, source, arch="amd64", wrapper=wrap, log=lambda _: None)
    apt.update()
    debs = {d.name: d for d in apt.resolve(fetch.PACKAGES)}
    assert debs["nvidia-cuda-toolkit"].version.startswith("12.4.")
    assert debs["libcudart12"].version.startswith("12.4.")
    outside = sorted(
        str(p)
        for p in _written_paths(traces, root)
        if not p.is_relative_to(tmp_path) and str(p) != "/dev/null"
    )
    assert outside == [], "private apt wrote outside its folder"
    lists = sorted(p.name for p in (root / "lists").glob("*_Packages*"))
    assert any("_trixie_non-free_binary-" in name for name in lists), lists
