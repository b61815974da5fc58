"""release.audit.reading.limits: caps, the inflation budget, the zip layout checks; release.core.sandbox: the sandbox for tools."""

from __future__ import annotations

import os
import re
import struct
import sys
import zipfile
from pathlib import Path

import pytest

from release.audit.reading.limits import (
    LIMITS,
    Budget,
    LimitExceeded,
    Limits,
    Stopped,
    central_directory_start,
    check_layout,
    first_few,
)
from release.core.errors import InputError, StepFailed
from release.core.sandbox import Sandbox, run_limited
from release.core.sizes import GIB, MIB, size


def test_caps() -> None:
    assert LIMITS.inflated_cap(1 * MIB) == 256 * MIB  # the floor
    assert LIMITS.inflated_cap(100 * MIB) == 10_000 * MIB  # 100 times
    assert LIMITS.inflated_cap(10 * GIB) == 32 * GIB  # the ceiling
    assert LIMITS.member_cap("pkg-1.0.dist-info/METADATA") == 16 * MIB
    assert LIMITS.member_cap("pkg-1.0.dist-info/WHEEL") == 64 * 1024
    assert LIMITS.member_cap("pkg-1.0.dist-info/RECORD") == 32 * MIB
    assert LIMITS.member_cap("pkg/METADATA") is None
    assert LIMITS.member_cap("pkg-1.0.dist-info/sub/METADATA") is None


def test_messages_stay_small() -> None:
    assert first_few(["a", "b"]) == "'a', 'b'"
    assert first_few([str(i) for i in range(1000)]) == "'0', '1', '2', '3', '4' and 995 more"
    assert len(first_few(["x" * 100_000])) < 300
    assert (size(16 * MIB), size(1536 * MIB), size(100)) == ("16 MiB", "1.5 GiB", "100 bytes")


def test_budget_refuses_past_the_cap_and_stops_the_others() -> None:
    budget = Budget("w.whl", 0, 10 * MIB, Limits(inflate_floor=1000, inflate_ratio=1))
    budget.inflated(1000, "a")
    with pytest.raises(LimitExceeded, match=r"w\.whl: its members inflate to more than 1000 bytes.*'b'"):
        budget.inflated(1, "b")
    assert isinstance(budget.error, LimitExceeded)
    with pytest.raises(Stopped):  # every other reader stops at its next chunk
        budget.inflated(1, "c")
    assert isinstance(budget.refuse(StepFailed("later")), Stopped), "the first refusal is the one reported"
    assert isinstance(budget.error, LimitExceeded)


def test_budget_disk_room() -> None:
    budget = Budget("w.whl", 0, 100)
    budget.written(100)
    with pytest.raises(StepFailed, match="set TMPDIR to a larger disk"):
        budget.written(1)


def _zip(path: Path, names: list[str], data: bytes = b"") -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in names:
            zf.writestr(name, data)
    return path


def _layout(path: Path, limits: Limits = LIMITS) -> None:
    with path.open("rb") as f:
        start = central_directory_start(f, path.stat().st_size, limits, path.name)
        with zipfile.ZipFile(path) as zf:
            check_layout(f, zf.infolist(), start, path.name, limits)


def test_entries_counted_before_zipfile_parses_them(tmp_path: Path) -> None:
    path = _zip(tmp_path / "w.whl", [f"m{i}" for i in range(11)])
    _layout(path, Limits(members=11))
    with pytest.raises(LimitExceeded, match="more than 10 members"):
        _layout(path, Limits(members=10))
    with pytest.raises(LimitExceeded, match=r"zip directory is .* over the limit of 100 bytes"):
        _layout(path, Limits(central_directory_bytes=100))
    (tmp_path / "x.whl").write_bytes(b"not a zip at all")
    with pytest.raises(InputError, match="no end of central directory"):
        _layout(tmp_path / "x.whl")


def _central_offset_of(blob: bytes | bytearray, name: str) -> int:
    """Where ``name``'s central directory header keeps its local header offset."""
    return blob.rfind(name.encode()) - 4


def test_overlapping_entries_are_a_zip_bomb(tmp_path: Path) -> None:
    path = _zip(tmp_path / "w.whl", ["a.bin", "b.bin"], b"x" * 1000)
    blob = bytearray(path.read_bytes())
    struct.pack_into("<L", blob, _central_offset_of(blob, "b.bin"), 0)  # b's entry points at a's header
    path.write_bytes(bytes(blob))
    with pytest.raises(InputError, match=r"1 zip entries overlap the data of another \('b.bin'\)"):
        _layout(path)


def test_missing_local_header_and_data_past_the_directory(tmp_path: Path) -> None:
    path = _zip(tmp_path / "w.whl", ["a.bin", "b.bin"], b"x" * 1000)
    blob = bytearray(path.read_bytes())
    struct.pack_into("<L", blob, _central_offset_of(blob, "b.bin"), 0x7FFFFFF0)
    path.write_bytes(bytes(blob))
    with pytest.raises(InputError, match="no local header where the directory says"):
        _layout(path)
    path = _zip(tmp_path / "w.whl", ["a.bin"], b"x" * 1000)
    blob = bytearray(path.read_bytes())
    struct.pack_into("<L", blob, blob.rfind(b"a.bin") - 46 + 20, 1 << 20)  # compressed size: 1 MiB
    path.write_bytes(bytes(blob))
    with pytest.raises(InputError, match="run past the directory"):
        _layout(path)


def test_declared_sizes_over_the_cap(tmp_path: Path) -> None:
    path = _zip(tmp_path / "w.whl", ["a.bin"], b"x" * 5000)
    _layout(path, Limits(inflate_floor=5000, inflate_ratio=1))
    with pytest.raises(LimitExceeded, match=r"declares 4\.9 KiB uncompressed, over the limit of 4\.9 KiB"):
        _layout(path, Limits(inflate_floor=4999, inflate_ratio=1))


# --------------------------------------------------------------------------- the sandbox


def _python(code: str, tmp_path: Path, sandbox: Sandbox) -> tuple[int, str, str, bool]:
    ran = run_limited([sys.executable, "-c", code], cwd=tmp_path, sandbox=sandbox)
    return ran.returncode, ran.stdout, ran.stderr, ran.timed_out


def test_sandbox_memory(tmp_path: Path) -> None:
    code, _, err, _ = _python("b = bytearray(1 << 30)", tmp_path, Sandbox(memory_bytes=256 * MIB))
    assert code != 0 and "MemoryError" in err


def test_sandbox_cpu_time(tmp_path: Path) -> None:
    sandbox = Sandbox(cpu_seconds=1, wall_seconds=30)
    ran = run_limited([sys.executable, "-c", "while True: pass"], cwd=tmp_path, sandbox=sandbox)
    assert not ran.ok and "CPU time" in ran.why(sandbox)


def test_sandbox_file_size(tmp_path: Path) -> None:
    sandbox = Sandbox(file_bytes=1 * MIB)
    ran = run_limited(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=8"], cwd=tmp_path, sandbox=sandbox)
    assert not ran.ok and "file size limit" in ran.why(sandbox)
    assert (tmp_path / "big").stat().st_size <= 1 * MIB


def test_sandbox_wall_clock_and_process_group(tmp_path: Path) -> None:
    sandbox = Sandbox(wall_seconds=0.5)
    code = "import subprocess, time; subprocess.Popen(['sleep', '60']); time.sleep(60)"
    ran = run_limited([sys.executable, "-c", code], cwd=tmp_path, sandbox=sandbox)
    assert ran.timed_out and "wall-clock" in ran.why(sandbox)


def test_sandbox_output_is_cut(tmp_path: Path) -> None:
    _, out, _, _ = _python("print('x' * 100_000)", tmp_path, Sandbox(output_chars=1000))
    assert len(out) == 1000
    assert not list(tmp_path.iterdir()), "the output files are removed"


def test_sandbox_environment_stdin_and_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CPATH", "/root/secret-include")
    monkeypatch.setenv("TWINE_PASSWORD", "pypi-secret")
    code = "import os, sys; print(sorted(os.environ)); print(repr(sys.stdin.read())); print(os.getsid(0))"
    rc, out, _, _ = _python(code, tmp_path, Sandbox())
    env, stdin, sid = out.splitlines()
    assert rc == 0
    assert env == repr(sorted(["LANG", "LC_ALL", "PATH", "TMPDIR"]))
    assert stdin == "''"
    assert int(sid) != os.getsid(0), "the tool runs in its own session: no terminal to read"


def test_docs_list_the_limits() -> None:
    """docs/security.md's table of limits is the code's."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(encoding="utf-8")
    table = doc.split("<!-- limits -->", 1)[1].split("<!-- /limits -->", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", table, re.M))
    values = {name: getattr(LIMITS, name) for name in Limits.__dataclass_fields__}
    assert set(rows) == set(values)
    for name, value in values.items():
        shown = size(value) if name.endswith(("bytes", "floor")) else f"{value:,}"
        assert rows[name] == shown, f"docs/security.md says {name} is {rows[name]}, the code {shown}"
