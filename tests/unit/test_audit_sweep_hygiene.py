"""The hygiene and loader findings a sweep of 18 real third-party CUDA wheels showed false, as classes.

Every wheel here is a real zip of real ELF files that gcc links on the spot (a SONAME, DT_NEEDED
entries, a RUNPATH), read by the audit's own wheel reader and ELF inspection. Each class has an
artifact that must fail (the true finding still fires) and one that must pass (the false one is
gone):

1. a CUDA package's own wheel ships its own libraries: no graft (every package of cuda.toml);
2. a bundled CUDA library is named with the package of its SONAME's CUDA major only;
3. one SONAME twice: the same bytes is waste, different builds in one folder or reached by one
   search path conflict, different builds in separate folders are builds chosen at run time;
4. a platform tag limited by a library the wheel does ship names the file that links it and the
   search path that misses it;
5. the loader's advice is a normalised ``$ORIGIN`` entry (``$ORIGIN``, never ``$ORIGIN/.``);
6. a header-only wheel with a platform tag is a note in a standalone audit and a failure for a row.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from helpers.audit import abi, cuda
from helpers.elf import TAG, Gcc, write_wheel

from release import runpath
from release.audit.checks import hygiene, loader
from release.audit.model import AbiReport, Contents, Expectation, Finding
from release.audit.reading.archive import open_wheel
from release.audit.reading.inspector import inspect_libraries
from release.policy.model import CudaPackage
from release.resources.cuda import cuda as cuda_facts


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def passing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if f.ok]


@pytest.fixture
def gcc(tmp_path: Path) -> Gcc:
    return Gcc(tmp_path)


@contextmanager
def opened(path: Path) -> Iterator[Contents]:
    with open_wheel(path) as w:
        yield Contents(w, inspect_libraries(w))


# --------------------------------------------------------------------------- 1. a package's own wheel


def _example_soname(pattern: str | None, stem: str) -> str:
    """A concrete SONAME a table entry ships (``libnvrtc-builtins.so.13.*`` -> ``...so.13.0``)."""
    return pattern.replace("*", "0") if pattern is not None else f"{stem}.so.9"


def _package_libraries() -> dict[str, dict[str, str]]:
    """Every pip package of cuda.toml -> {wheel path of a library it ships: SONAME}."""
    out: dict[str, dict[str, str]] = {}
    for lib in cuda_facts().libraries:
        for shipping in lib.shipping:
            soname = _example_soname(shipping.soname, lib.stem)
            out.setdefault(shipping.package, {})[f"{shipping.installs_to}/{soname}"] = soname
    return out


PACKAGES = _package_libraries()


def test_every_cuda_package_of_the_table_is_covered() -> None:
    assert {
        "nvidia-cuda-runtime",
        "nvidia-cuda-runtime-cu12",
        "nvidia-cuda-runtime-cu11",
        "nvidia-cublas",
    } <= set(PACKAGES)
    assert len(PACKAGES) >= 30


def test_each_cuda_package_ships_its_own_libraries_and_nobody_else_may(tmp_path: Path, gcc: Gcc) -> None:
    """nvidia-cuda-runtime 13.0.96's own libcudart.so.13 was "a copy of the CUDA runtime grafted into
    the wheel": the runtime's branch came before the own-wheel exemption. Every package of the table,
    the runtime of each CUDA major included, passes in its own wheel and fails in any other."""
    built = {soname: gcc.so(soname) for libs in PACKAGES.values() for soname in libs.values()}
    for package, libs in sorted(PACKAGES.items()):
        files = {path: built[soname] for path, soname in libs.items()}
        with opened(write_wheel(tmp_path / package, package, files)) as c:
            findings = hygiene.grafted_findings(c)
        assert failing(findings) == [], package
        (note,) = passing(findings)
        assert f"the wheel is {package}, which ships its own" in note, note
        with opened(write_wheel(tmp_path / f"other-{package}", "pkg", files)) as c:
            failed = [f for f in hygiene.grafted_findings(c) if not f.ok]
        assert sorted(str(f.details["member"]) for f in failed) == sorted(libs), package
        for finding in failed:
            shipped_by = finding.details["packages"]
            assert isinstance(shipped_by, list) and package in shipped_by, (package, finding.message)
            kind = "runtime" if "libcudart" in str(finding.details["soname"]) else "toolkit"
            assert ("a copy of the CUDA runtime grafted" in finding.message) == (kind == "runtime")


def test_the_runtime_package_ships_its_own_runtime(tmp_path: Path, gcc: Gcc) -> None:
    """The sweep's case itself: nvidia-cuda-runtime 13.0.96 and nvidia/cu13/lib/libcudart.so.13."""
    files = {"nvidia/cu13/lib/libcudart.so.13": gcc.so("libcudart.so.13")}
    with opened(write_wheel(tmp_path / "own", "nvidia-cuda-runtime", files)) as c:
        findings = hygiene.grafted_findings(c)
    assert failing(findings) == []
    assert findings[0].details["own"] == ["nvidia/cu13/lib/libcudart.so.13"]
    with opened(write_wheel(tmp_path / "other", "torchlike", files)) as c:
        (msg,) = failing(hygiene.grafted_findings(c))
    assert msg == (
        "nvidia/cu13/lib/libcudart.so.13 is the CUDA runtime of CUDA 13 (libcudart.so.13, from nvidia-cuda-runtime), "
        "known by its SONAME: a copy of the CUDA runtime grafted into the wheel; it must come from the declared "
        "runtime package; repair with --exclude 'libcudart.so*'"
    )


def test_the_own_wheel_exemption_covers_only_its_own_libraries(tmp_path: Path, gcc: Gcc) -> None:
    files = {
        "nvidia/cu13/lib/libcusolver.so.12": gcc.so("libcusolver.so.12"),
        "nvidia/cu13/lib/libcublas.so.13": gcc.so("libcublas.so.13"),  # nvidia-cublas's, not cuSOLVER's
        "nvidia/cu13/lib/libcuda.so.1": gcc.so("libcuda.so.1"),  # the driver: no package ships it
    }
    with opened(write_wheel(tmp_path, "nvidia-cusolver", files)) as c:
        msgs = failing(hygiene.grafted_findings(c))
    assert len(msgs) == 2
    assert msgs[0].startswith("nvidia/cu13/lib/libcublas.so.13 is cuBLAS of CUDA 13")
    assert "which nvidia-cublas provides" in msgs[0]
    assert msgs[1].startswith("nvidia/cu13/lib/libcuda.so.1 is the CUDA driver")
    assert "a copy of the CUDA driver grafted into the wheel" in msgs[1]


# --------------------------------------------------------------------------- 2. the SONAME's CUDA major


def test_a_bundled_library_names_the_package_of_its_cuda_major(tmp_path: Path, gcc: Gcc) -> None:
    """triton's cupti/libcupti.so.12 was said to be provided by "nvidia-cuda-cupti or
    nvidia-cuda-cupti-cu12"; only the -cu12 package ships SONAME libcupti.so.12."""
    files = {
        "pkg/cupti/libcupti.so.12": gcc.so("libcupti.so.12"),
        "pkg/cupti-blackwell/libcupti.so.13": gcc.so("libcupti.so.13"),
        "pkg/cupti/libcheckpoint.so": gcc.so("libcheckpoint.so"),  # both majors ship this SONAME
        "pkg.libs/libcudart-1a2b3c4d.so.12": gcc.so("libcudart-1a2b3c4d.so.12"),
    }
    with opened(write_wheel(tmp_path, "pkg", files)) as c:
        failed = {str(f.details["member"]): f for f in hygiene.grafted_findings(c) if not f.ok}
    assert set(failed) == set(files), "every one is still a bundled CUDA library"
    cu12 = failed["pkg/cupti/libcupti.so.12"]
    assert cu12.details["packages"] == ["nvidia-cuda-cupti-cu12"]
    assert "a CUDA library bundled in the wheel, which nvidia-cuda-cupti-cu12 provides;" in cu12.message
    assert failed["pkg/cupti-blackwell/libcupti.so.13"].details["packages"] == ["nvidia-cuda-cupti"]
    both = failed["pkg/cupti/libcheckpoint.so"]
    assert both.details["packages"] == ["nvidia-cuda-cupti", "nvidia-cuda-cupti-cu12"]
    assert "which nvidia-cuda-cupti or nvidia-cuda-cupti-cu12 provides" in both.message
    runtime = failed["pkg.libs/libcudart-1a2b3c4d.so.12"]
    assert runtime.details["packages"] == ["nvidia-cuda-runtime-cu12"]
    assert "a copy of the CUDA runtime grafted into the wheel" in runtime.message


# --------------------------------------------------------------------------- 3. one SONAME twice


def test_the_same_bytes_twice_is_waste(tmp_path: Path, gcc: Gcc) -> None:
    data = gcc.so("libx.so.1")
    files = {"pkg/lib/libx.so": data, "pkg/lib/libx.so.1": data, "pkg/other/libx.so.1": data}
    with opened(write_wheel(tmp_path, "pkg", files)) as c:
        assert failing(hygiene.owner_findings(c)) == [
            "libx.so.1 is shipped 3 times, the same bytes each time (pkg/lib/libx.so, pkg/lib/libx.so.1, "
            "pkg/other/libx.so.1): each copy can be loaded (by path), each with its own state, and the wheel "
            "carries the bytes 3 times; ship it once"
        ]


def test_two_builds_in_one_folder_conflict(tmp_path: Path, gcc: Gcc) -> None:
    files = {
        "pkg/lib/libx.so.1": gcc.so("libx.so.1", body="a"),
        "pkg/lib/libx.so.1.2": gcc.so("libx.so.1", body="b"),
    }
    with opened(write_wheel(tmp_path, "pkg", files)) as c:
        (msg,) = failing(hygiene.owner_findings(c))
    assert msg.startswith(
        "libx.so.1 is shipped as 2 different builds in one folder (pkg/lib/libx.so.1, pkg/lib/libx.so.1.2): "
        "the loader finds a library in pkg/lib by its file name"
    )


def test_two_builds_reached_by_one_search_path_conflict(tmp_path: Path, gcc: Gcc) -> None:
    files = {
        "pkg/cu12/libx.so.1": gcc.so("libx.so.1", body="cuda 12"),
        "pkg/cu13/libx.so.1": gcc.so("libx.so.1", body="cuda 13"),
        "pkg/_ext.so": gcc.so("_ext.so", needed=("libx.so.1",), runpath=("$ORIGIN/cu13", "$ORIGIN/cu12")),
    }
    with opened(write_wheel(tmp_path, "pkg", files)) as c:
        (msg,) = failing(hygiene.owner_findings(c))
    assert msg == (
        "pkg/_ext.so needs libx.so.1 and its RUNPATH ['$ORIGIN/cu13', '$ORIGIN/cu12'] reaches 2 different "
        "builds of it (pkg/cu13/libx.so.1, pkg/cu12/libx.so.1): it loads pkg/cu13/libx.so.1, the first in its "
        "search path, never the other; give each build its own folder that only its own users reach"
    )


def test_builds_in_separate_folders_chosen_at_run_time_pass(tmp_path: Path, gcc: Gcc) -> None:
    """triton ships CUPTI for CUDA 12 in cupti/ and for CUDA 13 in cupti-blackwell/: each folder's
    libcheckpoint.so is another build (other bytes), and each user reaches only its own folder."""
    files = {
        "pkg/cu12/libx.so.1": gcc.so("libx.so.1", body="cuda 12"),
        "pkg/cu13/libx.so.1": gcc.so("libx.so.1", body="cuda 13"),
        "pkg/cu12/libuser.so": gcc.so("libuser.so", needed=("libx.so.1",), runpath=("$ORIGIN",), body="12"),
        "pkg/cu13/libuser.so": gcc.so("libuser.so", needed=("libx.so.1",), runpath=("$ORIGIN",), body="13"),
    }
    with opened(write_wheel(tmp_path, "pkg", files)) as c:
        findings = hygiene.owner_findings(c)
    assert failing(findings) == []
    assert passing(findings) == [
        "one owner per component: no library shipped twice",
        "libuser.so is shipped as 2 different builds in separate folders (pkg/cu12/libuser.so, pkg/cu13/libuser.so) "
        "and no file's search path reaches two of them: builds chosen at run time, not a second copy",
        "libx.so.1 is shipped as 2 different builds in separate folders (pkg/cu12/libx.so.1, pkg/cu13/libx.so.1) "
        "and no file's search path reaches two of them: builds chosen at run time, not a second copy",
    ]


def test_triton_shape(tmp_path: Path, gcc: Gcc) -> None:
    """triton 3.8.0's CUPTI folders: the same libcupti three times in each (waste, still failing),
    libcheckpoint.so once per folder as two builds (fine)."""
    cupti12, cupti13 = gcc.so("libcupti.so.12"), gcc.so("libcupti.so.13")
    base = "triton/backends/nvidia/lib"
    files = {
        **{f"{base}/cupti/{n}": cupti12 for n in ("libcupti.so", "libcupti.so.12", "libcupti.so.2025.1.1")},
        **{f"{base}/cupti-blackwell/{n}": cupti13 for n in ("libcupti.so", "libcupti.so.13")},
        f"{base}/cupti/libcheckpoint.so": gcc.so("libcheckpoint.so", body="12"),
        f"{base}/cupti-blackwell/libcheckpoint.so": gcc.so("libcheckpoint.so", body="13"),
    }
    with opened(write_wheel(tmp_path, "triton", files)) as c:
        findings = hygiene.owner_findings(c)
    msgs = failing(findings)
    assert [m.split(" (", 1)[0] for m in msgs] == [
        "libcupti.so.12 is shipped 3 times, the same bytes each time",
        "libcupti.so.13 is shipped 2 times, the same bytes each time",
    ]
    assert not any("libcheckpoint" in m for m in msgs)
    assert any(
        m.startswith("libcheckpoint.so is shipped as 2 different builds in separate folders")
        for m in passing(findings)
    )


# --------------------------------------------------------------------------- 4. the platform tag's reason


def _external(soname: str) -> AbiReport:
    return abi(
        honest=False, overall="linux_x86_64", limited_by=("external libraries",), libs_to_eliminate=(soname,)
    )


def test_a_shipped_library_the_search_path_misses_is_named_as_such(tmp_path: Path, gcc: Gcc) -> None:
    """triton 3.8.0: "it links libtriton.so, which ... the wheel does not ship", but the wheel ships
    triton/_C/libtriton.so; the plugins' RUNPATH ($ORIGIN/../lib and the build tree) misses it."""
    runpath = ("$ORIGIN/../lib", "/project/build/lib.linux-x86_64-cpython-311/triton/_C")
    files = {
        "triton/_C/libtriton.so": gcc.so("libtriton.so"),
        "triton/plugins/libplugin.so": gcc.so("libplugin.so", needed=("libtriton.so",), runpath=runpath),
    }
    with opened(write_wheel(tmp_path, "triton", files)) as c:
        report = _external("libtriton.so")
        (msg,) = failing(hygiene.platform_findings(Contents(c.wheel, c.libraries, report), cuda()))
    assert "the wheel does not ship" not in msg
    assert (
        "(triton/plugins/libplugin.so links libtriton.so, which the wheel ships as triton/_C/libtriton.so, but none "
        "of its RPATH/RUNPATH entries reaches it (libplugin.so's RUNPATH: ['$ORIGIN/../lib', "
        "'/project/build/lib.linux-x86_64-cpython-311/triton/_C']), so auditwheel looks for it on the system, "
        f"where {TAG} does not allow it: add '$ORIGIN/../_C')"
    ) in msg


def test_a_library_the_wheel_does_not_ship_is_still_named_as_such(tmp_path: Path, gcc: Gcc) -> None:
    files = {"pkg/_ext.so": gcc.so("_ext.so", needed=("libgomp.so.1",), runpath=("$ORIGIN",))}
    with opened(write_wheel(tmp_path, "pkg", files)) as c:
        report = _external("libgomp.so.1")
        (msg,) = failing(hygiene.platform_findings(Contents(c.wheel, c.libraries, report), cuda()))
    assert f"(it links libgomp.so.1, which {TAG} does not allow and the wheel does not ship)" in msg


# --------------------------------------------------------------------------- 5. the loader's advice

CUBLAS = CudaPackage("nvidia-cublas", (), ("libcublas.so.13", "libcublasLt.so.13"), "nvidia/cu13/lib")


def test_a_sibling_in_the_same_folder_is_reached_by_plain_origin(tmp_path: Path, gcc: Gcc) -> None:
    """nvidia-cusolver's libcusolverMg.so.12 needs libcublas.so.13 in its own folder and has no RUNPATH:
    the advice was "add '$ORIGIN/.'"."""
    mg = gcc.so("libcusolverMg.so.12", needed=("libcublas.so.13",))
    with opened(
        write_wheel(tmp_path / "a", "nvidia-cusolver", {"nvidia/cu13/lib/libcusolverMg.so.12": mg})
    ) as c:
        (msg,) = failing(loader.check(c, cuda(packages=(CUBLAS,))))
    assert msg.endswith(
        "has no RPATH/RUNPATH: it loads only where the system's loader cache happens to hold "
        "libcublas.so.13; add '$ORIGIN'"
    )
    fixed = gcc.so("libcusolverMg.so.12", needed=("libcublas.so.13",), runpath=("$ORIGIN",))
    with opened(
        write_wheel(tmp_path / "b", "nvidia-cusolver", {"nvidia/cu13/lib/libcusolverMg.so.12": fixed})
    ) as c:
        assert failing(loader.check(c, cuda(packages=(CUBLAS,)))) == []


@pytest.mark.parametrize(
    ("target", "origin", "entry"),
    [
        ("nvidia/cu13/lib", "nvidia/cu13/lib", "$ORIGIN"),
        ("nvidia/cu13/lib", "nvidia/cu13/lib/", "$ORIGIN"),
        ("nvidia/cu13/lib", "nvidia/cu13/./lib", "$ORIGIN"),
        ("nvidia/cu13/lib", "pkg/lib", "$ORIGIN/../../nvidia/cu13/lib"),
        ("nvidia/cu13/lib", "", "$ORIGIN/nvidia/cu13/lib"),
        ("nvidia/cu13/lib", "nvidia/cu13/lib/stubs", "$ORIGIN/.."),
        ("nvidia/cu13", "nvidia/cu13/lib", "$ORIGIN/.."),
        ("", "pkg/sub", "$ORIGIN/../.."),
        ("pkg/sub", "pkg", "$ORIGIN/sub"),
    ],
)
def test_every_advised_entry_is_normalised_and_reaches_its_target(
    target: str, origin: str, entry: str
) -> None:
    assert runpath.origin_entry(target, origin) == entry
    assert not {".", ""} & set(entry.split("/")[1:])
    reached = runpath.resolve(entry, origin.rstrip("/").replace("/./", "/"))
    assert reached == target


def test_the_loader_advice_resolves_to_where_the_package_installs(tmp_path: Path, gcc: Gcc) -> None:
    """Whatever folder the library sits in, the entry the message advises reaches installs_to."""
    folders = ["nvidia/cu13/lib", "nvidia/cu13/lib/sub", "pkg", "pkg/a/b", "", "nvidia"]
    data = gcc.so("libk.so", needed=("libcublas.so.13",))
    for i, folder in enumerate(folders):
        member = f"{folder}/libk.so" if folder else "libk.so"
        with opened(write_wheel(tmp_path / str(i), "pkg", {member: data})) as c:
            (msg,) = failing(loader.check(c, cuda(packages=(CUBLAS,))))
        advice = re.search(r"add '([^']+)'$", msg)
        assert advice is not None, msg
        assert runpath.resolve(advice[1], folder) == "nvidia/cu13/lib", (folder, advice[1])
        assert not {".", ""} & set(advice[1].split("/")[1:]), advice[1]


# --------------------------------------------------------------------------- 6. a header-only wheel


def _header_only(tmp_path: Path) -> Path:
    files = {"nvidia/cu13/include/cub/cub.cuh": b"#pragma once\n", "nvidia/__init__.py": b""}
    return write_wheel(tmp_path, "nvidia-cuda-cccl", files, tag="manylinux2014_x86_64")


def test_a_header_only_wheel_with_a_platform_tag_is_a_note_standalone(tmp_path: Path) -> None:
    standalone = Expectation("cuda", None, (), (), standalone=True)
    with opened(_header_only(tmp_path)) as c:
        findings = hygiene.platform_findings(Contents(c.wheel, c.libraries, abi(pure=True)), standalone)
    assert failing(findings) == []
    (note,) = passing(findings)
    assert note.startswith("note: the wheel is tagged manylinux2014_x86_64 but has no platform ELF file")


def test_a_header_only_wheel_with_a_platform_tag_fails_a_row(tmp_path: Path) -> None:
    row = Expectation("cu130", "13.0", (), (), row_id="cu130-py312-x86_64")
    with opened(_header_only(tmp_path)) as c:
        msgs = failing(hygiene.platform_findings(Contents(c.wheel, c.libraries, abi(pure=True)), row))
    assert msgs == [
        "the wheel is tagged manylinux2014_x86_64 but auditwheel finds no platform ELF file in it; a pure wheel "
        "is tagged 'any'"
    ]


# --------------------------------------------------------------------------- an empty RUNPATH element


def test_an_empty_runpath_element_is_the_working_directory(tmp_path: Path, gcc: Gcc) -> None:
    """triton 3.8's plugins end their RUNPATH with ':'. glibc reads the empty element as the working
    directory (checked here: a program with RUNPATH '/x:' loads its library from the folder it is run
    in), so a library of that name there is loaded instead: must fail. The reader used to drop it."""
    lib = "pkg/lib/libk.so"
    with opened(write_wheel(tmp_path / "bad", "pkg", {lib: gcc.so("libk.so", runpath=("$ORIGIN", ""))})) as c:
        (only,) = [x for x in c.libraries if x.path == lib]
        assert only.elf is not None and only.elf.runpath == ("$ORIGIN", "")
        msgs = failing(loader.check(c, cuda()))
    assert any(
        "libk.so has an empty RUNPATH entry ('$ORIGIN:')" in m and "working directory" in m for m in msgs
    )
    with opened(write_wheel(tmp_path / "good", "pkg", {lib: gcc.so("libk.so", runpath=("$ORIGIN",))})) as c:
        assert not [m for m in failing(loader.check(c, cuda())) if "RUNPATH entry" in m]


def test_a_wholly_empty_search_path_names_nothing() -> None:
    """An empty DT_RUNPATH string loads nothing from the working directory (glibc): no entry."""
    from release.binary.elf import _split_paths

    assert _split_paths([""]) == ()
    assert _split_paths([":"]) == ("", "")
    assert _split_paths(["/a::/b"]) == ("/a", "", "/b")
