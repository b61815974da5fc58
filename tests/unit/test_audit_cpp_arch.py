"""The C++ consumer check builds for the wheel's CPU architecture (release.audit.cpp.target): the platform tag
decides, else the SDK libraries' ELF machine; a cross toolchain is used only once it has built an ELF file of
that architecture; none here stops the check with the package to install; the cache keys the target.

Real compilers throughout: this machine's gcc/g++ and Debian's aarch64-linux-gnu-gcc/-g++ (packages
g++-aarch64-linux-gnu, libc6-dev-arm64-cross). The tests that need a foreign architecture assume an x86_64
machine, as CI's is; on an aarch64 one, they swap roles (``OTHER``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.elf import write_wheel

from release.audit.claim import claim_expectation
from release.audit.cpp import cache as cpp_cache
from release.audit.cpp import consumer as cpp_consumer
from release.audit.cpp import early as cpp_early
from release.audit.cpp.target import Target, decide, foreign_libraries, tag_arch, tool_names, toolchain
from release.audit.model import Finding
from release.audit.reading.archive import open_wheel
from release.binary.elf import read_elf
from release.core.errors import ToolError
from release.resources.cpus import cpus, host_arch

HOST = host_arch()
OTHER = "aarch64" if HOST != "aarch64" else "x86_64"
CROSS_GCC = f"{cpus().by_name[OTHER].triplet}-gcc"
C_API = '#pragma once\n#ifdef __cplusplus\nextern "C" {\n#endif\n%s\n#ifdef __cplusplus\n}\n#endif\n'
HEADER = C_API % "int fx_version(void);\nint fx_add(int a, int b);"
LIB = "int fx_version(void) { return 1; }\nint fx_add(int a, int b) { return a + b; }\n"


def _lib(tmp: Path, compiler: str, source: str = LIB) -> bytes:
    tmp.mkdir(parents=True, exist_ok=True)
    src = tmp / "fx.c"
    src.write_text(source, encoding="utf-8")
    out = tmp / f"libfx-{compiler}.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", out, src], check=True, timeout=120)
    return out.read_bytes()


def _finding(wheel: Path) -> Finding:
    expectation = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="8.0")
    with open_wheel(wheel) as opened:
        findings, _ = cpp_early.cached_check(opened, expectation, cpp_early.EarlyCpp(False))
    assert len(findings) == 1, findings
    return findings[0]


# --------------------------------------------------------------------------- pure


@pytest.mark.parametrize(
    ("tags", "arch"),
    [
        (("manylinux_2_27_aarch64",), "aarch64"),
        (("manylinux2014_aarch64", "manylinux_2_17_aarch64"), "aarch64"),
        (("manylinux1_x86_64", "manylinux_2_5_x86_64"), "x86_64"),
        (("linux_x86_64",), "x86_64"),
        (("musllinux_1_2_aarch64",), "aarch64"),
        (("manylinux_2_28_ppc64le",), "ppc64le"),
        (("any",), None),
        (("manylinux_2_28_x86_64", "manylinux_2_28_aarch64"), None),  # two architectures: not one
        (("macosx_11_0_arm64",), None),
        ((), None),
    ],
)
def test_tag_arch(tags: tuple[str, ...], arch: str | None) -> None:
    assert tag_arch(tags) == arch


def test_the_tag_decides_before_the_libraries() -> None:
    """pip installs by the tag: an aarch64-tagged wheel's consumer builds for aarch64, whatever it ships."""
    target = decide(("manylinux_2_27_aarch64",), ["x86_64"], host="x86_64")
    assert target == Target("aarch64", "its platform tag manylinux_2_27_aarch64")
    assert foreign_libraries(target, [("fx/lib/libfx.so", read_elf("/bin/true"))]) == (
        [("fx/lib/libfx.so", HOST)] if HOST != "aarch64" else []
    )


def test_without_an_arch_in_the_tag_the_libraries_decide() -> None:
    assert decide(("any",), ["aarch64", "aarch64", None], host="x86_64").arch == "aarch64"
    assert decide(("any",), ["aarch64", "x86_64"], host="x86_64").arch == "x86_64"  # no one answer: here
    assert decide((), [], host="s390x").arch == "s390x"


def test_tool_names() -> None:
    assert tool_names(None, "x86_64") == ("gcc", "g++", "ld")
    assert tool_names("x86_64", "x86_64") == ("gcc", "g++", "ld")
    assert tool_names("aarch64", "x86_64") == (
        "aarch64-linux-gnu-gcc",
        "aarch64-linux-gnu-g++",
        "aarch64-linux-gnu-ld",
    )
    assert tool_names("x86_64", "aarch64")[0] == "x86_64-linux-gnu-gcc"


# --------------------------------------------------------------------------- the toolchain


def test_the_native_toolchain_for_this_machines_wheels() -> None:
    chain = toolchain(Target(HOST, "its platform tag"))
    assert not chain.cross
    assert (Path(chain.gcc).name, Path(chain.gxx).name) == ("gcc", "g++")


def test_a_cross_toolchain_for_another_architecture() -> None:
    """Must pass: the cross compilers link a program of the target's ELF machine (the probe), so they are used."""
    chain = toolchain(Target(OTHER, "its platform tag manylinux_2_27_aarch64"))
    assert chain.cross and chain.arch == OTHER
    assert Path(chain.gcc).name == CROSS_GCC
    assert "a cross toolchain for" in chain.describe()


def test_under_emulation_the_native_gxx_of_the_real_machine_is_never_used(tmp_path: Path) -> None:
    """An audit run by an emulated aarch64 Python (qemu-user: the machine says aarch64, while the PATH's
    g++ is the real machine's and builds x86_64) must not link an aarch64 wheel's SDK with it: the probe
    sees the x86_64 output and takes the target's cross compilers (must pass); without them it cannot
    run and says so (must fail closed)."""
    chain = toolchain(Target(OTHER, "its platform tag manylinux_2_27_aarch64"), host=OTHER)
    assert chain.cross and Path(chain.gxx).name == f"{CROSS_GCC.removesuffix('-gcc')}-g++"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("gcc", "g++", "cc1", "as", "ld"):
        found = shutil.which(name)
        if found is not None:
            (bin_dir / name).symlink_to(found)
    with pytest.raises(
        ToolError, match="aarch64-linux-gnu-gcc and aarch64-linux-gnu-g\\+\\+ are not on PATH"
    ):
        toolchain(Target(OTHER, "its platform tag manylinux_2_27_aarch64"), host=OTHER, path=str(bin_dir))


def test_no_toolchain_for_the_wheels_architecture_cannot_run(tmp_path: Path) -> None:
    """Must fail closed: no cross compiler on the search path stops the check (exit 3) with the package to
    install; this machine's own compilers are never used instead."""
    (tmp_path / "bin").mkdir()
    for tool in ("gcc", "g++"):  # only the native compilers are here
        (tmp_path / "bin" / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    with pytest.raises(ToolError) as caught:
        toolchain(
            Target("aarch64", "its platform tag manylinux_2_27_aarch64"),
            host="x86_64",
            path=str(tmp_path / "bin"),
        )
    said = str(caught.value)
    assert caught.value.return_code == 3
    assert "the C++ consumer check cannot run here" in said
    assert "aarch64-linux-gnu-gcc and aarch64-linux-gnu-g++ are not on PATH" in said
    assert "g++-aarch64-linux-gnu libc6-dev-arm64-cross" in said
    assert "never by this machine's x86_64 compilers" in said


def test_a_compiler_of_the_wrong_architecture_is_refused(tmp_path: Path) -> None:
    """Must fail: an ``<other>-linux-gnu-gcc`` that builds this machine's code (a misnamed native gcc) is found
    out by the probe's ELF machine, and never gives a verdict."""
    fake = tmp_path / "bin"
    fake.mkdir()
    triplet = cpus().by_name[OTHER].triplet
    for tool in ("gcc", "g++"):
        (fake / f"{triplet}-{tool}").symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    path = os.pathsep.join([str(fake), os.environ.get("PATH", os.defpath)])
    with pytest.raises(ToolError) as caught:
        toolchain(Target(OTHER, "its platform tag"), path=path)
    assert f"{triplet}-gcc builds {HOST}, not {OTHER}" in str(caught.value)


def test_an_unknown_architecture_names_no_package(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="no cross toolchain for loongarch64 is known"):
        toolchain(
            Target("loongarch64", "its platform tag linux_loongarch64"), host="x86_64", path=str(tmp_path)
        )


# --------------------------------------------------------------------------- the check


def test_an_sdk_of_another_architecture_links_with_its_cross_toolchain(tmp_path: Path) -> None:
    """Must pass: an aarch64 wheel's SDK (built by the cross compiler) is compiled and linked for aarch64; this
    machine's linker would have refused its library ("file in wrong format")."""
    files = {"fxsdk/include/fx.h": HEADER.encode(), "fxsdk/lib/libfx.so": _lib(tmp_path, CROSS_GCC)}
    wheel = write_wheel(tmp_path / "dist", "fxsdk", files, tag=f"manylinux_2_28_{OTHER}")
    finding = _finding(wheel)
    assert finding.ok, finding.message
    assert "links fxsdk/lib/libfx.so, referencing 2 declared functions" in finding.message
    assert f"(a cross toolchain for {OTHER}: {CROSS_GCC}" in finding.message
    assert finding.details["toolchain"] == {
        "arch": OTHER,
        "gcc": shutil.which(CROSS_GCC),
        "g++": shutil.which(f"{cpus().by_name[OTHER].triplet}-g++"),
        "cross": True,
    }


def test_an_sdk_of_another_architecture_still_fails_what_it_should(tmp_path: Path) -> None:
    """Must fail: the cross link finds what a native one would (a declared function the library lacks)."""
    header = C_API % "int fx_version(void);\nint fx_add(int a, int b);\nint fx_missing(void);"
    files = {"fxsdk/include/fx.h": header.encode(), "fxsdk/lib/libfx.so": _lib(tmp_path, CROSS_GCC)}
    finding = _finding(write_wheel(tmp_path / "dist", "fxsdk", files, tag=f"manylinux_2_28_{OTHER}"))
    assert not finding.ok
    assert "compiles (a cross toolchain" in finding.message
    assert "undefined reference to `fx_missing'" in finding.message


@pytest.mark.parametrize("tagged", [OTHER, HOST])
def test_an_sdk_library_of_another_architecture_than_the_tag_fails(tmp_path: Path, tagged: str) -> None:
    """Must fail: the library is built for one architecture and the wheel tagged for the other (both ways);
    the finding names the library and both architectures, and needs no compiler to say so."""
    built, compiler = (HOST, "gcc") if tagged == OTHER else (OTHER, CROSS_GCC)
    files = {"fxsdk/include/fx.h": HEADER.encode(), "fxsdk/lib/libfx.so": _lib(tmp_path, compiler)}
    finding = _finding(write_wheel(tmp_path / "dist", "fxsdk", files, tag=f"manylinux_2_28_{tagged}"))
    assert not finding.ok
    assert finding.message.startswith(
        f"fxsdk/lib/libfx.so is built for {built} (its ELF machine), but the wheel is for {tagged} "
        f"(its platform tag manylinux_2_28_{tagged}): a C++ program on {tagged}, where pip installs the wheel, "
        "cannot link it"
    ), finding.message
    assert finding.details["foreign_libraries"] == {"fxsdk/lib/libfx.so": built}


def test_default_arguments_do_not_fail_the_cxx_pass(tmp_path: Path) -> None:
    """Must pass (a false failure before, on NVIDIA's CUDA runtime wheel, both architectures): a C function whose
    C++ declaration has default arguments (cuda_runtime_api.h's ``unsigned int flags __dv(0)``). g++ keeps them
    in ``decltype(f)``, so redeclaring ``extern "C" decltype(f) f;`` was refused as "default argument given"."""
    header = C_API % (
        "#ifdef __cplusplus\n#define FX_DV(v) = v\n#else\n#define FX_DV(v)\n#endif\n"
        "int fx_version(void);\nint fx_add(int a, int b FX_DV(0));\nint fx_log(const char *f, ...);"
    )
    lib = LIB + "int fx_log(const char *f, ...) { return f[0]; }\n"
    files = {"fxsdk/include/fx.h": header.encode(), "fxsdk/lib/libfx.so": _lib(tmp_path, "gcc", lib)}
    finding = _finding(write_wheel(tmp_path / "dist", "fxsdk", files))
    assert finding.ok, finding.message
    assert "referencing 3 declared functions" in finding.message


def test_cxx_linkage_is_still_found_with_default_arguments(tmp_path: Path) -> None:
    """Must fail: the rebuilt type keeps the check's point (a function declared without extern "C")."""
    header = (
        "#pragma once\nint fx_version(void);\nint fx_add(int a, int b\n#ifdef __cplusplus\n= 0\n#endif\n);\n"
    )
    files = {"fxsdk/include/fx.h": header.encode(), "fxsdk/lib/libfx.so": _lib(tmp_path, "gcc")}
    finding = _finding(write_wheel(tmp_path / "dist", "fxsdk", files))
    assert not finding.ok
    assert 'declares it with C++ linkage (no extern "C")' in finding.message


# --------------------------------------------------------------------------- the cache


def test_the_cache_key_holds_the_target_and_its_compilers(tmp_path: Path) -> None:
    """A finding for the aarch64 build of an SDK is never read back for the same headers built for x86_64."""
    environ = {"PATH": os.environ.get("PATH", os.defpath)}
    native, cross = cpp_cache.fingerprint(environ), cpp_cache.fingerprint(environ, "aarch64")
    assert native[0] == ["target", HOST, HOST]
    assert cross[0] == ["target", "aarch64", HOST]
    assert [tool for tool, _stat in cross[1:4]] == (
        ["aarch64-linux-gnu-g++", "aarch64-linux-gnu-gcc", "aarch64-linux-gnu-ld"] if HOST != "aarch64" else
        ["g++", "gcc", "ld"]
    )  # fmt: skip
    files = {"fxsdk/include/fx.h": HEADER.encode(), "fxsdk/lib/libfx.so": b"\x7fELF not read here"}
    with open_wheel(write_wheel(tmp_path / "dist", "fxsdk", files)) as opened:
        keys = {
            arch: cpp_cache.keys(opened.members, None, environ, arch=arch) for arch in (None, HOST, OTHER)
        }
    here, there = keys[HOST], keys[OTHER]
    assert keys[None] == here
    assert here is not None and there is not None
    assert there.sdk != here.sdk


def test_the_early_compile_of_an_aarch64_wheel_is_the_cross_toolchains(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compile started while the libraries unpack builds for the tag's architecture, and the check uses
    it (it prepares again only for another toolchain)."""
    files = {"fxsdk/include/fx.h": HEADER.encode(), "fxsdk/lib/libfx.so": _lib(tmp_path, CROSS_GCC)}
    tag = f"manylinux_2_28_{OTHER}"
    wheel_path = write_wheel(tmp_path / "dist", "fxsdk", files, tag=tag)
    late: list[str] = []
    real = cpp_consumer.prepare

    def counted(*args: object, **kwargs: object) -> cpp_consumer.Prepared:
        late.append("prepare")
        return real(*args, **kwargs)  # type: ignore[arg-type]

    expectation = claim_expectation(variant=None, gpu_archs=None, policy=None, runs_on="8.0")
    early = cpp_early.EarlyCpp(True, platform_tags=(tag,))
    with early, open_wheel(wheel_path, on_others_done=early.start) as wheel:
        (future,) = early.futures.values()
        assert future.result().toolchain.arch == OTHER and future.result().toolchain.cross
        monkeypatch.setattr(cpp_consumer, "prepare", counted)
        (finding,), _ = cpp_early.cached_check(wheel, expectation, early)
    assert finding.ok and finding.details["toolchain"]["arch"] == OTHER, finding.message
    assert late == []  # the check did not compile again
