"""Both example packages, each released with one command: build -> audit -> smoke -> rehearsal
publish, ``python -m release release --rehearsal --policy examples/<pkg>/rows.toml``.

Neither package knows wheelwright (tests/integration/test_examples_standalone.py shows what
they build on their own); only their policy's [project] table describes them. Here the
release itself is held to issue 11's contract:

- lazysaxpy (scikit-build-core + CMake, kernels loaded lazily through ctypes, ``py3-none``):
  the cu130 wheel carries ``+cu130``, ``Requires-Dist: nvidia-cuda-runtime==13.0.*``, a shared
  cudart reached through ``$ORIGIN/../nvidia/cu13/lib``, exactly the row's device code; it
  passes the audit, and its smoke proves the runtime by loading the kernels library that the
  import never loads; every row is published and pip and uv pick the CUDA wheel;
- torchsaxpy (torch ``cpp_extension``, ``cp310-abi3``, torch as the cu130 dependency channel):
  the audit passes with torch as its channel and its device code matches the row's arch list;
  the smoke imports torch through the package, loads ``_C.abi3.so`` and finds libcudart in the
  environment's ``nvidia/cu13/lib`` (where torch's CUDA packages install it).

Cost on 2 shared cores, measured: lazysaxpy's release (three rows) about 35 s. torchsaxpy's
isolated build environment (``setuptools``, ``torch==2.14.1`` and its CUDA packages: 5.4 GB)
is made once under ``$WHEELWRIGHT_CACHE/build-envs/`` (about 50 s from the index) and reused
while its requirements and constraints stay the same; the smoke's dependencies (torch and its
CUDA packages, 2.8 GB) are fetched once into ``$WHEELWRIGHT_CACHE/smoke-wheelhouse/`` (kept a
day). Then a torchsaxpy release takes the extension's compile (about 70 s) plus a fresh venv
of torch for the smoke (about 50 s). docs/porting.md has the numbers for a cold and a warm CI.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.proc import python_m, repo_env

from release import records
from release.binary.elf import read_elf
from release.binary.fatbin import all_entries, has_device_code
from release.policy.load import load_policy
from release.policy.matrix import expand

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parents[2]
LAZY = ROOT / "examples" / "lazysaxpy" / "rows.toml"
TORCHEXT = ROOT / "examples" / "torchsaxpy" / "rows.toml"


Released = tuple[subprocess.CompletedProcess[str], Path]  # the release command's run, and its folder


def stop_index(cwd: Path) -> None:
    """Stop the local index server the rehearsal left running for its install lines."""
    python_m(
        "release.publish.index.server",
        "stop",
        "--root",
        str(cwd / ".wheelwright" / "index"),
        env=repo_env(),
        timeout=60,
    )


def release(policy: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The one command, run as a user runs it (from its own folder: the local index and dist/ go there)."""
    return python_m(
        "release",
        "release",
        "--rehearsal",
        "--policy",
        str(policy),
        "--allow-dirty",
        cwd=cwd,
        env=repo_env(),
        timeout=3600,
    )


def released(tmp_path_factory: pytest.TempPathFactory, policy: Path) -> Iterator[Released]:
    """``policy``'s package released from a folder of its own; the index it left running is stopped after."""
    cwd = tmp_path_factory.mktemp(f"{policy.parent.name}-release")
    try:
        yield release(policy, cwd), cwd
    finally:
        stop_index(cwd)


def metadata(wheel: Path) -> email.message.Message:
    with zipfile.ZipFile(wheel) as zf:
        name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        return email.parser.Parser().parsestr(zf.read(name).decode())


def library(wheel: Path, member: str, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as zf:
        return Path(zf.extract(member, into))


def sass_and_ptx(path: Path) -> set[str]:
    return {e.name for e in all_entries(path)}


ROW_DEVICE_CODE = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", "compute_120"}


def assert_smoke_found_the_runtime(wheel: Path, member: str) -> records.SmokeRecord:
    """The wheel's smoke record passed, loaded ``member`` (which links libcudart.so.13) after the
    import, and found libcudart in the environment's ``nvidia/cu13/lib``."""
    smoke = records.read(wheel, records.SmokeRecord)
    assert smoke is not None and smoke.passed, smoke
    assert (
        "✓ loaded the shipped library that links a CUDA library, after the import: "
        f"{member} (libcudart.so.13)"
    ) in smoke.lines
    assert smoke.libcudart is not None and smoke.libcudart.endswith(
        "/site-packages/nvidia/cu13/lib/libcudart.so.13"
    )
    return smoke


@pytest.fixture(scope="module")
def lazy_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Released]:
    yield from released(tmp_path_factory, LAZY)


def test_lazysaxpy_releases_with_one_command(
    lazy_release: Released,
) -> None:
    proc, cwd = lazy_release
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-8000:]
    for row in ("cpu-py312-x86_64", "cu130-py312-x86_64", "cu132-py312-x86_64"):
        line = next(line for line in proc.stdout.splitlines() if line.startswith(row))
        assert re.search(r"\bok\s+ok\s+ok\b.*\buploaded\b", line), line
    for tool in ("pip", "uv"):
        for first in ("cu130", "the default index"):
            assert (
                f"✓ {tool}, --index-url {first}: {tool} picks "
                "lazysaxpy-0.1.0+cu130-py3-none-manylinux_2_28_x86_64.whl" in proc.stdout
            ), proc.stdout[-4000:]
    published = {p.name for p in (cwd / ".wheelwright" / "index").rglob("*.whl")}
    assert "lazysaxpy-0.1.0+cu130-py3-none-manylinux_2_28_x86_64.whl" in published


def test_lazysaxpy_cu130_wheel_carries_the_rows_contract(lazy_release: Released, tmp_path: Path) -> None:
    """+cu130, the CUDA 13.0 runtime package, a RUNPATH to nvidia/cu13/lib, a shared cudart, and
    exactly the row's device code: none of which the package itself names."""
    _, cwd = lazy_release
    wheel = cwd / "dist" / "cu130" / "lazysaxpy-0.1.0+cu130-py3-none-manylinux_2_28_x86_64.whl"
    meta = metadata(wheel)
    assert meta["Version"] == "0.1.0+cu130"
    assert meta.get_all("Requires-Dist") == ["nvidia-cuda-runtime==13.0.*"]
    kernels = library(wheel, "lazysaxpy/liblazysaxpy_kernels.so", tmp_path)
    elf = read_elf(kernels)
    assert elf.runpath == ("$ORIGIN/../nvidia/cu13/lib",) and elf.rpath == ()
    assert "libcudart.so.13" in elf.needed  # the shared runtime, from the package
    assert has_device_code(kernels) and sass_and_ptx(kernels) == ROW_DEVICE_CODE
    row = {r.id: r for r in expand(load_policy(LAZY))}["cu130-py312-x86_64"]
    assert records.row_matches_wheel(row, wheel.name)
    audit = records.read(wheel, records.AuditRecord)
    assert audit is not None and audit.passed and audit.row == row.id


def test_lazysaxpy_smoke_loaded_the_lazy_kernels_library(
    lazy_release: Released,
) -> None:
    """Importing lazysaxpy loads nothing native: the smoke proved the runtime by loading the
    kernels library itself after the import, and its record keeps the probe's report."""
    _, cwd = lazy_release
    wheel = cwd / "dist" / "cu130" / "lazysaxpy-0.1.0+cu130-py3-none-manylinux_2_28_x86_64.whl"
    smoke = assert_smoke_found_the_runtime(wheel, "lazysaxpy/liblazysaxpy_kernels.so")
    assert smoke.evidence is not None
    probe = smoke.evidence["probe"]
    assert not any("libcudart" in p for p in probe["loaded_by_import"])  # the import alone loads none
    assert [lib["member"] for lib in probe["libraries"]] == ["lazysaxpy/liblazysaxpy_kernels.so"]
    cpu = cwd / "dist" / "cpu" / "lazysaxpy-0.1.0-py3-none-manylinux_2_28_x86_64.whl"
    cpu_smoke = records.read(cpu, records.SmokeRecord)
    assert cpu_smoke is not None and cpu_smoke.passed and cpu_smoke.executed  # the CPU row runs its check
    assert cpu_smoke.check["max_abs_diff"] == 0.0 and cpu_smoke.check["backend"] == "cpu"
    assert metadata(cpu).get_all("Requires-Dist") is None


@pytest.fixture(scope="module")
def torch_release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Released]:
    yield from released(tmp_path_factory, TORCHEXT)


TORCH_WHEEL = "torchsaxpy-0.1.0+cu130-cp310-abi3-manylinux_2_34_x86_64.whl"


def test_torchsaxpy_releases_with_one_command(torch_release: Released, tmp_path: Path) -> None:
    """torch as the cu130 channel: the wheel requires torch (which brings the CUDA runtime), the
    repair grafted none of torch's libraries, the device code is the row's arch list."""
    proc, cwd = torch_release
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    line = next(line for line in proc.stdout.splitlines() if line.startswith("cu130-py311-x86_64"))
    assert re.search(r"\bok\s+ok\s+ok\b.*\buploaded\b", line), line
    wheel = cwd / "dist" / "cu130" / TORCH_WHEEL
    meta = metadata(wheel)
    assert meta["Version"] == "0.1.0+cu130"
    assert meta.get_all("Requires-Dist") == ["torch==2.14.1"]
    with zipfile.ZipFile(wheel) as zf:
        assert not [n for n in zf.namelist() if re.search(r"lib(c10|torch)\w*\.so", n)]  # nothing grafted
    ext = library(wheel, "torchsaxpy/_C.abi3.so", tmp_path)
    assert sass_and_ptx(ext) == ROW_DEVICE_CODE
    assert {"libc10.so", "libtorch_cpu.so", "libc10_cuda.so", "libcudart.so.13"} <= set(read_elf(ext).needed)
    audit = records.read(wheel, records.AuditRecord)
    assert audit is not None and audit.passed


def test_torchsaxpy_smoke_found_the_runtime_through_torch(
    torch_release: Released,
) -> None:
    _, cwd = torch_release
    assert_smoke_found_the_runtime(cwd / "dist" / "cu130" / TORCH_WHEEL, "torchsaxpy/_C.abi3.so")


# ---------------------------------------------------------------- the policy's build constraints reach the build


def _policy_with_constraints(folder: Path, pin: str) -> Path:
    """examples/lazysaxpy's policy, copied to ``folder`` with a constraints file beside it."""
    (folder / "pins.txt").write_text(f"{pin}\n", encoding="utf-8")
    text = LAZY.read_text(encoding="utf-8")
    text = text.replace('path = "."', f'path = "{os.path.relpath(LAZY.parent, folder)}"')
    text = text.replace(
        'wheel_tags = "py3-none"', 'wheel_tags = "py3-none"\nbuild_constraints = ["pins.txt"]'
    )
    (folder / "rows.toml").write_text(text, encoding="utf-8")
    return folder / "rows.toml"


def test_project_build_constraints_reach_the_build_environment(tmp_path: Path) -> None:
    """The plan names the policy's constraints file after wheelwright's; a pin there that no
    index can satisfy stops the build naming the requirement, the pin and the file."""
    from release.core.errors import InputError
    from release.core.machine import default_cache_dir
    from release.wheelbuild.run import build_row, plan_row

    policy = _policy_with_constraints(tmp_path, "scikit-build-core==1.1.2")
    row = {r.id: r for r in expand(load_policy(policy))}["cpu-py312-x86_64"]
    cache = default_cache_dir(os.environ)
    plan = plan_row(row, policy_path=policy, dist_dir=tmp_path / "dist", cache_dir=cache, backend="host")
    text = plan.render()
    assert f"build-constraints.txt, {tmp_path / 'pins.txt'}" in text, text
    bad = tmp_path / "bad"
    bad.mkdir()
    policy = _policy_with_constraints(bad, "scikit-build-core==0.0.0.1")
    row = {r.id: r for r in expand(load_policy(policy))}["cpu-py312-x86_64"]
    with pytest.raises(InputError) as info:
        build_row(row, policy_path=policy, dist_dir=bad / "dist", cache_dir=cache, backend="host")
    message = str(info.value)
    assert "'scikit-build-core>=0.10'" in message and "scikit-build-core==0.0.0.1" in message, message
    assert str(bad / "pins.txt") in message
    assert not (bad / "dist").exists() or not list((bad / "dist").rglob("*.whl"))
