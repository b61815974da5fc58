"""Real builds of the embedded example (examples/tinyaxpy) with the host backend.

Each built wheel is opened and held to its row: the exact device code in the kernels
library (read from its .nv_fatbin), Requires-Dist, RUNPATH/RPATH, no CUDA library
grafted in, the version label and tags, and the build record beside it.

Build venvs and PyPI toolchains live in the shared wheelwright cache
(``$WHEELWRIGHT_CACHE`` or ``~/.cache/wheelwright``), so they are made once per
machine; every test compiles its kernels into a fresh kernel cache of its own.

Every build here pins ``backend="host"``: the choice of backend, and the container
backend's plan, are tested in ``test_backend_auto.py`` with pinned (fake) engines.
"""

from __future__ import annotations

import dataclasses
import email.parser
import hashlib
import inspect
import json
import os
import stat
import zipfile
from pathlib import Path
from typing import Any

import pytest
from helpers.policy import link_examples
from helpers.proc import assert_process_ends
from helpers.rows import rows_by_id

from release import records
from release.binary.elf import read_elf
from release.binary.fatbin import all_entries, has_device_code
from release.core.errors import PolicyError, StepFailed, ToolError
from release.core.machine import default_cache_dir
from release.policy.archs import Arch
from release.policy.matrix import Row
from release.wheelbuild.output import BuiltWheel
from release.wheelbuild.run import build_row

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "rows.toml"
ROWS = rows_by_id(POLICY)
CACHE = default_cache_dir(os.environ)

SASS_X86_13 = {"sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"}
PTX_X86_13 = {"compute_120"}
KERNELS = "tinyaxpy/lib/libtinyaxpy_kernels.so"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "WHEELWRIGHT_KEEP_TMP")}
    env.update(extra)
    return env


def _host_has_nvcc_13_0() -> bool:
    from release.wheelbuild.toolchain import resolve_toolchain

    try:
        tc = resolve_toolchain(ROWS["cu130-py312-x86_64"], env=_env(), cache_dir=CACHE, install=False)
    except ToolError:
        return False
    return tc is not None and tc.source == "host"


needs_host_nvcc = pytest.mark.skipif(not _host_has_nvcc_13_0(), reason="needs a host nvcc 13.0")


@dataclasses.dataclass
class WheelFacts:
    names: list[str]
    requires: list[str]
    version: str
    device_code: dict[str, set[str]]  # library -> entry names
    entry_counts: dict[str, int]
    needed: dict[str, tuple[str, ...]]
    runpath: dict[str, tuple[str, ...]]
    rpath: dict[str, tuple[str, ...]]


def inspect_wheel(wheel: Path, into: Path) -> WheelFacts:
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        zf.extractall(into)
    meta_name = next(n for n in names if n.endswith(".dist-info/METADATA"))
    meta = email.parser.Parser().parsestr((into / meta_name).read_text(encoding="utf-8"))
    facts = WheelFacts(names, meta.get_all("Requires-Dist") or [], str(meta["Version"]), {}, {}, {}, {}, {})
    for name in names:
        if ".so" not in Path(name).name:
            continue
        path = into / name
        info = read_elf(path)
        facts.needed[name], facts.runpath[name], facts.rpath[name] = info.needed, info.runpath, info.rpath
        if has_device_code(path):
            entries = all_entries(path)
            facts.device_code[name] = {e.name for e in entries}
            facts.entry_counts[name] = len(entries)
    return facts


def _binding(facts: WheelFacts) -> str:
    return next(n for n in facts.names if n.startswith("tinyaxpy/_tinyaxpy.") and n.endswith(".so"))


def check_cuda_wheel(facts: WheelFacts, *, train: str) -> None:
    assert facts.version == f"0.3.0+cu{train.replace('.', '')}"
    assert facts.requires == [f"nvidia-cuda-runtime=={train}.*"]
    # exactly the row's device code, in the one library that carries it, once each
    assert set(facts.device_code) == {KERNELS}
    assert facts.device_code[KERNELS] == SASS_X86_13 | PTX_X86_13
    assert facts.entry_counts[KERNELS] == len(SASS_X86_13 | PTX_X86_13)
    assert "libcudart.so.13" in facts.needed[KERNELS]
    assert facts.runpath[KERNELS] == ("$ORIGIN/../../nvidia/cu13/lib",)
    assert facts.rpath[KERNELS] == ()
    binding = _binding(facts)
    assert facts.runpath[binding] == ("$ORIGIN/lib",) and facts.rpath[binding] == ()
    assert "libtinyaxpy_kernels.so" in facts.needed[binding]
    # nothing grafted by repair: no .libs folder, no CUDA library in the wheel
    assert not any(".libs/" in n for n in facts.names), facts.names
    assert not any(Path(n).name.startswith(("libcudart", "libcuda.")) for n in facts.names)


def check_record(record: Path, wheel: Path, row: Row) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(record.read_text(encoding="utf-8"))
    assert (
        data["version"] == records.BuildRecord.VERSION
        and data["row"] == row.id
        and data["wheel"] == wheel.name
    )
    assert data["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert data["backend"] == "host"
    assert data["python"].startswith(row.python + ".")
    assert data["policy_sha256"] == hashlib.sha256(POLICY.read_bytes()).hexdigest()
    assert data["torch_cuda_arch_list"] == (row.torch_cuda_arch_list or None)
    assert data["cmake_cuda_architectures"] == (row.cmake_cuda_architectures or None)
    assert data["built_at"].endswith("Z")
    return data


def host_build(row: Row, dist: Path, *, env: dict[str, str] | None = None, **kwargs: Any) -> list[BuiltWheel]:
    """build_row with the host backend, this repo's policy and the shared cache."""
    kwargs.setdefault("cache_dir", CACHE)
    return build_row(
        row, policy_path=POLICY, dist_dir=dist, backend="host", env=_env() if env is None else env, **kwargs
    )


def dist_files(dist: Path) -> list[Path]:
    return sorted(p for p in dist.rglob("*") if p.is_file()) if dist.exists() else []


# --------------------------------------------------------------------------- builds


@needs_host_nvcc
def test_cu130_with_host_nvcc_then_py313_reuses_the_kernels(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    dist, kernels = tmp_path / "dist", tmp_path / "kernels"
    row = ROWS["cu130-py312-x86_64"]
    (rec,) = host_build(row, dist, kernel_cache=kernels)
    err = capfd.readouterr().err
    assert "==> [cu130-py312-x86_64] compiling..." in err
    assert "kernel cache miss" in err
    assert rec.wheel == dist / "cu130" / "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    assert rec.record == rec.wheel.with_name(rec.wheel.name + ".build.json")
    data = check_record(rec.record, rec.wheel, row)
    assert data["toolchain"]["source"] == "host"
    assert data["toolchain"]["version"] == "13.0"
    facts = inspect_wheel(rec.wheel, tmp_path / "x312")
    check_cuda_wheel(facts, train="13.0")

    # the next Python of the train compiles no device code
    row13 = ROWS["cu130-py313-x86_64"]
    (rec13,) = host_build(row13, dist, kernel_cache=kernels)
    assert "kernel cache hit" in capfd.readouterr().err
    assert rec13.wheel.name == "tinyaxpy-0.3.0+cu130-cp313-cp313-manylinux_2_28_x86_64.whl"
    facts13 = inspect_wheel(rec13.wheel, tmp_path / "x313")
    check_cuda_wheel(facts13, train="13.0")
    same = [(tmp_path / d / KERNELS).read_bytes() for d in ("x312", "x313")]
    assert same[0] == same[1]
    assert len(list(kernels.glob("*.so"))) == 1
    assert sorted(p.name for p in dist_files(dist)) == sorted(
        [rec.wheel.name, rec.record.name, rec13.wheel.name, rec13.record.name]
    )

    # rebuilding a row replaces its wheel and drops every record of the old one
    audit = rec.wheel.with_name(rec.wheel.name + ".audit.json")
    audit.write_text("{}")
    older = dist / "cu130" / "tinyaxpy-0.2.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"
    older.write_bytes(b"old")
    older.with_name(older.name + ".smoke.json").write_text("{}")
    (again,) = host_build(row, dist, kernel_cache=kernels)
    assert again.wheel == rec.wheel
    assert sorted(p.name for p in dist_files(dist)) == sorted(
        [rec.wheel.name, rec.record.name, rec13.wheel.name, rec13.record.name]
    )


@pytest.mark.network
def test_cu132_with_the_pinned_pypi_toolchain(tmp_path: Path) -> None:
    """No 13.2 on this machine: the row's pins are installed once into the cache and used."""
    dist = tmp_path / "dist"
    row = ROWS["cu132-py312-x86_64"]
    (rec,) = host_build(row, dist, kernel_cache=tmp_path / "kernels")
    assert rec.wheel.name == "tinyaxpy-0.3.0+cu132-cp312-cp312-manylinux_2_28_x86_64.whl"
    data = check_record(rec.record, rec.wheel, row)
    toolchain = data["toolchain"]
    assert isinstance(toolchain, dict)
    assert toolchain["source"] == "pypi" and toolchain["full_version"] == "13.2.86"
    home = CACHE / "cuda-13.2.86" / "nvidia" / "cu13"
    assert toolchain["nvcc"] == str(home / "bin" / "nvcc")
    # the linker's libcudart.so exists in the cache only
    assert (home / "lib" / "libcudart.so").is_symlink()
    assert json.loads((CACHE / "cuda-13.2.86" / "wheelwright-toolchain.json").read_text())["pins"] == list(
        row.pypi_toolchain
    )
    facts = inspect_wheel(rec.wheel, tmp_path / "x")
    check_cuda_wheel(facts, train="13.2")
    assert not any(Path(n).name == "libcudart.so" for n in facts.names)


def test_cpu_row_gives_a_cpu_wheel_on_a_machine_with_nvcc(tmp_path: Path) -> None:
    """The variant comes from the row: CUDA_HOME, an arch list, nvcc flags and CUDA include paths
    in the shell change nothing."""
    from release.wheelbuild.toolchain import probe_nvcc

    env = _env(
        TORCH_CUDA_ARCH_LIST="8.0;9.0+PTX",
        NVCC_APPEND_FLAGS="-arch=sm_80",
        TINYAXPY_VARIANT="cu130",
        CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=native",
        CPATH="/usr/local/cuda/include",
    )
    nvcc = [Path(p) / "nvcc" for p in env["PATH"].split(os.pathsep) if (Path(p) / "nvcc").is_file()]
    if nvcc:
        probe = probe_nvcc(nvcc[0], env)
        if probe.cuda_home is not None:
            env["CUDA_HOME"] = str(probe.cuda_home)
    dist = tmp_path / "dist"
    row = ROWS["cpu-py312-x86_64"]
    (rec,) = host_build(row, dist, env=env, kernel_cache=tmp_path / "k")
    assert rec.wheel == dist / "cpu" / "tinyaxpy-0.3.0-cp312-cp312-manylinux_2_28_x86_64.whl"
    data = check_record(rec.record, rec.wheel, row)
    assert data["toolchain"] is None and data["torch_cuda_arch_list"] is None
    facts = inspect_wheel(rec.wheel, tmp_path / "x")
    assert facts.version == "0.3.0" and facts.requires == []
    assert facts.device_code == {}
    for name, needed in facts.needed.items():
        assert not any(n.startswith(("libcudart", "libcuda.")) for n in needed), name
        assert not any("nvidia" in p or "cuda" in p for p in facts.runpath[name] + facts.rpath[name]), name
    info = (tmp_path / "x" / "tinyaxpy" / "_build_info.py").read_text()
    assert "'variant': 'cpu'" in info


# --------------------------------------------------------------------------- failures


def test_cu126_without_a_toolkit_fails_naming_what_it_needs(tmp_path: Path) -> None:
    """build-cu126-py312 fails with a clear message naming what it needs, and leaves nothing."""
    dist = tmp_path / "dist"
    dist.mkdir()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    with pytest.raises(ToolError) as info:
        host_build(ROWS["cu126-py312-x86_64"], dist, env=_env(TMPDIR=str(tmp)))
    text = str(info.value)
    assert "row cu126-py312-x86_64 needs a CUDA 12.6 toolchain" in text
    assert "CUDA_HOME is not set" in text
    assert "there is no nvcc on PyPI for CUDA 12" in text
    assert "install the CUDA 12.6 toolkit and set CUDA_HOME to it" in text
    assert "pytorch/manylinux2_28-builder:cuda12.6" in text
    assert info.value.return_code == 3
    assert dist_files(dist) == [] and list(tmp.iterdir()) == []


@needs_host_nvcc
@pytest.mark.parametrize("keep", [False, True], ids=["cleaned", "kept"])
def test_a_failed_compile_leaves_nothing_in_dist(tmp_path: Path, keep: bool) -> None:
    """nvcc 13 has no sm_50: the compile fails, dist/ stays empty, the log is kept."""
    row = dataclasses.replace(ROWS["cu130-py312-x86_64"], gpu_archs=(Arch(5, 0, "", True),))
    dist, tmp = tmp_path / "dist", tmp_path / "tmp"
    tmp.mkdir()
    env = _env(TMPDIR=str(tmp), **({"WHEELWRIGHT_KEEP_TMP": "1"} if keep else {}))
    with pytest.raises(StepFailed) as info:
        host_build(row, dist, env=env, kernel_cache=tmp_path / "k")
    text = str(info.value)
    assert "row cu130-py312-x86_64: compiling failed" in text
    assert "compute_50" in text
    log = CACHE / "logs" / "cu130-py312-x86_64.log"
    assert f"full log: {log}" in text and log.is_file()
    assert dist_files(dist) == []
    kept = list(tmp.iterdir())
    if keep:
        assert len(kept) == 1 and (kept[0] / "build.log").is_file()
    else:
        assert kept == []


def test_a_wheel_of_another_variant_is_refused(tmp_path: Path) -> None:
    """If the project ignored the variant it was given, the wheel never reaches dist/."""
    from release.wheelbuild.output import check_wheel_name

    row = ROWS["cpu-py312-x86_64"]
    with pytest.raises(StepFailed, match=r"has \+cu130, the row needs no local label"):
        check_wheel_name(row, "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl", "tinyaxpy")
    with pytest.raises(StepFailed, match="expected exactly"):
        check_wheel_name(row, "tinyaxpy-0.3.0-cp312-cp312-linux_x86_64.whl", "tinyaxpy")
    check_wheel_name(row, "tinyaxpy-0.3.0-cp312-cp312-manylinux_2_28_x86_64.whl", "tinyaxpy")


# --------------------------------------------------------------------------- dry runs


def test_dry_run_of_a_pypi_row_installs_nothing(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    host_build(ROWS["cu132-py312-x86_64"], tmp_path / "dist", cache_dir=cache, dry_run=True)
    out = capfd.readouterr().out
    assert "install nvidia-cuda-nvcc==13.2.86" in out
    assert "CUDA 13.2.86 from pinned PyPI wheels" in out
    assert "create the isolated build environment" in out
    assert "setuptools==84.2.1, wheel==0.48.0 from" in out
    assert not cache.exists() and not (tmp_path / "dist").exists()


# --------------------------------------------------------------------------- pythons


def test_find_python_skips_a_wrong_python_and_says_what_it_tried(tmp_path: Path) -> None:
    """A fake python3.12 that is really 3.11 is skipped; a missing version names every place looked."""
    from release.core.machine import find_python

    fake = tmp_path / "bin"
    fake.mkdir()
    script = fake / "python3.12"
    script.write_text(
        '#!/bin/sh\necho \'{"impl": "cpython", "version": "3.11.9", "exe": "/x", "gil_disabled": false}\'\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    env = _env(PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    try:
        found = find_python("3.12", env=env)
    except ToolError as exc:
        assert f"{script}: is Python 3.11.9" in str(exc)
    else:
        assert found.version.startswith("3.12.") and found.path != script
    with pytest.raises(ToolError) as info:
        find_python("3.9", env={"PATH": str(fake), "HOME": str(tmp_path)})
    assert str(info.value) == (
        "CPython 3.9 is needed to build this row and was not found (no python3.9 on PATH; no pyenv); "
        "install it (e.g. `pyenv install 3.9`) or put the folder holding python3.9 on PATH"
    )


@needs_host_nvcc
def test_plan_row_is_the_dry_run_as_a_value(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    from release.wheelbuild.run import plan_row

    row = ROWS["cu130-py312-x86_64"]
    kwargs: dict[str, Any] = {
        "policy_path": POLICY,
        "dist_dir": tmp_path / "dist",
        "cache_dir": tmp_path / "cache",
        "backend": "host",
        "env": _env(),
    }
    plan = plan_row(row, **kwargs)
    data = json.loads(json.dumps(plan.to_json()))
    assert data["version"] == 1 and data["backend"] == "host" and data["row"] == row.id
    assert data["env"]["set"]["TORCH_CUDA_ARCH_LIST"] == "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"
    assert [c["what"] for c in data["commands"]] == ["compiling", "repairing"]
    assert build_row(row, dry_run=True, **kwargs) == []
    assert capfd.readouterr().out.strip() == plan.render()
    assert not (tmp_path / "cache").exists() and not (tmp_path / "dist").exists()


def test_a_build_given_the_loaded_policy_never_reads_the_file_again(tmp_path: Path) -> None:
    """The command and the pipeline load rows.toml once and hand the Policy down: a row's build plan is
    made from it with the file gone (before, each row's build re-read it, so this failed with exit 2)."""
    from release.policy.load import load_policy
    from release.wheelbuild.run import plan_row

    folder = tmp_path / "policy"
    folder.mkdir()
    copy = folder / "rows.toml"
    copy.write_bytes(POLICY.read_bytes())
    link_examples(folder)
    policy = load_policy(copy)
    copy.unlink()
    row = ROWS["cpu-py312-x86_64"]
    options: dict[str, Any] = {"dist_dir": tmp_path / "dist", "cache_dir": tmp_path / "cache", "env": _env()}
    plan = plan_row(row, policy=policy, backend="host", **options)
    assert plan.row_id == row.id and [c.what for c in plan.commands] == ["compiling", "repairing"]
    with pytest.raises(PolicyError, match="file not found"):  # the must-fail twin: only a path, re-read
        plan_row(row, policy_path=copy, backend="host", **options)


# --------------------------------------------------------------------------- time limits


def test_a_command_past_its_limit_is_stopped_with_what_it_started(tmp_path: Path) -> None:
    """proc.run's limit: the step and the command are named, the process group is killed."""
    from release.core import proc

    pid_file = tmp_path / "child.pid"
    script = tmp_path / "hang.sh"
    script.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {pid_file}\nwait\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with pytest.raises(StepFailed) as info:
        proc.run([script], timeout=1, step="row r: probing")
    assert str(info.value) == (
        f"row r: probing: `{script}` timed out after 1 s and was stopped (with every process it started)"
    )
    assert info.value.return_code == 4
    assert_process_ends(int(pid_file.read_text()), f"{script}'s child")
    with pytest.raises(StepFailed, match=r"^running sleep: `\S+/sleep 5` timed out after 0.2 s"):
        proc.run(["sleep", "5"], timeout=0.2)
    # every command has a limit unless its caller lifts it (only builds do)
    assert inspect.signature(proc.run).parameters["timeout"].default == proc.DEFAULT_TIMEOUT_S
    assert proc.run(["true"], timeout=None).returncode == 0


def test_a_hung_repair_is_stopped_naming_the_row_and_keeping_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The repair has a limit; the compile (a build) has none."""
    from release.wheelbuild.host import backend as host
    from release.wheelbuild.plan import Command

    assert host.COMMAND_TIMEOUT_S["build"] is None and host.COMMAND_TIMEOUT_S["cibuildwheel"] is None
    assert host.COMMAND_TIMEOUT_S["tools"] == host.REPAIR_TIMEOUT_S
    monkeypatch.setitem(host.COMMAND_TIMEOUT_S, "tools", 0.5)
    row = ROWS["cpu-py312-x86_64"]
    log, cache = tmp_path / "build.log", tmp_path / "cache"
    command = Command("repairing", ("sleep", "30"), "tools")
    with pytest.raises(StepFailed) as info:
        host.run_logged(row, command, list(command.argv), dict(os.environ), log, cache)
    text = str(info.value)
    kept = cache / "logs" / f"{row.id}.log"
    assert text.startswith("row cpu-py312-x86_64: repairing: `")
    assert "sleep 30` timed out after 0.5 s" in text and text.endswith(f"full log: {kept}")
    assert "timed out after 0.5 s" in kept.read_text()
