"""Hostile and malformed policies through the real command line: each is a clean refusal.

Every file under tests/policies/bad/ (written by scripts/make_bad_policies.py, with its
expected refusal in expected.json), and the paths no file can hold (a FIFO, a device, a
directory, an empty path, a 4 GiB file), run as ``python -m release plan --policy X``
under a 2 GiB address-space limit and a 60 s deadline. Each must exit 2 with one line,
``error: <path>: <key>: <problem>``, no traceback, nothing on stdout, and no secret
from the file repeated. Valid controls, the largest matrix a policy can describe
included, still plan (and list through nox) quickly.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
from helpers.policy import stub_project
from helpers.scripts import load_script

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "policies" / "bad"
EXPECTED: dict[str, dict[str, object]] = json.loads((BAD / "expected.json").read_text(encoding="utf-8"))
DEADLINE_S = 60.0
MEMORY_BYTES = 2 << 30


def _generator() -> ModuleType:
    return load_script("make_bad_policies")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))


def _run(args: list[str], **env: str) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run(
        args,
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if k != "WHEELWRIGHT_POLICY"}, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
        timeout=DEADLINE_S,
        preexec_fn=_limit_memory,
    )
    return proc, time.monotonic() - start


def _plan(policy: str, *extra: str) -> tuple[subprocess.CompletedProcess[str], float]:
    return _run([sys.executable, "-m", "release", "plan", "--policy", policy, *extra])


def _assert_clean_refusal(proc: subprocess.CompletedProcess[str], seconds: float, shown: str) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"error: {shown}: "), proc.stderr
    assert proc.stderr.count("\n") == 1, "one line"
    assert "SECRET" not in proc.stderr
    assert seconds < DEADLINE_S
    return proc.stderr


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_policy_file_is_a_clean_refusal(case: str) -> None:
    path = BAD / f"{case}.toml"
    proc, seconds = _plan(str(path))
    message = _assert_clean_refusal(proc, seconds, str(path))
    key = str(EXPECTED[case]["key"])
    if key:
        assert f": {key}: " in message, message
    fragments = EXPECTED[case]["fragments"]
    assert isinstance(fragments, list)
    for fragment in fragments:
        assert fragment in message, message


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    fifo = tmp_path / "rows.toml"
    os.mkfifo(fifo)
    proc, seconds = _plan(str(fifo))
    message = _assert_clean_refusal(proc, seconds, str(fifo))
    assert "is a FIFO (named pipe), not a regular file" in message
    assert seconds < 10, "refused at once, not after a wait"


@pytest.mark.parametrize(
    ("path", "fragment"),
    [
        ("/dev/zero", "is a device, not a regular file"),
        ("/dev/urandom", "is a device, not a regular file"),
        ("/dev/stdin", "not a regular file"),
        ("/", "is a directory, not a regular file"),
        ("", "the policy path is empty; pass --policy PATH"),
        ("/nonexistent/rows.toml", "file not found"),
    ],
)
def test_paths_that_are_not_policy_files(path: str, fragment: str) -> None:
    proc, seconds = _plan(path)
    message = _assert_clean_refusal(proc, seconds, path or "''")
    assert fragment in message


def test_a_huge_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = _generator().oversize_policy(tmp_path / "rows.toml", 4 << 30)
    proc, seconds = _plan(str(big))
    message = _assert_clean_refusal(proc, seconds, str(big))
    assert "a policy file is at most 1024 KiB" in message
    assert seconds < 10


def test_the_badpin_policy_is_refused_by_build_too_naming_it() -> None:
    """The 13.2 train pinning a 13.0 nvcc used to plan fine and fail in the build naming
    rows.toml; now every command refuses it at load, naming the file given."""
    bad = BAD / "badpin.toml"
    proc, seconds = _run(
        [sys.executable, "-m", "release", "build", "cu132-py312-*", "--dry-run", "--policy", str(bad)]
    )
    message = _assert_clean_refusal(proc, seconds, str(bad))
    assert 'train."13.2".pypi_toolchain[0]: pins nvidia-cuda-nvcc==13.0.88, which is not CUDA 13.2' in message
    assert "rows.toml" not in message


@pytest.mark.parametrize(
    "policy", ["fifo", "/dev/zero", str(BAD / "nested_arrays.toml"), str(BAD / "target_query_token.toml")]
)
def test_nox_list_refuses_a_hostile_policy_cleanly(policy: str, tmp_path: Path) -> None:
    if policy == "fifo":
        policy = str(tmp_path / "rows.toml")
        os.mkfifo(policy)
    proc, seconds = _run([sys.executable, "-m", "nox", "--list"], WHEELWRIGHT_POLICY=policy)
    assert proc.returncode == 2, proc.stderr
    assert f"error: {policy}: " in proc.stderr
    assert "Traceback" not in proc.stderr and "SECRET" not in proc.stderr
    assert seconds < DEADLINE_S


@pytest.mark.parametrize("policy", ["rows.toml", "tests/fixtures/policy.toml"])
def test_valid_controls_still_plan(policy: str) -> None:
    proc, seconds = _plan(policy)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert " rows: " in proc.stdout.splitlines()[-1]
    assert seconds < DEADLINE_S


def test_the_largest_matrix_plans_and_lists_quickly(tmp_path: Path) -> None:
    """Every manylinux arch x every known CPython x every known CUDA train (and CPU):
    loading, expanding and listing stay linear, so well inside a few seconds."""
    generator = _generator()
    path = tmp_path / "largest.toml"
    path.write_text(generator.largest_valid_policy(), encoding="utf-8")
    stub_project(tmp_path, "examples/tinyaxpy")
    proc, seconds = _plan(str(path))
    assert proc.returncode == 0, proc.stderr
    rows = int(proc.stdout.splitlines()[-1].split()[0])
    assert rows >= 1000
    assert seconds < 10, f"plan of {rows} rows took {seconds:.1f} s"
    proc, seconds = _run([sys.executable, "-m", "nox", "--list"], WHEELWRIGHT_POLICY=str(path))
    assert proc.returncode == 0, proc.stderr
    assert seconds < 20, f"nox -l of {rows} rows took {seconds:.1f} s"


def test_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """`plan --json | head -1`: the reader leaves after one line, the writer stops without a
    traceback and with 141 (128 + SIGPIPE), as a shell reports for a writer whose reader left."""
    path = tmp_path / "largest.toml"
    path.write_text(_generator().largest_valid_policy(), encoding="utf-8")
    stub_project(tmp_path, "examples/tinyaxpy")
    with subprocess.Popen(
        [sys.executable, "-m", "release", "plan", "--json", "--policy", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
    ) as writer:
        assert writer.stdout is not None and writer.stderr is not None
        assert writer.stdout.readline() == b"{\n"
        writer.stdout.close()  # far more than a pipe's buffer is still to come
        err = writer.stderr.read().decode()
        code = writer.wait(timeout=DEADLINE_S)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert code == 141, err


def test_count_of_hostile_policy_cases() -> None:
    special = 1 + 6 + 1  # FIFO, the paths of test_paths_that_are_not_policy_files, the 4 GiB file
    total = len(EXPECTED) + special
    print(f"\n{total} malformed or hostile policies: {len(EXPECTED)} files, {special} paths")
    assert total >= 60
