"""``gpu_coverage = "take"`` end to end: a small GPU dependency wheel made here (one kernel compiled by nvcc
for 8.0 and 9.0, wrapped in a wheel) stands in for torch; tinyaxpy's row says 8.0+PTX in rows.toml and
takes the dependency's list. The build compiles exactly 8.0;9.0+PTX, its record names the dependency wheel
it came from, and the audit of the row holds the wheel to that list and passes. Must fail: the dependency's
wheel missing, ``plan`` and ``build`` refuse before anything is built, naming the dependency, the row and
the key."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.elf import write_wheel
from helpers.proc import python_m, repo_env

from release.core.hashing import sha256_file
from release.coverage.compare import carried_targets
from release.coverage.dependency import cache_folder, read

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
ROW = "cu130-py312-x86_64"
DEPENDENCY = "wwtakefixture"  # a name no index publishes: the test's own wheel, removed from the cache after
KERNEL = """__global__ void dep_scale(float *x, float a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= a;
}
extern "C" void dep_launch(float *x, float a, int n) { dep_scale<<<(n + 255) / 256, 256>>>(x, a, n); }
"""


def _policy(folder: Path, package: str) -> Path:
    """tinyaxpy with one row (cu130, 3.12, x86_64: 8.0+PTX in rows.toml, the repository's 13.0 train
    otherwise) whose [[dependency]] ``package`` says gpu_coverage = "take"."""
    repo = (ROOT / "rows.toml").read_text(encoding="utf-8")
    train = repo[repo.index('[train."13.0"]') : repo.index('[train."13.2"]')]
    train = train.replace('gpu_archs.x86_64 = ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "12.0+PTX"]\n', "")
    train = train.replace('gpu_archs.aarch64 = ["9.0", "10.0", "11.0+PTX"]', 'gpu_archs.x86_64 = ["8.0+PTX"]')
    project = os.path.relpath(ROOT / "examples" / "tinyaxpy", folder)
    text = (
        f'schema_version = 1\n\n[project]\nname = "tinyaxpy"\npath = "{project}"\nimport_name = "tinyaxpy"\n'
        'check = "tinyaxpy:selftest"\n\n[matrix]\nplatforms = ["x86_64"]\npythons = ["3.12"]\n'
        'trains = ["13.0"]\ncpu_wheel = "disable"\nmanylinux = "manylinux_2_28"\nextra_variants = "reject"\n\n'
        f'{train}\n[[dependency]]\npackage = "{package}"\nindex = "pypi"\ngpu_coverage = "take"\n'
    )
    path = folder / f"{package}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def _dependency_wheel(folder: Path) -> Path:
    """A wheel holding one library with SASS for sm_80 and sm_90 and no PTX, built by nvcc here."""
    src = folder / "dep.cu"
    src.write_text(KERNEL, encoding="utf-8")
    lib = folder / "libwwdep.so"
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    gencode = ["-gencode=arch=compute_80,code=sm_80", "-gencode=arch=compute_90,code=sm_90"]
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", *gencode, str(src), "-o", str(lib)],
                   check=True, timeout=300, capture_output=True)  # fmt: skip
    return write_wheel(
        folder / "house",
        DEPENDENCY,
        {f"{DEPENDENCY}/libwwdep.so": lib.read_bytes()},
        tag="manylinux_2_28_x86_64",
    )


def _release(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return python_m("release", *args, cwd=cwd, env=repo_env(), timeout=1800)


@pytest.fixture(scope="module")
def taken(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, Path]]:
    """(policy, dependency wheel, built wheel): built once with --wheelhouse; the dependency wheel is also
    put in wheelwright's dependency-wheels cache for the audit (which has no --wheelhouse), then removed."""
    folder = tmp_path_factory.mktemp("take")
    dep = _dependency_wheel(folder)
    cached = cache_folder(os.environ) / dep.name
    cached.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(dep, cached)
    try:
        policy = _policy(folder, DEPENDENCY)
        dist = folder / "dist"
        build = _release(folder, "build", "--policy", str(policy), "--backend", "host", "--dist", str(dist),
                         "--wheelhouse", str(dep.parent), ROW)  # fmt: skip
        assert build.returncode == 0, build.stdout + build.stderr
        (wheel,) = dist.rglob("*.whl")
        yield policy, dep, wheel
    finally:
        cached.unlink(missing_ok=True)


@pytest.mark.slow
def test_the_build_carries_the_taken_list_its_record_names_it_and_the_audit_passes(
    taken: tuple[Path, Path, Path],
) -> None:
    policy, dep, wheel = taken
    code = read(wheel, "tinyaxpy")
    assert {t for _, targets in carried_targets_of(code) for t in targets} == {"sm_80", "sm_90", "compute_90"}
    record = json.loads(wheel.with_name(wheel.name + ".build.json").read_text(encoding="utf-8"))
    assert record["torch_cuda_arch_list"] == "8.0;9.0+PTX"
    assert record["gpu_archs_source"] == f"{DEPENDENCY} 1.0 ({dep.name} sha256 {sha256_file(dep)})"
    plan = _release(policy.parent, "plan", "--policy", str(policy), "--json", "--wheelhouse", str(dep.parent))
    assert plan.returncode == 0, plan.stderr
    (row,) = json.loads(plan.stdout)["rows"]
    assert (row["gpu_archs"], row["gpu_archs_source"]) == (["8.0", "9.0+PTX"], record["gpu_archs_source"])
    audit = _release(policy.parent, "audit", "--policy", str(policy), "--dist", str(wheel.parents[1]), "--json",
                     ROW)  # fmt: skip
    assert audit.returncode == 0, audit.stdout + audit.stderr
    (result,) = json.loads(audit.stdout)["results"]
    assert result["passed"] and result["gpu_archs"] == ["8.0", "9.0+PTX"]  # the taken list, not rows.toml's


@pytest.mark.slow
def test_the_audit_of_a_take_row_fails_closed_without_the_dependency_and_under_the_policys_list(
    taken: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    policy, _dep, wheel = taken
    env = {**repo_env(), "WHEELWRIGHT_CACHE": str(tmp_path / "cache")}  # no dependency wheel there
    dist = str(wheel.parents[1])
    audit = python_m("release", "audit", "--policy", str(policy), "--dist", dist, ROW, env=env, cwd=tmp_path,
                     timeout=600)  # fmt: skip
    assert audit.returncode == 2, audit.stdout + audit.stderr
    assert (
        f"row {ROW}: [[dependency]] {DEPENDENCY} gpu_coverage = 'take': cannot take its arch list"
        in audit.stderr
    )
    claimed = _release(tmp_path, "audit", "--gpu-archs", "8.0+PTX", "--variant", "cu130", str(wheel))
    assert claimed.returncode == 1, claimed.stdout  # rows.toml's own list: the wheel does not match it
    assert "the build ignored the arch list" in claimed.stdout


def carried_targets_of(code: object) -> list[tuple[str, tuple[str, ...]]]:
    from release.coverage.dependency import DependencyCode

    assert isinstance(code, DependencyCode)
    return [(lib.path, carried_targets(lib)) for lib in code.libraries]


@pytest.mark.parametrize("command", ["plan", "build"])
def test_a_missing_take_dependency_refuses_naming_it_the_row_and_the_key(
    tmp_path: Path, command: str
) -> None:
    policy = _policy(tmp_path, "wwtakemissing")
    extra = ("--dist", str(tmp_path / "dist")) if command == "build" else ()
    done = _release(tmp_path, command, "--policy", str(policy), *extra, ROW)
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        f"{policy}: row {ROW}: [[dependency]] wwtakemissing gpu_coverage = 'take': cannot take its arch list: "
        "no wheel of wwtakemissing for x86_64, Python 3.12, cu130" in done.stderr
    )
    assert not list(tmp_path.rglob("*.whl"))  # refused before anything was built
