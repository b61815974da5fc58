"""The sweep's hygiene and loader classes through the whole standalone audit, as a user runs it.

``python -m release audit WHEEL --runs-on 8.0 --json --no-record`` from an empty folder (no
rows.toml: standalone), on wheels built here from real ELF files gcc links on the spot, with
auditwheel's real platform analysis; a row's audit goes through :func:`audit_wheel` with the
row's expectation. The unit tests (``tests/unit/test_audit_sweep_hygiene.py``) hold each finding's
text; these prove that the whole audit says the same. Every case has a wheel that must fail
(the true finding) and one that must pass (the false one gone). About 10 s on 2 cores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.elf import TAG, gcc_so, write_wheel
from helpers.proc import python_m, repo_env

from release.audit.model import Expectation
from release.audit.run import audit_wheel

pytestmark = pytest.mark.integration


def standalone(wheel: Path, *args: str) -> dict[str, list[dict[str, Any]]]:
    """The findings of a standalone audit by check, run as a user runs it from an empty folder."""
    empty = wheel.parent / "empty"
    empty.mkdir(exist_ok=True)
    done = python_m(
        "release", "audit", str(wheel), *args, "--json", "--no-record", cwd=empty, env=repo_env(), timeout=300
    )
    assert done.returncode in (0, 1), done.stderr
    (result,) = json.loads(done.stdout)["results"]
    assert result["standalone"] is True
    out: dict[str, list[dict[str, Any]]] = {}
    for finding in result["findings"]:
        out.setdefault(finding["check"], []).append(finding)
    return out


def failing(findings: list[dict[str, Any]]) -> list[str]:
    return [f["message"] for f in findings if not f["ok"]]


def test_the_runtime_package_is_no_graft_of_itself(tmp_path: Path) -> None:
    """nvidia-cuda-runtime 13.0.96 failed hygiene for its own libcudart.so.13, with --variant cpu too."""
    files = {"nvidia/cu13/lib/libcudart.so.13": gcc_so(tmp_path, "libcudart.so.13")}
    own = write_wheel(tmp_path / "own", "nvidia-cuda-runtime", files)
    for args in (("--runs-on", "8.0"), ("--variant", "cpu")):
        hygiene = standalone(own, *args)["hygiene"]
        assert failing(hygiene) == [], args
        assert any("the wheel is nvidia-cuda-runtime, which ships its own" in f["message"] for f in hygiene)
    other = write_wheel(tmp_path / "other", "pkg", files)
    msgs = failing(standalone(other, "--runs-on", "8.0")["hygiene"])
    assert [m for m in msgs if "a copy of the CUDA runtime grafted into the wheel" in m] == [msgs[0]]


def test_builds_chosen_at_run_time_pass_and_copies_fail(tmp_path: Path) -> None:
    base = "triton/backends/nvidia/lib"
    cupti = gcc_so(tmp_path, "libxprof.so.12")
    files = {
        f"{base}/cupti/libxprof.so": cupti,
        f"{base}/cupti/libxprof.so.12": cupti,
        f"{base}/cupti/libxcheck.so": gcc_so(tmp_path, "libxcheck.so", body="cuda 12"),
        f"{base}/cupti-blackwell/libxcheck.so": gcc_so(tmp_path, "libxcheck.so", body="cuda 13"),
    }
    hygiene = standalone(write_wheel(tmp_path, "triton", files), "--runs-on", "8.0")["hygiene"]
    msgs = failing(hygiene)
    assert [m for m in msgs if "is shipped" in m] == [
        f"libxprof.so.12 is shipped 2 times, the same bytes each time ({base}/cupti/libxprof.so, "
        f"{base}/cupti/libxprof.so.12): each copy can be loaded (by path), each with its own state, and the "
        "wheel carries the bytes 2 times; ship it once"
    ]
    assert any(
        f["ok"]
        and f["message"].startswith("libxcheck.so is shipped as 2 different builds in separate folders")
        for f in hygiene
    )


@pytest.mark.parametrize(
    ("runpath", "expected"),
    [
        (("$ORIGIN/../lib", "/project/build/triton/_C"), "unreached"),  # triton 3.8.0's plugins
        (("$ORIGIN/../_C",), "honest"),
    ],
)
def test_a_shipped_library_is_named_with_the_search_path_that_misses_it(
    tmp_path: Path, runpath: tuple[str, ...], expected: str
) -> None:
    files = {
        "triton/_C/libtriton.so": gcc_so(tmp_path, "libtriton.so"),
        "triton/plugins/libplugin.so": gcc_so(
            tmp_path, "libplugin.so", needed=("libtriton.so",), runpath=runpath
        ),
    }
    hygiene = standalone(write_wheel(tmp_path, "triton", files), "--runs-on", "8.0")["hygiene"]
    tag = [f for f in hygiene if f["message"].startswith(f"platform tag {TAG}")]
    assert len(tag) == 1
    if expected == "honest":
        assert tag[0]["ok"], tag[0]["message"]
        return
    assert not tag[0]["ok"]
    assert "the wheel does not ship" not in tag[0]["message"]
    assert (
        "triton/plugins/libplugin.so links libtriton.so, which the wheel ships as triton/_C/libtriton.so, but none "
        "of its RPATH/RUNPATH entries reaches it"
    ) in tag[0]["message"]
    assert "add '$ORIGIN/../_C'" in tag[0]["message"]


def test_a_library_the_wheel_does_not_ship_still_fails_the_tag(tmp_path: Path) -> None:
    files = {"pkg/_ext.so": gcc_so(tmp_path, "_ext.so", needed=("libabsent.so.1",), runpath=("$ORIGIN",))}
    hygiene = standalone(write_wheel(tmp_path, "pkg", files), "--runs-on", "8.0")["hygiene"]
    (msg,) = [m for m in failing(hygiene) if m.startswith(f"platform tag {TAG}")]
    assert f"it links libabsent.so.1, which {TAG} does not allow and the wheel does not ship" in msg


def test_the_loader_advises_plain_origin_for_a_sibling(tmp_path: Path) -> None:
    """nvidia-cusolver 12.0.4.66's libcusolverMg.so.12: no RUNPATH, libcublas.so.13 beside it."""
    requires = ("nvidia-cublas>=13", "nvidia-nvjitlink>=13")
    for runpath, ok in (((), False), (("$ORIGIN",), True)):
        mg = gcc_so(tmp_path, "libcusolverMg.so.12", needed=("libcublas.so.13",), runpath=runpath)
        wheel = write_wheel(
            tmp_path / str(ok),
            "nvidia-cusolver",
            {"nvidia/cu13/lib/libcusolverMg.so.12": mg},
            requires=requires,
        )
        msgs = failing(standalone(wheel, "--runs-on", "8.0")["loader"])
        if ok:
            assert msgs == []
        else:
            (msg,) = msgs
            assert msg.endswith("add '$ORIGIN'"), msg


def _header_only(tmp_path: Path) -> Path:
    files = {"nvidia/cu13/include/cub/cub.cuh": b"#pragma once\n", "nvidia/__init__.py": b""}
    return write_wheel(tmp_path, "nvidia-cuda-cccl", files, tag="manylinux2014_x86_64")


def test_a_header_only_wheel_is_a_note_standalone_and_fails_a_row(tmp_path: Path) -> None:
    wheel = _header_only(tmp_path)
    hygiene = standalone(wheel, "--runs-on", "8.0")["hygiene"]
    assert failing(hygiene) == []
    assert any(f["message"].startswith("note: the wheel is tagged manylinux2014_x86_64") for f in hygiene)
    row = Expectation("cu130", "13.0", (), (), row_id="cu130-py312-x86_64", checks=("hygiene",))
    result = audit_wheel(wheel, row)
    assert [f.message for f in result.findings if not f.ok] == [
        "the wheel is tagged manylinux2014_x86_64 but auditwheel finds no platform ELF file in it; a pure wheel "
        "is tagged 'any'"
    ]
