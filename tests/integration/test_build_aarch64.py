"""aarch64 rows built on this x86_64 machine by the host backend's cross build (real compilers,
real nvcc, real auditwheel, real cuobjdump): the wheel is the row's, byte for byte what the audit
then holds to the same rules as an x86_64 wheel."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

import pytest
from helpers.rows import rows_by_id
from helpers.text import edited

from release.binary.cuobjdump import ensure_cuobjdump, list_device_code
from release.binary.elf import read_elf
from release.core.machine import default_cache_dir
from release.resources.cpus import host_arch
from release.wheelbuild.run import build_row

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        host_arch() != "x86_64", reason="a cross build from x86_64 (native aarch64 builds natively)"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "rows.toml"
ROWS = rows_by_id(POLICY)
CACHE = default_cache_dir(os.environ)
KERNELS = "tinyaxpy/lib/libtinyaxpy_kernels.so"
EM_AARCH64 = 183


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}


def _libraries(wheel: Path, into: Path) -> dict[str, Path]:
    with zipfile.ZipFile(wheel) as zf:
        zf.extractall(into)
        return {n: into / n for n in zf.namelist() if ".so" in Path(n).name}


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("aarch64-linux-gnu-g++") is None:
        pytest.fail("aarch64-linux-gnu-g++ is missing: scripts/setup.sh installs g++-aarch64-linux-gnu")
    return tmp_path_factory.mktemp("dist-aarch64")


def test_a_cu130_aarch64_row_carries_exactly_its_rows_device_code_in_aarch64_libraries(
    dist: Path, tmp_path: Path
) -> None:
    row = ROWS["cu130-py312-aarch64"]
    (built,) = build_row(row, policy_path=POLICY, dist_dir=dist, cache_dir=CACHE, backend="host", env=_env())
    wheel = built.wheel
    assert wheel.name == "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_aarch64.whl"
    libs = _libraries(wheel, tmp_path)
    assert set(libs) == {KERNELS, "tinyaxpy/_tinyaxpy.cpython-312-aarch64-linux-gnu.so"}
    for name, path in libs.items():
        assert read_elf(path).machine == EM_AARCH64, name
    kernels = read_elf(libs[KERNELS])
    assert "libcudart.so.13" in kernels.needed
    assert kernels.runpath == ("$ORIGIN/../../nvidia/cu13/lib",)
    # the seed's aarch64 CUDA 13 list, 9.0;10.0;11.0+PTX, by cuobjdump: nothing more, nothing less
    listed = list_device_code(libs[KERNELS], cuobjdump=ensure_cuobjdump(CACHE))
    assert sorted(listed) == sorted(
        [("sass", "sm_90"), ("sass", "sm_100"), ("sass", "sm_110"), ("ptx", "compute_110")]
    )
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read("tinyaxpy-0.3.0+cu130.dist-info/METADATA").decode()
        tags = zf.read("tinyaxpy-0.3.0+cu130.dist-info/WHEEL").decode()
    assert "Requires-Dist: nvidia-cuda-runtime==13.0.*" in meta
    assert "Tag: cp312-cp312-manylinux_2_28_aarch64" in tags
    assert "x86_64" not in tags


def test_a_cpu_aarch64_row_is_an_aarch64_cpu_wheel(dist: Path, tmp_path: Path) -> None:
    row = ROWS["cpu-py311-aarch64"]
    (built,) = build_row(row, policy_path=POLICY, dist_dir=dist, cache_dir=CACHE, backend="host", env=_env())
    assert built.wheel.name == "tinyaxpy-0.3.0-cp311-cp311-manylinux_2_28_aarch64.whl"
    libs = _libraries(built.wheel, tmp_path)
    assert libs and all(read_elf(p).machine == EM_AARCH64 for p in libs.values())
    assert not any("cudart" in n for p in libs.values() for n in read_elf(p).needed)


def test_a_foreign_row_without_cross_compilers_says_what_to_install(dist: Path, tmp_path: Path) -> None:
    """Must-fail: no aarch64-linux-gnu-g++ on PATH; the build stops before anything, naming the package."""
    from release.core.errors import ToolError

    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("python3", "git", "g++", "gcc"):
        found = shutil.which(tool)
        if found:
            (bare / tool).symlink_to(found)
    env = {**_env(), "PATH": str(bare)}
    with pytest.raises(ToolError, match="apt-get install g\\+\\+-aarch64-linux-gnu"):
        build_row(
            ROWS["cpu-py312-aarch64"],
            policy_path=POLICY,
            dist_dir=dist,
            cache_dir=CACHE,
            backend="host",
            env=env,
        )
    assert not list((dist / "cpu").glob("*cp312*aarch64*.whl"))


# lazysaxpy's policy for aarch64 too: its trains with the seed's aarch64 image and arch list
LAZY_AARCH64 = (
    ('platforms = ["x86_64"]', 'platforms = ["x86_64", "aarch64"]'),
    (
        'builder_image = { x86_64 = "pytorch/manylinux2_28-builder:cuda13.0" }',
        'builder_image = { x86_64 = "pytorch/manylinux2_28-builder:cuda13.0", '
        'aarch64 = "pytorch/manylinuxaarch64-builder:cuda13.0" }\ngpu_archs.aarch64 = ["9.0", "10.0", "11.0+PTX"]',
    ),
    (
        'builder_image = { x86_64 = "pytorch/manylinux2_28-builder:cuda13.2" }',
        'builder_image = { x86_64 = "pytorch/manylinux2_28-builder:cuda13.2", '
        'aarch64 = "pytorch/manylinuxaarch64-builder:cuda13.2" }\ngpu_archs.aarch64 = ["9.0", "10.0", "11.0+PTX"]',
    ),
)


def test_a_cmake_project_cross_built_for_aarch64_finds_its_cuda_compiler_and_carries_device_code(
    dist: Path, tmp_path: Path
) -> None:
    """scikit-build-core + CMake (examples/lazysaxpy): CMake's CUDA compiler check links the static
    runtime; without ``libcudart_static.a`` for aarch64 in the cross CUDA_HOME the check failed and
    lazysaxpy quietly built its CPU fallback into a +cu130 wheel (the audit failed it: no device
    code). With it, the row's exact device code, in an aarch64 library."""
    project = tmp_path / "lazysaxpy"
    shutil.copytree(
        ROOT / "examples" / "lazysaxpy", project, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info")
    )
    policy = project / "rows.toml"
    text = policy.read_text(encoding="utf-8")
    for edit in LAZY_AARCH64:
        text = edited(text, edit)
    policy.write_text(text, encoding="utf-8")
    row = rows_by_id(policy)["cu130-py312-aarch64"]
    (built,) = build_row(row, policy_path=policy, dist_dir=dist, cache_dir=CACHE, backend="host", env=_env())
    assert built.wheel.name == "lazysaxpy-0.1.0+cu130-py3-none-manylinux_2_28_aarch64.whl"
    libs = _libraries(built.wheel, tmp_path / "unpacked")
    kernels = libs["lazysaxpy/liblazysaxpy_kernels.so"]
    assert read_elf(kernels).machine == EM_AARCH64
    assert "libcudart.so.13" in read_elf(kernels).needed
    listed = list_device_code(kernels, cuobjdump=ensure_cuobjdump(CACHE))
    assert sorted(listed) == sorted(
        [("sass", "sm_90"), ("sass", "sm_100"), ("sass", "sm_110"), ("ptx", "compute_110")]
    )


def test_a_torch_extension_is_refused_a_cross_build_before_anything_is_built(
    dist: Path, tmp_path: Path
) -> None:
    """Must-fail: torch in [build-system].requires. Cross-built, it compiled for a minute and then the
    linker skipped the build environment's x86_64 libtorch ("cannot find -lc10"); now the build
    stops at once, naming the requirement and the backend that can build it."""
    from release.core.errors import ToolError

    project = tmp_path / "torchsaxpy"
    shutil.copytree(
        ROOT / "examples" / "torchsaxpy",
        project,
        ignore=shutil.ignore_patterns("build", "dist", "*.egg-info"),
    )
    policy = project / "rows.toml"
    text = edited(
        policy.read_text(encoding="utf-8"), ('platforms = ["x86_64"]', 'platforms = ["x86_64", "aarch64"]')
    )
    policy.write_text(edited(text, LAZY_AARCH64[1]), encoding="utf-8")
    with pytest.raises(ToolError, match=r"cannot be cross-compiled .* its build requires 'torch") as caught:
        build_row(
            rows_by_id(policy)["cu130-py311-aarch64"],
            policy_path=policy,
            dist_dir=dist,
            cache_dir=CACHE,
            backend="host",
            env=_env(),
        )
    assert "--backend container" in str(caught.value) and "libtorch" in str(caught.value)
    assert not list(dist.glob("**/torchsaxpy-*.whl"))


# a package whose build links a library it makes with this machine's compiler (as a build
# requirement with native libraries would bring it): the cross link must skip it
LINKS_HOST_LIBRARY = {
    "pyproject.toml": '[build-system]\nrequires = ["setuptools>=64"]\nbuild-backend = "setuptools.build_meta"\n\n'
    '[project]\nname = "hostlink"\nversion = "0.1.0"\n',
    "setup.py": """\
import subprocess
from pathlib import Path
from setuptools import Extension, setup

lib = Path("hostlib").resolve()
lib.mkdir(exist_ok=True)
(lib / "helper.c").write_text("int helper(void) { return 1; }\\n")
subprocess.run(["/usr/bin/gcc", "-shared", "-fPIC", str(lib / "helper.c"), "-o", str(lib / "libhelper.so")], check=True)
setup(
    packages=["hostlink"],
    ext_modules=[Extension("hostlink._core", ["core.c"], library_dirs=[str(lib)], libraries=["helper"])],
)
""",
    "core.c": '#include <Python.h>\nint helper(void);\nstatic struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "_core"};\n'
    "PyMODINIT_FUNC PyInit__core(void) { helper(); return PyModule_Create(&d); }\n",
    "hostlink/__init__.py": "",
}


def test_a_cross_link_against_this_machines_library_says_so(dist: Path, tmp_path: Path) -> None:
    """Must-fail, with the real cross linker: the extension links an x86_64 library of the build;
    the failure's first line says the link needs this machine's libraries, naming the library."""
    from release.core.errors import StepFailed

    project = tmp_path / "hostlink"
    for name, body in LINKS_HOST_LIBRARY.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(body, encoding="utf-8")
    text = POLICY.read_text(encoding="utf-8")
    start, end = text.index("[project]"), text.index("[matrix]")
    project_table = (
        '[project]\nname = "hostlink"\npath = "."\nimport_name = "hostlink"\ncheck = "hostlink:check"\n\n'
    )
    (project / "rows.toml").write_text(text[:start] + project_table + text[end:], encoding="utf-8")
    with pytest.raises(StepFailed) as caught:
        build_row(
            rows_by_id(project / "rows.toml")["cpu-py312-aarch64"],
            policy_path=project / "rows.toml",
            dist_dir=dist,
            cache_dir=CACHE,
            backend="host",
            env=_env(),
        )
    first = str(caught.value).splitlines()[0]
    assert (
        "the link needs libraries of this machine's architecture, not aarch64: libhelper.so (-lhelper"
        in first
    )
    assert "--backend container" in first
    assert "cannot find -lhelper" in str(caught.value)  # the linker's own words follow
