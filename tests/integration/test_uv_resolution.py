"""uv alongside pip: which wheel each installer picks from a CUDA index and the default index,
asked for real (pinned uv, real pip) against a real local index server, in both index orders;
and the rehearsal printing and checking a pip line and a uv line for each CUDA variant."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.repo import commit_all, copy_example
from helpers.rows import rows_by_id

from release.core.machine import default_cache_dir, find_python
from release.policy.matrix import Row
from release.publish.index.local import local_index
from release.resources.cpus import host_arch
from release.smoke.resolve import (
    UV_STRATEGY,
    UV_VERSION,
    InstallCase,
    find_uv,
    install_cases,
    picked,
    resolution_problem,
)
from release.wheelbuild.run import build_row

ROOT = Path(__file__).resolve().parents[2]
HOST = host_arch()
CUDA_ROW, CPU_ROW = f"cu130-py312-{HOST}", f"cpu-py312-{HOST}"
pytestmark = [pytest.mark.integration, pytest.mark.network]  # uv comes from the default index once


@pytest.fixture(scope="module")
def rows() -> dict[str, Row]:
    return rows_by_id()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, rows: dict[str, Row]) -> dict[str, Path]:
    dist = tmp_path_factory.mktemp("dist")
    return {
        row_id: build_row(
            rows[row_id],
            policy_path=ROOT / "rows.toml",
            dist_dir=dist,
            cache_dir=default_cache_dir(os.environ),
            backend="host",
        )[0].wheel
        for row_id in (CUDA_ROW, CPU_ROW)
    }


@pytest.fixture(scope="module")
def uv() -> Path:
    return find_uv(default_cache_dir(os.environ), os.environ)


def test_install_cases_pure() -> None:
    cuda, default = "http://127.0.0.1:1/cu130/simple/", "http://127.0.0.1:1/cpu/simple/"
    cases = install_cases(cuda, default, cuda=True)
    assert [c.tool for c in cases] == ["pip", "uv", "pip", "uv"]
    assert cases[0].line("pkg") == f"pip install pkg --index-url {cuda} --extra-index-url {default}"
    assert cases[1].line("pkg") == (
        f"uv pip install pkg --index-url {cuda} --extra-index-url {default} --index-strategy {UV_STRATEGY}"
    )
    assert cases[3].flags() == [
        "--index-url",
        default,
        "--extra-index-url",
        cuda,
        "--index-strategy",
        UV_STRATEGY,
    ]
    assert cases[0].replaced({default: "http://stand-in/"}).extra_index_urls == ("http://stand-in/",)
    cpu = install_cases(default, default, cuda=False)
    assert [c.line("pkg") for c in cpu] == [
        f"pip install pkg --index-url {default}",
        f"uv pip install pkg --index-url {default}",
    ]


def test_uv_is_the_pinned_version(uv: Path, tmp_path: Path) -> None:
    out = subprocess.run([str(uv), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.split()[:2] == ["uv", UV_VERSION]
    # a cached uv of another version is not used: the pinned one replaces it
    fake = tmp_path / "cache" / "tools" / f"uv-{UV_VERSION}" / "bin" / "uv"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\necho uv 0.0.1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    found = find_uv(tmp_path / "cache", env)
    version = subprocess.run([str(found), "--version"], capture_output=True, text=True, check=True)
    assert version.stdout.split()[:2] == ["uv", UV_VERSION]


def test_pip_and_uv_pick_the_cuda_wheel_in_both_orders_and_uv_without_the_strategy_does_not(
    built: dict[str, Path], rows: dict[str, Row], uv: Path, tmp_path: Path
) -> None:
    row = rows[CUDA_ROW]
    python = find_python(row.python, env=os.environ).path
    with local_index(("cpu", "cu130"), tmp_path / "index") as index:
        shutil.copy2(built[CPU_ROW], index.folder("cpu"))
        shutil.copy2(built[CUDA_ROW], index.folder("cu130"))
        cuda, default = index.simple_url("cu130"), index.simple_url("cpu")
        for case in install_cases(cuda, default, cuda=True):
            chosen = picked(case, python, "tinyaxpy", uv=uv)
            assert resolution_problem(row, chosen, case.tool) is None, (case, chosen)
            assert chosen == built[CUDA_ROW].name
        # pip's line given to uv as it is: uv takes tinyaxpy from the first index that has it,
        # and it searches --extra-index-url first: the CPU wheel. The check says so.
        plain = InstallCase("uv", cuda, (default,))
        plain_flags = [f for f in plain.flags() if f not in ("--index-strategy", UV_STRATEGY)]
        assert plain_flags == ["--index-url", cuda, "--extra-index-url", default]
        first_index = _uv_first_index(uv, python, cuda, default, tmp_path)
    assert first_index == built[CPU_ROW].name
    assert resolution_problem(row, first_index, "uv") == (
        f"uv picked the CPU wheel {first_index} instead of the cu130 wheel"
    )


def _uv_first_index(uv: Path, python: Path, index_url: str, extra: str, tmp_path: Path) -> str:
    """What uv installs with pip's flags and uv's default index strategy."""
    target = tmp_path / "first-index"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("UV_", "PIP_"))}
    subprocess.run(
        [str(uv), "pip", "install", "--no-config", "--no-cache", "--quiet", "--python", str(python),
         "--target", str(target), "--no-deps", "--index-url", index_url, "--extra-index-url", extra, "tinyaxpy"],
        env={**env, "UV_NO_CONFIG": "1"}, check=True, capture_output=True,
    )  # fmt: skip
    (info,) = target.glob("*.dist-info")
    version = info.name.removesuffix(".dist-info").split("-", 1)[1]
    return f"tinyaxpy-{version}-cp312-cp312-manylinux_2_28_{HOST}.whl"


def test_rehearsal_prints_and_checks_a_pip_and_a_uv_line_per_cuda_variant(tmp_path: Path) -> None:
    repo = commit_all(copy_example(tmp_path / "repo"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        proc = python_m(
            "release",
            "release",
            "--rehearsal",
            "--backend",
            "host",
            CPU_ROW,
            CUDA_ROW,
            cwd=repo,
            env=env,
            timeout=900,
        )
    finally:  # the rehearsal leaves its local index running, for the user to try the lines
        python_m(
            "release.publish.index.server",
            "stop",
            "--root",
            str(repo / ".wheelwright" / "index"),
            env=env,
            timeout=60,
        )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout.splitlines()
    block = out[out.index("  cu130:") :]
    pip_line, uv_line = block[1].strip(), block[2].strip()
    assert pip_line.startswith("pip install tinyaxpy --index-url http://127.0.0.1:") and "/cu130/" in pip_line
    assert (
        uv_line.startswith("uv pip install tinyaxpy --index-url http://127.0.0.1:") and "/cu130/" in uv_line
    )
    assert uv_line.endswith(f"--index-strategy {UV_STRATEGY}")
    assert "standing in for" in block[3]  # the output says which index stood in for the default one
    checks = [line.strip() for line in block[4:8]]
    wheel = rf"tinyaxpy-[^-]+\+cu130-cp312-cp312-manylinux_2_28_{HOST}\.whl"
    for line, (tool, first) in zip(
        checks,
        [("pip", "cu130"), ("uv", "cu130"), ("pip", "the default index"), ("uv", "the default index")],
        strict=True,
    ):
        assert re.fullmatch(rf"✓ {tool}, --index-url {first}: {tool} picks {wheel}", line), line
