"""The CUDA repair's decisions (release/wheelbuild/repair/contract.py) and the deterministic wheel writer,
as pure functions over facts: each rule shown passing and failing."""

from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.core.errors import InputError
from release.policy.model import Dependency
from release.wheelbuild.repair.contract import (
    ContractError,
    Library,
    RowContract,
    WheelFacts,
    channels_for,
    decide,
    edit_metadata,
    required_entry,
    row_contract,
)
from release.wheelbuild.repair.wheelfile import (
    epoch_date,
    install_path,
    member_order,
    member_problem,
    record_hash,
    record_text,
    rewrite,
)

ROWS = rows_by_id()
CU130 = row_contract(ROWS["cu130-py312-x86_64"])
CU126 = row_contract(ROWS["cu126-py312-x86_64"])
CPU = row_contract(ROWS["cpu-py312-x86_64"])

METADATA = (
    "Metadata-Version: 2.4\nName: pkg\nVersion: 0.1.0\nRequires-Python: >=3.10\n\nLong\n\ndescription\n"
)


def lib(member: str = "pkg/libk.so", **kw: object) -> Library:
    base: dict[str, object] = {
        "member": member,
        "installs_to": member,
        "needed": ("libcudart.so.13", "libc.so.6"),
        "runpath": (),
        "rpath": (),
        "registers_device_code": True,
        "has_device_code": True,
        "runtime_inside": False,
    }
    base.update(kw)
    return Library(**base)  # type: ignore[arg-type]


def facts(
    *libs: Library,
    filename: str = "pkg-0.1.0-cp312-cp312-manylinux_2_28_x86_64.whl",
    metadata: str = METADATA,
) -> WheelFacts:
    return WheelFacts(filename, "pkg-0.1.0.dist-info", None, metadata, libs)


# --------------------------------------------------------------------------- the row's contract


def test_a_plain_wheel_gets_the_label_the_runtime_and_a_runpath() -> None:
    fix = decide(facts(lib()), CU130)
    assert fix.version == "0.1.0+cu130"
    assert fix.requires == ("nvidia-cuda-runtime==13.0.*",)
    assert fix.runpaths == (("pkg/libk.so", ("$ORIGIN/../nvidia/cu13/lib",)),)
    assert fix.needed


def test_cuda_12_places_the_runtime_in_its_own_folder() -> None:
    fix = decide(facts(lib(needed=("libcudart.so.12",))), CU126)
    assert fix.requires == ("nvidia-cuda-runtime-cu12==12.6.*",)
    assert fix.runpaths == (("pkg/libk.so", ("$ORIGIN/../nvidia/cuda_runtime/lib",)),)


def test_a_wheel_that_satisfies_the_contract_needs_no_change() -> None:
    ok = facts(
        lib("pkg/lib/libk.so", runpath=("$ORIGIN/../../nvidia/cu13/lib",)),
        filename="pkg-0.1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        metadata=METADATA.replace("Version: 0.1.0", "Version: 0.1.0+cu130").replace(
            "Requires-Python: >=3.10", "Requires-Python: >=3.10\nRequires-Dist: nvidia-cuda-runtime==13.0.*"
        ),
    )
    fix = decide(ok, CU130)
    assert not fix.needed and fix.notes == ()


@pytest.mark.parametrize(
    "declared",
    [
        "nvidia-cuda-runtime",
        "nvidia_cuda_runtime>=13",
        "cuda-toolkit[cudart,cublas]==13.0.3",
        'nvidia-cuda-runtime; sys_platform == "linux"',
    ],
)
def test_every_accepted_form_of_the_runtime_counts_as_declared(declared: str) -> None:
    meta = METADATA.replace("Requires-Python: >=3.10", f"Requires-Python: >=3.10\nRequires-Dist: {declared}")
    assert decide(facts(lib(), metadata=meta), CU130).requires == ()


@pytest.mark.parametrize(
    "declared",
    ["cuda-toolkit[cublas]==13.0.3", "nvidia-cuda-runtime-cu12", 'nvidia-cuda-runtime; extra == "gpu"'],
)
def test_a_requirement_that_does_not_bring_the_runtime_does_not_count(declared: str) -> None:
    meta = METADATA.replace("Requires-Python: >=3.10", f"Requires-Python: >=3.10\nRequires-Dist: {declared}")
    assert decide(facts(lib(), metadata=meta), CU130).requires == ("nvidia-cuda-runtime==13.0.*",)


def test_a_dependency_channel_brings_the_runtime_instead() -> None:
    row = ROWS["cu130-py312-x86_64"]
    deps = (
        Dependency("torch", "pypi", (), ("cu130",)),
        Dependency("other", "pypi", (), ("cu126",)),
        Dependency("armonly", "pypi", ("aarch64",), ()),
    )
    assert channels_for(row, deps) == ("torch",)
    assert channels_for(ROWS["cpu-py312-x86_64"], deps) == ()
    contract = row_contract(row, deps)
    assert decide(facts(lib()), contract).requires == ("torch",)
    meta = METADATA.replace(
        "Requires-Python: >=3.10", "Requires-Python: >=3.10\nRequires-Dist: torch==2.14.1"
    )
    fix = decide(facts(lib(), metadata=meta), contract)
    assert fix.requires == () and fix.runpaths  # the RUNPATH still reaches the runtime torch installs


def test_runpath_is_relative_to_where_the_library_lands() -> None:
    assert required_entry("pkg/lib/libk.so", "nvidia/cu13/lib") == "$ORIGIN/../../nvidia/cu13/lib"
    assert required_entry("libtop.so", "nvidia/cu13/lib") == "$ORIGIN/nvidia/cu13/lib"
    data = dataclasses.replace(
        facts(lib("pkg-0.1.0.data/platlib/pkg/sub/libk.so", installs_to="pkg/sub/libk.so")),
        data_dir="pkg-0.1.0.data",
    )
    (change,) = decide(data, CU130).runpaths
    assert change == ("pkg-0.1.0.data/platlib/pkg/sub/libk.so", ("$ORIGIN/../../nvidia/cu13/lib",))


def test_existing_origin_entries_stay_and_foreign_ones_go() -> None:
    mixed = lib(runpath=("$ORIGIN", "/usr/local/cuda-13.0/lib64", "build/lib"))
    (change,) = decide(facts(mixed), CU130).runpaths
    assert change == ("pkg/libk.so", ("$ORIGIN", "$ORIGIN/../nvidia/cu13/lib"))
    # an RPATH (not RUNPATH) that reaches the runtime already counts, spelled ${ORIGIN} too
    reached = lib(rpath=("${ORIGIN}/../nvidia/cu13/lib/",))
    assert decide(facts(reached), CU130).runpaths == ()
    # an absolute entry beside the right one is still dropped
    both = lib(runpath=("$ORIGIN/../nvidia/cu13/lib", "/opt/cuda/lib64"))
    assert decide(facts(both), CU130).runpaths == (("pkg/libk.so", ("$ORIGIN/../nvidia/cu13/lib",)),)


def test_libraries_that_need_nothing_of_cuda_are_left_alone() -> None:
    plain = lib("pkg/_ext.so", needed=("libc.so.6",), registers_device_code=False, has_device_code=False)
    driver = lib("pkg/_drv.so", needed=("libcuda.so.1",), registers_device_code=False, has_device_code=False)
    assert decide(facts(plain, driver), CU130).runpaths == ()


def test_a_statically_linked_runtime_is_refused_naming_the_library() -> None:
    static = lib(needed=("libstdc++.so.6", "libc.so.6"))
    with pytest.raises(ContractError) as info:
        decide(facts(static), CU130)
    assert "pkg/libk.so links the CUDA runtime statically" in str(info.value)
    assert "CMAKE_CUDA_RUNTIME_LIBRARY=Shared" in str(info.value)
    assert info.value.return_code == 4
    # the runtime's code inside without device code: the same
    with pytest.raises(ContractError, match="statically"):
        decide(facts(lib(needed=("libc.so.6",), registers_device_code=False, runtime_inside=True)), CU130)
    # a row whose policy names no runtime package does not ask for a shared one
    no_runtime = dataclasses.replace(CU130, packages=())
    assert decide(facts(static), no_runtime).runpaths == ()


def test_a_cuda_library_no_package_provides_is_refused() -> None:
    with pytest.raises(
        ContractError,
        match=r"pkg/libk.so needs libcudla.so.1 \(cuDLA\), which no pip package provides for CUDA 13",
    ):
        decide(facts(lib(needed=("libcudart.so.13", "libcudla.so.1"))), CU130)


def test_a_cuda_library_of_another_major_is_refused() -> None:
    with pytest.raises(
        ContractError, match=r"needs the CUDA runtime of CUDA 12 .* but row cu130-py312-x86_64 is CUDA 13.0"
    ):
        decide(facts(lib(needed=("libcudart.so.12",))), CU130)


def test_other_cuda_libraries_come_from_the_cuda_table() -> None:
    fix = decide(facts(lib(needed=("libcudart.so.13", "libcublas.so.13"))), CU130)
    assert fix.runpaths == (("pkg/libk.so", ("$ORIGIN/../nvidia/cu13/lib",)),)  # one folder, once
    fix12 = decide(facts(lib(needed=("libcudart.so.12", "libcublas.so.12"))), CU126)
    assert fix12.runpaths == (
        ("pkg/libk.so", ("$ORIGIN/../nvidia/cuda_runtime/lib", "$ORIGIN/../nvidia/cublas/lib")),
    )


def test_labels_of_another_variant_are_refused() -> None:
    wrong = facts(lib(), filename="pkg-0.1.0+cu126-cp312-cp312-manylinux_2_28_x86_64.whl")
    with pytest.raises(ContractError, match=r"carries \+cu126; row cu130-py312-x86_64 needs \+cu130"):
        decide(wrong, CU130)
    with pytest.raises(ContractError, match="needs no local label"):
        decide(facts(filename="pkg-0.1.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"), CPU)


def test_a_cpu_wheel_with_cuda_in_it_is_refused() -> None:
    assert not decide(
        facts(lib(needed=("libc.so.6",), registers_device_code=False, has_device_code=False)), CPU
    ).needed
    with pytest.raises(ContractError) as info:
        decide(facts(lib()), CPU)
    text = str(info.value)
    assert "pkg/libk.so needs libcudart.so.13, but a CPU wheel needs no CUDA library" in text
    assert "carries device code" in text
    assert CPU.describe()[0].startswith("version without a local label")


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ContractError) as info:
        decide(facts(lib("a.so", needed=("libcudla.so.1",)), lib("b.so", needed=("libcudart.so.12",))), CU130)
    assert str(info.value).count("\n  - ") == 3  # a.so static + cudla; b.so wrong major


# --------------------------------------------------------------------------- METADATA


def test_edit_metadata_keeps_the_body_byte_for_byte() -> None:
    out = edit_metadata(METADATA, "0.1.0+cu130", ["nvidia-cuda-runtime==13.0.*"])
    assert out == (
        "Metadata-Version: 2.4\nName: pkg\nVersion: 0.1.0+cu130\nRequires-Python: >=3.10\n"
        "Requires-Dist: nvidia-cuda-runtime==13.0.*\n\nLong\n\ndescription\n"
    )
    with_dist = METADATA.replace("Requires-Python: >=3.10", "Requires-Dist: a\nRequires-Python: >=3.10")
    assert "Requires-Dist: a\nRequires-Dist: b\nRequires-Python" in edit_metadata(with_dist, None, ["b"])
    assert edit_metadata(METADATA, None, []) == METADATA
    # headers only, as setuptools writes a METADATA without a long description
    bare = "Metadata-Version: 2.4\nName: pkg\nVersion: 0.1.0\n"
    assert edit_metadata(bare, "0.1.0+cu130", ["x"]) == (
        "Metadata-Version: 2.4\nName: pkg\nVersion: 0.1.0+cu130\nRequires-Dist: x\n"
    )
    with pytest.raises(InputError, match="2 Version headers"):
        edit_metadata(METADATA.replace("Name: pkg", "Version: 9"), "1", [])


def test_the_contract_describes_itself_for_the_dry_run() -> None:
    text = "\n".join(CU130.describe())
    assert "+cu130" in text and "nvidia-cuda-runtime==13.0.*" in text and "nvidia/cu13/lib" in text
    assert isinstance(CU130, RowContract) and CU130.shared_runtime


# --------------------------------------------------------------------------- the wheel writer


def test_member_names_are_plain_relative_paths() -> None:
    for bad in ("/etc/passwd", "a/../b", "a//b", "./a", "a\\b", "", "a\x00b"):
        assert member_problem(bad) is not None, bad
    assert member_problem("pkg/lib/libk.so") is None and member_problem("pkg/") is None


def test_install_paths() -> None:
    assert install_path("pkg/x.so", "pkg-1.data") == "pkg/x.so"
    assert install_path("pkg-1.data/platlib/pkg/x.so", "pkg-1.data") == "pkg/x.so"
    assert install_path("pkg-1.data/purelib/x.so", "pkg-1.data") == "x.so"
    assert install_path("pkg-1.data/scripts/tool", "pkg-1.data") is None
    assert install_path("pkg-1.data/data/share/x.so", "pkg-1.data") is None


def test_order_record_and_epoch() -> None:
    names = ["z.py", "pkg-1.dist-info/RECORD", "pkg-1.dist-info/WHEEL", "a/b.so", "pkg-1.dist-info/METADATA"]
    assert member_order(names, "pkg-1.dist-info") == [
        "a/b.so",
        "z.py",
        "pkg-1.dist-info/METADATA",
        "pkg-1.dist-info/WHEEL",
        "pkg-1.dist-info/RECORD",
    ]
    text = record_text([("a/b.so", b"x"), ("d/", b"")], "pkg-1.dist-info/RECORD")
    assert text == f"a/b.so,{record_hash(b'x')},1\npkg-1.dist-info/RECORD,,\n"
    assert record_hash(b"") == "sha256=47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
    assert epoch_date(0) == (1980, 1, 1, 0, 0, 0)
    assert epoch_date(1700000000) == (2023, 11, 14, 22, 13, 20)


def _wheel(path: Path, members: dict[str, tuple[bytes, int]]) -> None:
    with zipfile.ZipFile(path, "w") as zf:
        for name, (data, mode) in members.items():
            info = zipfile.ZipInfo(name, (2024, 5, 6, 7, 8, 10))
            info.external_attr = (0o100000 | mode) << 16
            zf.writestr(info, data)


def _rewrite_unchanged(src: Path, out: Path) -> None:
    """``rewrite`` asked for nothing: the dist-info kept, no renames, no replacements, no epoch."""
    rewrite(src, out, dist_info="pkg-1.dist-info", renames={}, replace={}, epoch=None)


def test_rewrite_is_deterministic_and_keeps_modes(tmp_path: Path) -> None:
    members = {
        "pkg-1.dist-info/METADATA": (b"Metadata-Version: 2.4\nName: pkg\nVersion: 1\n", 0o644),
        "pkg/libk.so": (b"\x7fELF fake", 0o755),
        "pkg/__init__.py": (b"", 0o644),
        "pkg-1.dist-info/RECORD": (b"stale", 0o644),
        "pkg-1.dist-info/RECORD.jws": (b"signature", 0o644),
    }
    _wheel(tmp_path / "in.whl", members)
    outs = []
    for n in range(2):
        out = tmp_path / f"out{n}.whl"
        rewrite(
            tmp_path / "in.whl",
            out,
            dist_info="pkg-1+cu130.dist-info",
            renames={"pkg-1.dist-info": "pkg-1+cu130.dist-info"},
            replace={"pkg/libk.so": b"\x7fELF patched"},
            epoch=1700000000,
        )
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    with zipfile.ZipFile(io.BytesIO(outs[0])) as zf:
        assert zf.namelist() == [
            "pkg/__init__.py",
            "pkg/libk.so",
            "pkg-1+cu130.dist-info/METADATA",
            "pkg-1+cu130.dist-info/RECORD",
        ]
        info = zf.getinfo("pkg/libk.so")
        assert (info.external_attr >> 16) & 0o777 == 0o755 and info.date_time == (2023, 11, 14, 22, 13, 20)
        assert zf.read("pkg/libk.so") == b"\x7fELF patched"
        record = zf.read("pkg-1+cu130.dist-info/RECORD").decode()
        patched_hash = record_hash(b"\x7fELF patched")
        assert f"pkg/libk.so,{patched_hash},12" in record
        assert "RECORD.jws" not in record and "pkg-1.dist-info" not in record
    # no epoch: each member keeps its own time
    _rewrite_unchanged(tmp_path / "in.whl", tmp_path / "keep.whl")
    with zipfile.ZipFile(tmp_path / "keep.whl") as zf:
        assert zf.getinfo("pkg/libk.so").date_time == (2024, 5, 6, 7, 8, 10)


def test_rewrite_refuses_a_hostile_member(tmp_path: Path) -> None:
    _wheel(tmp_path / "bad.whl", {"../evil.so": (b"x", 0o644), "pkg-1.dist-info/METADATA": (b"", 0o644)})
    with pytest.raises(InputError, match=r"member '../evil.so' has an empty, '.' or '..' part"):
        _rewrite_unchanged(tmp_path / "bad.whl", tmp_path / "o.whl")
