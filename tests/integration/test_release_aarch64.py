"""`release --rehearsal --arch aarch64` on this machine: an aarch64 CUDA row built (cross, on an
x86_64 machine), audited with the row's arch's tools, smoke-tested in a fresh venv of an
emulated aarch64 CPython, published to the local index, and its install lines checked for an
aarch64 target. A row whose Python has no aarch64 interpreter here is listed with that reason,
never published. Needs what scripts/setup.sh installs (qemu-user-static, binfmt, the cross g++)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from helpers.proc import python_m
from helpers.repo import commit_all, copy_example

from release.resources.cpus import host_arch

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.usefixtures("stop_rehearsal_index")]


def _release(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("WHEELWRIGHT_ARCH", None)
    return python_m(
        "release", "release", "--policy", str(repo / "rows.toml"), *args, cwd=repo, env=env, timeout=900
    )


def test_an_aarch64_cuda_row_is_built_audited_smoked_under_emulation_and_published(tmp_path: Path) -> None:
    repo = commit_all(copy_example(tmp_path / "repo"))
    proc = _release(
        repo,
        "--rehearsal",
        "--backend",
        "host",
        "--arch",
        "aarch64",
        "cpu-py311-aarch64",  # its index stands in for the default index in the install checks
        "cu130-py311-aarch64",
        "cu130-py312-aarch64",
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    if host_arch() == "x86_64":  # emulation said once, with its cost
        assert out.count("aarch64 row(s) on this x86_64 machine: cross-compiled") == 1, out
    table = proc.stdout.split("\n\n")[0]
    line = next(x for x in table.splitlines() if x.startswith("cu130-py311-aarch64 "))
    assert "+cu130-cp311-cp311-manylinux_2_28_aarch64.whl" in line
    assert line.split()[4:7] == ["ok", "ok", "ok"] and "uploaded" in line, line
    # the Python with no aarch64 interpreter here: left out, with the reason, never published
    assert "cu130-py312-aarch64" not in table
    assert "cu130-py312-aarch64: " in proc.stdout and "no aarch64 CPython 3.12 reachable here" in proc.stdout

    dist = repo / "dist" / "cu130"
    (wheel,) = dist.glob("*-cp311-*aarch64.whl")
    smoke = json.loads((dist / f"{wheel.name}.smoke.json").read_text())
    probe = smoke["evidence"]["probe"]
    if host_arch() != "aarch64":
        assert probe["emulation"]["arch"] == "aarch64" and probe["emulation"]["host"] == host_arch()
    assert probe["import"] == "ok"
    cudart = [p for p in probe["loaded"] if Path(p).name.startswith("libcudart.so")]
    assert len(cudart) == 1 and "/site-packages/nvidia/cu13/lib/" in cudart[0], cudart
    assert [lib["member"] for lib in probe["libraries"]] == ["tinyaxpy/lib/libtinyaxpy_kernels.so"]
    assert all(lib["error"] is None and lib["problem"] is None for lib in probe["libraries"])
    assert probe["run_check"] is False and probe["no_gpu_reason"]  # no GPU here: said in the record

    # the install lines were checked for an aarch64 machine, the CUDA index first and the default first
    for tool, first in (
        ("pip", "cu130"),
        ("uv", "cu130"),
        ("pip", "the default index"),
        ("uv", "the default index"),
    ):
        assert f"✓ {tool}, --index-url {first}, aarch64: {tool} picks {wheel.name}" in proc.stdout, (
            proc.stdout
        )
    # README's first screen shows what a rehearsal prints today
    for pattern in _readme_install_block():
        assert any(pattern.fullmatch(line) for line in proc.stdout.splitlines()), (
            pattern.pattern,
            proc.stdout,
        )
    # on the local index, byte for byte the audited wheel
    manifest = json.loads((repo / "dist" / "tinyaxpy-0.3.0.release.json").read_text())
    assert wheel.name in json.dumps(manifest)


def _readme_install_block() -> list[re.Pattern[str]]:
    """The README's block of rehearsal output, each line a pattern (``<port>`` any port,
    ``<the default index>`` any URL)."""
    text = (ROOT / "README.md").read_text()
    block = text[text.index("```text\nPublished to the target's indexes.") + len("```text\n") :]
    lines = block[: block.index("```")].splitlines()
    assert len(lines) >= 4, lines
    return [
        re.compile(
            re.escape(line)
            .replace(re.escape("<port>"), r"\d+")
            .replace(re.escape("<the default index>"), r"\S+")
        )
        for line in lines
    ]
