"""--cross-check: cuobjdump lists the same device code as the fatbin reader, file by file.

Every ELF file and device code file is compared, not only those the reader found device code in;
a cuobjdump that fails on one file marks that file's cross-check unavailable and keeps everything
else (the wheel's verdict, the other files' cross-checks).
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
from test_audit_fixtures import CASES, FIXTURES, WHEELS, run_cli

from release.binary.cuobjdump import ensure_cuobjdump
from release.core.machine import default_cache_dir

pytestmark = [pytest.mark.integration, pytest.mark.network]


def wheel_of(case_id: str) -> str:
    return str(WHEELS / next(c for c in CASES if c["id"] == case_id)["wheel"])


def cross(case_id: str, *extra: str) -> tuple[int, dict[str, Any]]:
    code, out, err = run_cli(
        [
            wheel_of(case_id),
            "--policy",
            str(FIXTURES / "policy.toml"),
            "--no-record",
            "--cross-check",
            "--json",
            *extra,
        ]
    )
    doc = json.loads(out)
    assert not doc["errors"], (doc["errors"], err)
    (result,) = doc["results"]
    return code, result


def findings(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f["library"]: f for f in result["findings"] if f["check"] == "cross_check"}


@pytest.mark.parametrize(
    "case_id",
    ["fx_good_cu130", "fx_union", "fx_tu_ptx_only", "fx_rdc_linked_claim", "gx_rdc_unlinked_on_h200",
     "fx_device_files_claim", "gx_sm90a_cu130_on_h200", "gx_ptx132_on_h200"],
)  # fmt: skip
def test_cross_check_agrees(case_id: str) -> None:
    case = next(c for c in CASES if c["id"] == case_id)
    _code, result = cross(case_id, *case["args"])
    found = findings(result)
    assert found and all(f["ok"] for f in found.values()), [f["message"] for f in found.values()]
    assert not any(
        f["details"].get("unavailable")
        for f in found.values()
        if f["library"] and not f["library"].endswith(".ptx")
    )


def test_every_elf_file_is_cross_checked() -> None:
    """The host library without device code is compared too (cuobjdump finds none in it either)."""
    _code, result = cross(
        "fx_device_files_claim", *next(c for c in CASES if c["id"] == "fx_device_files_claim")["args"]
    )
    found = findings(result)
    assert set(found) == {
        "fx_device_files/lib/libfx_kernels.so",
        "fx_device_files/kernels/gx.cubin",
        "fx_device_files/kernels/gx.fatbin",
        "fx_device_files/kernels/gx.ptx",
    }
    assert "the same 0 device code entries" in found["fx_device_files/lib/libfx_kernels.so"]["message"]
    assert "cuobjdump does not read those" in found["fx_device_files/kernels/gx.ptx"]["message"]


def test_a_cuobjdump_crash_on_one_library_keeps_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cuobjdump killed by a signal on libfx_b.so: that library's cross-check is unavailable, named by its
    wheel path; libfx_a.so is still compared, the wheel still gets its verdict (no exit 2, no lost results)."""
    real = ensure_cuobjdump(default_cache_dir(os.environ))
    crashing = tmp_path / "cuobjdump"
    crashing.write_text(
        "#!/bin/sh\n"
        'for arg in "$@"; do case "$arg" in *libfx_b.so) kill -SEGV $$;; esac; done\n'
        f'exec "{real}" "$@"\n',
        encoding="utf-8",
    )
    crashing.chmod(crashing.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("CUOBJDUMP", str(crashing))
    code, result = cross("fx_union")
    assert code == 1 and result["failed_checks"] == ["device_code", "gpus"]  # the fixture's own verdict
    found = findings(result)
    assert found["fx_union/lib/libfx_a.so"]["ok"] and "same" in found["fx_union/lib/libfx_a.so"]["message"]
    b = found["fx_union/lib/libfx_b.so"]
    assert b["ok"] and b["details"]["unavailable"]
    assert b["message"].startswith("libfx_b.so: cross-check unavailable")
    assert "wheelwright-audit-" not in b["message"]  # no temporary path that is gone once the audit ends
