"""Checks ``packages`` and ``loader`` on synthetic metadata and ELF headers."""

from __future__ import annotations

import pytest
from helpers.audit import CPU, RPATH, RUNTIME, contents, cuda, elf, fatbin, lib
from packaging.specifiers import SpecifierSet

from release import runpath
from release.audit.checks import loader, packages
from release.audit.model import Finding
from release.policy.model import CudaPackage


def failing(findings: list[Finding]) -> list[str]:
    return [f.message for f in findings if not f.ok]


def meta(*requires: str) -> str:
    return "Metadata-Version: 2.1\nName: pkg\nVersion: 1.0\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )


def audit_packages(*requires: str, exp=None) -> list[str]:  # type: ignore[no-untyped-def]
    return failing(packages.check(contents(metadata=meta(*requires)), exp or cuda()))


# --------------------------------------------------------------------------- packages


@pytest.mark.parametrize(
    ("spec", "ok"),
    [
        ("", True),
        ("==13.0.*", True),
        ("==13.0.96", True),
        (">=13.0,<14", True),
        ("~=13.0", True),
        ("==13.*", True),
        ("==12.*", False),
        ("==13.2.*", False),
        (">=13.2", False),
        ("!=13.0.*", False),
        ("<13", False),
    ],
)
def test_admits_train(spec: str, ok: bool) -> None:
    assert packages.admits_train(SpecifierSet(spec), "13.0") is ok


@pytest.mark.parametrize(
    "requires",
    [
        ["nvidia-cuda-runtime==13.0.*"],
        ["nvidia_cuda_runtime >= 13.0"],  # names normalised
        ["NVIDIA.Cuda.Runtime"],
        ['nvidia-cuda-runtime==13.0.96; platform_system == "Linux"'],  # markers allowed
        ["cuda-toolkit[cudart]==13.0.*"],
        ["cuda-toolkit[cudart]==13.0.3"],
        ["nvidia-cuda-runtime", 'nvidia-cuda-runtime-cu11; extra == "legacy"'],  # extras-gated: ignored
        ["nvidia-cuda-runtime", "numpy>=2", "triton"],  # not CUDA packages
    ],
)
def test_declares_exactly_the_train_set(requires: list[str]) -> None:
    assert audit_packages(*requires) == []


@pytest.mark.parametrize(
    ("requirement", "platform", "never"),
    [
        # the marker is judged for the wheel's own CPU, OS and Python, never the auditing machine's
        ('nvidia-cuda-runtime==13.0.*; platform_machine == "x86_64"', "manylinux_2_28_aarch64", True),
        ('nvidia-cuda-runtime==13.0.*; platform_machine == "aarch64"', "manylinux_2_28_aarch64", False),
        ('nvidia-cuda-runtime==13.0.*; platform_machine == "aarch64"', "manylinux_2_28_x86_64", True),
        ('nvidia-cuda-runtime==13.0.*; sys_platform == "win32"', "manylinux_2_28_x86_64", True),
        ('nvidia-cuda-runtime==13.0.*; python_version < "3.12"', "manylinux_2_28_x86_64", True),  # cp312
        ('nvidia-cuda-runtime==13.0.*; python_version >= "3.12"', "manylinux_2_28_x86_64", False),
        ('nvidia-cuda-runtime==13.0.*; platform_machine == "x86_64" or platform_machine == "aarch64"',
         "manylinux_2_28_aarch64", False),
    ],
)  # fmt: skip
def test_a_cuda_package_the_wheels_own_machines_never_install_fails(
    requirement: str, platform: str, never: bool
) -> None:
    exp = cuda()
    msgs = failing(packages.check(contents(metadata=meta(requirement), platform_tags=(platform,)), exp))
    arch = "aarch64" if platform.endswith("aarch64") else "x86_64"
    if never:
        assert (
            f"declares {requirement!r}, which pip never installs beside this wheel: its marker is false on every "
            f"machine the wheel's tags name ({arch}); declare it for them (or without the marker)"
        ) in msgs
        assert any(m.startswith("does not declare nvidia-cuda-runtime") for m in msgs)
    else:
        assert msgs == []


def _never(metadata: str, envs: list[dict[str, str]]) -> list[str]:
    return packages.never_installed(packages.declared_requirements(metadata)[0], envs)[0]


def test_an_any_platform_or_py3_tag_leaves_its_markers_open() -> None:
    """A tag that names no CPU (``any``) or no Python (``py3``) installs on every one: a marker is
    false there only when it is false for all of them."""
    envs = packages.target_environments(("py3",), ("any",))
    assert (
        _never(meta('nvidia-nccl-cu13; platform_machine == "aarch64" and python_version >= "3.13"'), envs)
        == []
    )
    assert _never(meta('nvidia-nccl-cu13; python_version < "3"'), envs) == [
        'nvidia-nccl-cu13; python_version < "3"'
    ]
    (env,) = packages.target_environments(("cp311",), ("manylinux_2_28_aarch64",))
    assert env == {
        "platform_machine": "aarch64",
        "platform_system": "Linux",
        "sys_platform": "linux",
        "os_name": "posix",
        "python_version": "3.11",
        "python_full_version": "3.11.0",
    }


def test_thousands_of_marked_cuda_requirements_are_judged_within_a_budget_and_fail() -> None:
    """Hostile METADATA (it may be 16 MiB): each distinct marker is judged once, over only the
    variables it names, and at most MARKER_BUDGET of them; the rest fail the check, said (judging
    every marker for each of an ``any`` wheel's 192 machines took 17 s for 3,000 lines)."""
    lines = [f'nvidia-x{i}; python_version < "3" and platform_machine != "m{i}"' for i in range(5000)]
    msgs = failing(packages.check(contents(metadata=meta(*lines), platform_tags=("any",)), cuda()))
    assert any(f"{5000 - packages.MARKER_BUDGET} more were not judged" in m for m in msgs)
    never, over = packages.never_installed(
        packages.declared_requirements(meta(*lines))[0], packages.target_environments(("py3",), ("any",))
    )
    assert len(never) == packages.MARKER_BUDGET and over == 5000 - packages.MARKER_BUDGET


def test_cu11_runtime_on_cu130() -> None:
    msgs = audit_packages("nvidia-cuda-runtime-cu11")
    assert (
        "declares 'nvidia-cuda-runtime-cu11', a CUDA 11 package, but this wheel's train is CUDA 13.0" in msgs
    )
    assert any(m.startswith("does not declare nvidia-cuda-runtime (or cuda-toolkit[cudart])") for m in msgs)


def test_pin_contradicting_the_train() -> None:
    assert audit_packages("nvidia-cuda-runtime==12.*") == [
        "'nvidia-cuda-runtime==12.*' pins a version outside CUDA 13.0 (==12.*); the wheel was built for CUDA 13.0"
    ]


def test_other_cuda_packages_fail() -> None:
    msgs = audit_packages("nvidia-cuda-runtime", "nvidia-cublas", "cuda-bindings>=13")
    assert len(msgs) == 2 and all("not in the CUDA 13.0 set" in m for m in msgs)


def test_toolkit_extras_beyond_the_set_fail() -> None:
    msgs = audit_packages("cuda-toolkit[cudart,cublas]==13.0.3")
    assert msgs == [
        "'cuda-toolkit[cudart,cublas]==13.0.3' also pulls in ['cublas'], which the CUDA 13.0 set does not list"
    ]


def test_toolkit_extras_accounted_for_by_other_packages() -> None:
    cublas = CudaPackage("nvidia-cublas", ("cuda-toolkit[cublas]",), ("libcublas.so.13",), "nvidia/cu13/lib")
    exp = cuda(packages=(RUNTIME, cublas))
    assert audit_packages("cuda-toolkit[cudart,cublas]==13.0.3", exp=exp) == []


def test_toolkit_without_cudart_is_not_the_runtime() -> None:
    msgs = audit_packages("cuda-toolkit[cublas]==13.0.3")
    assert any("not in the CUDA 13.0 set" in m for m in msgs)
    assert any(m.startswith("does not declare nvidia-cuda-runtime") for m in msgs)


def test_cpu_wheel_declares_no_cuda_package() -> None:
    assert audit_packages("numpy", exp=CPU) == []
    msgs = audit_packages(
        "nvidia-cuda-runtime==13.0.*", "cuda-python", 'nvidia-nccl-cu12; extra == "dist"', exp=CPU
    )
    assert len(msgs) == 2 and all("CPU wheel declares the CUDA package" in m for m in msgs)


def test_no_metadata_and_bad_requirement() -> None:
    assert failing(packages.check(contents(metadata=None), cuda())) == [
        "the wheel has no readable .dist-info/METADATA: cannot tell what it declares"
    ]
    assert "Requires-Dist 'nvidia-cuda-runtime ==' is not a valid requirement" in audit_packages(
        "nvidia-cuda-runtime", "nvidia-cuda-runtime =="
    )


# --------------------------------------------------------------------------- loader


@pytest.mark.parametrize(
    ("entry", "origin", "expected"),
    [
        ("$ORIGIN/../../nvidia/cu13/lib", "pkg/lib", "nvidia/cu13/lib"),
        ("${ORIGIN}/../../nvidia/cu13/lib", "pkg/lib", "nvidia/cu13/lib"),
        ("$ORIGIN", "pkg/lib", "pkg/lib"),
        ("$ORIGIN/", "pkg", "pkg"),
        ("$ORIGIN/..", "pkg", ""),
        ("$ORIGIN/../..", "pkg", None),  # climbs out of site-packages
        ("$ORIGINAL/x", "pkg", None),
        ("/usr/local/cuda/lib64", "pkg", None),
        ("lib", "pkg", None),
    ],
)
def test_resolve(entry: str, origin: str, expected: str | None) -> None:
    assert runpath.resolve(entry, origin) == expected


def test_installed_dir() -> None:
    assert runpath.installed_dir("pkg/lib/libk.so") == "pkg/lib"
    assert runpath.installed_dir("pkg-1.0.data/platlib/pkg/lib/libk.so") == "pkg/lib"
    assert runpath.installed_dir("pkg-1.0.data/scripts/tool") is None


@pytest.mark.parametrize(
    ("soname", "cuda", "driver"),
    [
        ("libcudart.so.13", True, False),
        ("libcublasLt.so.13", True, False),
        ("libcudnn_ops.so.9", True, False),
        ("libcudart-1a2b3c4d.so.13", True, False),  # a repair's grafted copy
        ("libcuda.so.1", True, True),
        ("libnvidia-ml.so.1", True, True),
        ("libc.so.6", False, False),
        ("libcudaext.so", False, False),
    ],
)
def test_cuda_library_names(soname: str, cuda: bool, driver: bool) -> None:
    assert loader.is_cuda_library(soname) is cuda
    assert loader.is_driver_library(soname) is driver


def test_reaches_the_runtime_where_the_package_installs_it() -> None:
    found = loader.check(contents(lib("pkg/lib/libk.so", fatbin("sm_80"))), cuda())
    assert [f.ok for f in found] == [True]
    assert found[0].details["reached"] == [
        "pkg/lib/libk.so -> libcudart.so.13 via $ORIGIN/../../nvidia/cu13/lib = nvidia/cu13/lib (nvidia-cuda-runtime)"
    ]


def test_missing_search_path() -> None:
    assert failing(loader.check(contents(lib("pkg/lib/libk.so", info=elf(runpath=()))), cuda())) == [
        "libk.so needs libcudart.so.13 from nvidia-cuda-runtime (installed to nvidia/cu13/lib) but has no "
        "RPATH/RUNPATH: it loads only where the system's loader cache happens to hold libcudart.so.13; "
        "add '$ORIGIN/../../nvidia/cu13/lib'"
    ]


def test_search_path_elsewhere() -> None:
    msgs = failing(
        loader.check(
            contents(lib("pkg/lib/libk.so", info=elf(runpath=("$ORIGIN/../nvidia/cu13/lib",)))), cuda()
        )
    )
    assert msgs == [
        "libk.so needs libcudart.so.13 from nvidia-cuda-runtime (installed to nvidia/cu13/lib) but its RUNPATH "
        "['$ORIGIN/../nvidia/cu13/lib'] resolves to ['pkg/nvidia/cu13/lib'], not nvidia/cu13/lib; "
        "add '$ORIGIN/../../nvidia/cu13/lib'"
    ]


def test_absolute_and_relative_entries_fail_in_any_library() -> None:
    info = elf(needed=("libc.so.6",), runpath=(RPATH, "/usr/local/cuda/lib64", "/tmp/build/lib", "lib"))
    msgs = failing(loader.check(contents(lib("pkg/_ext.so", info=info)), CPU))
    assert len(msgs) == 3
    assert (
        "absolute RUNPATH entry '/usr/local/cuda/lib64'" in msgs[0]
        and "installed at /usr/local/cuda" in msgs[0]
    )
    assert "temporary build directory" in msgs[1]
    assert "working directory" in msgs[2]


@pytest.mark.parametrize(
    ("entry", "toolkit"),
    [
        ("/usr/local/cuda/lib64", "/usr/local/cuda"),  # nvidia-dali-cuda120 2.4.0's libdali.so
        ("/opt/rocm/lib", "/opt/rocm"),  # bitsandbytes 0.50.2's ROCm libraries
        ("/usr/local/cuda", "/usr/local/cuda"),
        ("/usr/local/cuda-12.1/targets/x86_64-linux/lib", None),  # the build's own toolkit release
        ("/usr/local/cudax/lib", None),
    ],
)
def test_a_system_toolkit_entry_is_named_as_the_users_toolkit(entry: str, toolkit: str | None) -> None:
    info = elf(needed=("libc.so.6",), runpath=(entry,))
    (msg,) = failing(loader.check(contents(lib("pkg/libk.so", info=info)), CPU))
    if toolkit is not None:
        assert (
            f"it points at whatever toolkit the user's machine has installed at {toolkit} (any release" in msg
        )
    else:
        assert "it points into the build machine's filesystem" in msg


def test_an_entry_repeated_is_one_finding() -> None:
    """cucim 26.10's libcucim.so.26 has RUNPATH ':::::::': one empty entry, one finding, not eight."""
    info = elf(needed=("libc.so.6",), runpath=("",) * 8 + ("/opt/x", "/opt/x"))
    msgs = failing(loader.check(contents(lib("pkg/libk.so", info=info)), CPU))
    assert len(msgs) == 2 and "has an empty RUNPATH entry ('::::::::/opt/x:/opt/x')" in msgs[0]
    assert "absolute RUNPATH entry '/opt/x'" in msgs[1]


def test_runpath_wins_over_rpath() -> None:
    info = elf(rpath=(RPATH,), runpath=("$ORIGIN",))
    assert any(
        "RUNPATH ['$ORIGIN']" in m
        for m in failing(loader.check(contents(lib("pkg/lib/libk.so", info=info)), cuda()))
    )
    rpath_only = elf(rpath=(RPATH,), runpath=())
    assert not failing(loader.check(contents(lib("pkg/lib/libk.so", info=rpath_only)), cuda()))


def test_driver_needs_no_search_path() -> None:
    info = elf(needed=("libcudart.so.13", "libcuda.so.1"))
    assert not failing(loader.check(contents(lib("pkg/lib/libk.so", info=info)), cuda()))


def test_undeclared_cuda_library() -> None:
    info = elf(needed=("libcudart.so.13", "libcublas.so.13"))
    assert failing(loader.check(contents(lib("pkg/lib/libk.so", info=info)), cuda())) == [
        "libk.so needs libcublas.so.13, which neither the wheel nor a declared CUDA package of the row "
        "(nvidia-cuda-runtime) provides; for CUDA 13 nvidia-cublas ships it (installs to nvidia/cu13/lib): "
        "declare it"
    ]


def test_cuda_library_shipped_in_the_wheel_is_its_own() -> None:
    info = elf(needed=("libcublasLt.so.13",), runpath=("$ORIGIN",))
    lt = lib("nvidia/cu13/lib/libcublasLt.so.13", info=elf(needed=("libc.so.6",), runpath=("$ORIGIN",)))
    found = loader.check(contents(lib("nvidia/cu13/lib/libcublas.so.13", info=info), lt), cuda())
    assert not failing(found)


def test_a_sibling_the_search_path_misses_is_named_as_shipped() -> None:
    """Must fail, naming the sibling: shipped beside the library, but the loader does not look there."""
    sibling = lib("pkg/lib/libcublasLt.so.13", info=elf(needed=("libc.so.6",), runpath=("$ORIGIN",)))
    for entries in ((), ("$ORIGIN/../other",)):
        info = elf(needed=("libcublasLt.so.13",), runpath=entries)
        (msg,) = failing(loader.check(contents(lib("pkg/lib/libk.so", info=info), sibling), cuda()))
        assert msg.startswith(
            "libk.so needs libcublasLt.so.13, which the wheel ships (pkg/lib/libcublasLt.so.13)"
        )
        assert "neither the wheel" not in msg and msg.endswith("; add '$ORIGIN'")
        assert (
            "RUNPATH ['$ORIGIN/../other'] does not reach pkg/lib" if entries else "no RPATH/RUNPATH"
        ) in msg


def test_a_sibling_the_search_path_reaches_passes() -> None:
    sibling = lib("pkg/lib/libcublasLt.so.13", info=elf(needed=("libc.so.6",), runpath=("$ORIGIN",)))
    info = elf(needed=("libcublasLt.so.13",), runpath=("$ORIGIN/../lib",))
    assert not failing(loader.check(contents(lib("pkg/ext/libk.so", info=info), sibling), cuda()))


def test_the_package_named_is_of_the_sonames_own_cuda_major() -> None:
    """A wheel of libraries for several CUDA releases (bitsandbytes): libcudart.so.12 is CUDA 12's, on any train."""
    info = elf(needed=("libcudart.so.12",), runpath=())
    (msg,) = failing(loader.check(contents(lib("pkg/lib/libk_cuda128.so", info=info)), cuda(packages=())))
    assert msg.endswith(
        "; for CUDA 12 nvidia-cuda-runtime-cu12 ships it (installs to nvidia/cuda_runtime/lib): declare it"
    )


def test_grafted_runtime_copy_fails() -> None:
    info = elf(needed=("libcudart-1a2b3c4d.so.13",), runpath=("$ORIGIN/../../pkg.libs",))
    graft = lib("pkg.libs/libcudart-1a2b3c4d.so.13", info=elf(needed=()))
    msgs = failing(loader.check(contents(lib("pkg/lib/libk.so", info=info), graft), cuda()))
    assert msgs == [
        "libk.so needs libcudart-1a2b3c4d.so.13, a renamed copy of libcudart.so.13 (a repair grafted it into "
        "the wheel), but the row is CUDA 13.0, whose nvidia-cuda-runtime installs libcudart.so.13; repair with "
        "--exclude 'libcudart.so*'"
    ]


def test_cuda12_runtime_on_a_cuda13_row_is_named_as_such() -> None:
    """Not "a renamed copy of libcudart.so.13": CUDA 12's runtime, from a CUDA 12 build."""
    info = elf(needed=("libcudart.so.12",), runpath=("$ORIGIN/../../nvidia/cu13/lib",))
    msgs = failing(loader.check(contents(lib("pkg/lib/libk.so", info=info)), cuda()))
    assert msgs == [
        "libk.so needs libcudart.so.12, the CUDA runtime of CUDA 12 (libcudart.so.12, from "
        "nvidia-cuda-runtime-cu12), but the row is CUDA 13.0, whose nvidia-cuda-runtime installs "
        "libcudart.so.13; the library was built against CUDA 12; rebuild it with the CUDA 13.0 toolkit"
    ]
    assert "renamed" not in msgs[0]


def test_unknown_runtime_soname_is_not_called_a_copy() -> None:
    info = elf(needed=("libcudart.so.99",), runpath=("$ORIGIN/../../nvidia/cu13/lib",))
    (msg,) = failing(loader.check(contents(lib("pkg/lib/libk.so", info=info)), cuda()))
    assert "no CUDA release in wheelwright's table ships for the CUDA runtime" in msg
    assert "renamed" not in msg


def test_cpu_wheel_links_no_cuda() -> None:
    msgs = failing(loader.check(contents(lib("pkg/lib/libk.so")), CPU))
    assert msgs == [
        "libk.so links the CUDA library libcudart.so.13, but this is a CPU wheel; the CPU wheel links no CUDA"
    ]
    assert not failing(loader.check(contents(lib("pkg/lib/libk.so", info=elf(needed=("libm.so.6",)))), CPU))


def test_exclusion_patterns_cover_the_cuda_libraries() -> None:
    pats = loader.exclusion_patterns((RUNTIME,))
    assert (
        "libcudart.so*" in pats
        and "libcuda.so*" in pats
        and "libcudnn*.so*" in pats
        and "libcudart.so.13" in pats
    )
