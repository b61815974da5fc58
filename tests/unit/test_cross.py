"""The cross build's pure decisions: the target's sysconfig, its environment, the row selection's arch."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from helpers.rows import rows_by_id

from release.commands.options import selected_arch
from release.core.errors import ToolError
from release.route import MachineFacts, route
from release.wheelbuild.host.cross import (
    CrossTarget,
    config_settings,
    cross_env,
    linked_requirement_problem,
    nvcc_profile,
    runtime_pin,
    sysconfig_name,
    target_sysconfig,
)
from release.wheelbuild.host.link_check import link_diagnosis
from release.wheelbuild.host.meson_cross import meson_cross_text

ROOT = Path(__file__).resolve().parents[2]
ROWS = rows_by_id(ROOT / "rows.toml")

HOST_VARS = {
    "EXT_SUFFIX": ".cpython-312-x86_64-linux-gnu.so",
    "SOABI": "cpython-312-x86_64-linux-gnu",
    "MULTIARCH": "x86_64-linux-gnu",
    "HOST_GNU_TYPE": "x86_64-pc-linux-gnu",
    "CC": "gcc -pthread",
    "LDSHARED": "gcc -pthread -shared -L/opt/py/lib",
    "SIZEOF_VOID_P": 8,
    "prefix": "/opt/py",
}


def test_the_target_sysconfig_names_the_target_in_every_value() -> None:
    out = target_sysconfig(
        HOST_VARS, host="x86_64", target="aarch64", cc="/usr/bin/a-gcc", cxx="/usr/bin/a-g++"
    )
    assert out["EXT_SUFFIX"] == ".cpython-312-aarch64-linux-gnu.so"
    assert out["SOABI"] == "cpython-312-aarch64-linux-gnu"
    assert out["MULTIARCH"] == "aarch64-linux-gnu"
    assert out["HOST_GNU_TYPE"] == "aarch64-linux-gnu"
    assert out["CC"] == "/usr/bin/a-gcc -pthread"
    assert out["LDSHARED"] == "/usr/bin/a-gcc -pthread -shared -L/opt/py/lib"
    assert out["SIZEOF_VOID_P"] == 8 and out["prefix"] == "/opt/py"
    assert out["BUILD_GNU_TYPE"] == "x86_64-linux-gnu"  # the machine that builds
    assert not any("x86_64" in str(v) for k, v in out.items() if k != "BUILD_GNU_TYPE")


def test_the_cross_environment_names_compilers_platform_and_sysconfig(tmp_path: Path) -> None:
    target = CrossTarget(
        "aarch64",
        "aarch64-linux-gnu",
        Path("/x/gcc"),
        Path("/x/g++"),
        tmp_path,
        sysconfig_name("aarch64"),
        None,
    )
    env = cross_env(target)
    assert env["_PYTHON_HOST_PLATFORM"] == "linux-aarch64"
    assert env["_PYTHON_SYSCONFIGDATA_NAME"] == "_sysconfigdata__linux_aarch64-linux-gnu"
    assert env["PYTHONPATH"] == str(tmp_path)
    assert env["CXX"] == env["NVCC_CCBIN"] == env["CUDAHOSTCXX"] == "/x/g++"
    assert env["CC"] == "/x/gcc" and env["LDSHARED"] == "/x/gcc -shared"


def test_the_cross_nvcc_profile_uses_the_real_tools_and_the_targets_folders() -> None:
    text = nvcc_profile(Path("/usr/local/cuda-13.0"), Path("/c/cuda"), "aarch64")
    assert "TOP              = /usr/local/cuda-13.0" in text
    assert '"-I/c/cuda/targets/aarch64-linux/include"' in text
    assert '"-L/c/cuda/targets/aarch64-linux/lib"' in text
    assert "x86_64" not in text
    # the cross home's bin (its gcc/g++ name the cross compilers) before the toolkit's own:
    # nvcc 12.4 reads no NVCC_CCBIN, and Debian's toolkit carries gcc/g++ wrappers of its own
    assert "PATH            += $(CICC_PATH):/c/cuda/bin:/usr/local/cuda-13.0/bin:" in text


def test_a_foreign_row_needs_a_cross_build_and_the_trains_runtime_pin() -> None:
    row = ROWS["cu130-py312-aarch64"]
    assert route(row.platform, "host", MachineFacts("x86_64")).cross
    assert not route(row.platform, "host", MachineFacts("aarch64")).cross
    assert not route(ROWS["cu130-py312-x86_64"].platform, "host", MachineFacts("x86_64")).cross
    assert runtime_pin(row) == "nvidia-cuda-runtime==13.0.96"
    # a CUDA 12 train pins no PyPI toolchain: the runtime package the wheel declares, at the train
    assert runtime_pin(ROWS["cu126-py312-aarch64"]) == "nvidia-cuda-runtime-cu12==12.6.*"
    bare = dataclasses.replace(row, pypi_toolchain=(), cuda_packages=())
    with pytest.raises(
        ToolError, match="pins no nvidia-cuda-runtime in pypi_toolchain and declares no runtime"
    ):
        runtime_pin(bare)


@pytest.mark.parametrize(
    ("command", "given", "patterns", "env", "want"),
    [
        ("build", None, ["cu130-py312"], {}, "x86_64"),  # this machine's arch
        ("smoke", None, ["cu130-py312"], {}, "x86_64"),
        ("build", None, ["cu130-py312-aarch64"], {}, None),  # the glob names an arch
        ("build", "aarch64", [], {}, "aarch64"),
        ("build", "all", [], {}, None),
        ("release", None, [], {"WHEELWRIGHT_ARCH": "all"}, None),
        ("release", None, [], {"WHEELWRIGHT_ARCH": "aarch64"}, "aarch64"),
        ("release", "x86_64", [], {"WHEELWRIGHT_ARCH": "aarch64"}, "x86_64"),  # --arch wins
        ("plan", None, [], {}, None),  # plan and matrix show every arch
        ("matrix", None, ["cu130-*"], {}, None),
    ],
)
def test_the_selection_takes_the_machines_arch_unless_told(
    command: str, given: str | None, patterns: list[str], env: dict[str, str], want: str | None
) -> None:
    assert selected_arch(command, given, patterns, env, "x86_64") == want


def _runtime_wheel(path: Path, size: int) -> Path:
    import zipfile

    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("nvidia/cu13/lib/libcudart.so.13", b"\x7fELF" + b"\0" * (size - 4))
        zf.writestr("nvidia/cu13/lib/libcudart_static.a", b"!<arch>\n")
        zf.writestr("nvidia/cu13/include/cuda_runtime.h", b"/* header */")
    return path


def test_the_runtime_libraries_are_extracted_and_a_member_over_the_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from release.wheelbuild.host import cross

    monkeypatch.setattr(cross, "RUNTIME_MEMBER_CAP", 1000)
    ok = tmp_path / "ok"
    ok.mkdir()
    cross.extract_libraries(_runtime_wheel(tmp_path / "small.whl", 1000), ok)
    # the shared runtime and the static archive CMake's CUDA check links; headers are not libraries
    assert sorted(p.name for p in ok.iterdir()) == ["libcudart.so.13", "libcudart_static.a"]
    assert cross.static_runtime_note("nvidia-cuda-runtime==13.0.96", "aarch64", ok) is None
    (ok / "libcudart_static.a").unlink()  # the CUDA 12 runtime wheels ship none: said, with what it means
    note = cross.static_runtime_note("nvidia-cuda-runtime-cu12==12.4.*", "aarch64", ok)
    assert note is not None and "ships no libcudart_static.a" in note and "CMake" in note
    big = tmp_path / "big"
    big.mkdir()
    with pytest.raises(ToolError, match=r"libcudart\.so\.13 says 1001 bytes"):
        cross.extract_libraries(_runtime_wheel(tmp_path / "big.whl", 1001), big)
    assert list(big.iterdir()) == []


def test_the_meson_cross_file_names_the_target_and_its_tools() -> None:
    text = meson_cross_text(
        "aarch64", "aarch64-linux-gnu", Path("/usr/bin/aarch64-linux-gnu-gcc"), Path("/usr/bin/aarch64-linux-gnu-g++"),
        Path("/c/cuda/bin/nvcc"),
    )  # fmt: skip
    assert (
        "c = '/usr/bin/aarch64-linux-gnu-gcc'\n" in text
        and "cpp = '/usr/bin/aarch64-linux-gnu-g++'\n" in text
    )
    assert (
        "ar = '/usr/bin/aarch64-linux-gnu-ar'\n" in text
        and "strip = '/usr/bin/aarch64-linux-gnu-strip'\n" in text
    )
    assert "cuda = '/c/cuda/bin/nvcc'\n" in text
    assert (
        "[host_machine]\nsystem = 'linux'\ncpu_family = 'aarch64'\ncpu = 'aarch64'\nendian = 'little'\n"
        in text
    )
    cpu = meson_cross_text("aarch64", "aarch64-linux-gnu", Path("/x/gcc"), Path("/x/g++"), None)
    assert "cuda =" not in cpu
    quoted = meson_cross_text("aarch64", "t", Path("/it's/gcc"), Path("/x/g++"), None)
    assert "c = '/it\\'s/gcc'" in quoted  # a quote in a path cannot end meson's string


def test_only_meson_python_is_given_the_cross_file(tmp_path: Path) -> None:
    target = CrossTarget(
        "aarch64", "aarch64-linux-gnu", Path("/x/gcc"), Path("/x/g++"), tmp_path, sysconfig_name("aarch64"), None,
        tmp_path / "cross.ini",
    )  # fmt: skip
    assert config_settings("mesonpy", target) == {"setup-args": f"--cross-file={tmp_path / 'cross.ini'}"}
    for backend in ("setuptools", "scikit_build_core", "hatchling", "flit_core"):
        assert config_settings(backend, target) == {}  # they read the cross environment
    assert config_settings("mesonpy", None) == {}  # a native build


def test_a_build_requirement_the_extension_links_refuses_a_cross_build() -> None:
    problem = linked_requirement_problem(["setuptools>=64", "Torch>=2.9; python_version>='3.10'"], "aarch64")
    assert problem is not None and "libtorch" in problem
    assert "requires \"Torch>=2.9; python_version>='3.10'\"" in problem  # as the project wrote it
    assert "not for aarch64" in problem
    for fine in (
        ["setuptools", "pybind11>=2.12"],
        ["torchvision"],
        ["scikit-build-core", "not a requirement!"],
    ):
        assert linked_requirement_problem(fine, "aarch64") is None, fine


LD_SKIPPED = """\
/usr/lib/gcc-cross/aarch64-linux-gnu/12/../../../../aarch64-linux-gnu/bin/ld: skipping incompatible /e/site-packages/torch/lib/libc10.so when searching for -lc10
/usr/lib/gcc-cross/aarch64-linux-gnu/12/../../../../aarch64-linux-gnu/bin/ld: cannot find -lc10: No such file or directory
/usr/lib/gcc-cross/aarch64-linux-gnu/12/../../../../aarch64-linux-gnu/bin/ld: skipping incompatible /e/site-packages/torch/lib/libc10.so when searching for -lc10
/usr/lib/gcc-cross/aarch64-linux-gnu/12/../../../../aarch64-linux-gnu/bin/ld: skipping incompatible /e/site-packages/torch/lib/libtorch.so when searching for -ltorch
collect2: error: ld returned 1 exit status
"""


def test_a_cross_link_that_skipped_this_machines_libraries_is_said_so() -> None:
    text = link_diagnosis(LD_SKIPPED, "aarch64")
    assert text is not None
    assert (
        "libc10.so (-lc10, /e/site-packages/torch/lib/libc10.so)" in text and "libtorch.so (-ltorch" in text
    )
    assert text.count("libc10.so (") == 1  # each library once
    assert "--backend container" in text
    assert link_diagnosis("error: 'foo' was not declared in this scope\n", "aarch64") is None
