"""Every malformed-policy rule: the file under tests/policies/bad/ must fail with a message
naming the file, the key path, what is wrong and how to fix it, and exit 2 with no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from release.core.errors import PolicyError
from release.policy.load import load_policy

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "policies" / "bad"


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


# case -> (key path the message must name, fragments the message must contain)
EXPECTED: dict[str, tuple[str, tuple[str, ...]]] = {
    "unknown_key": ("matrix.cpu_whel", ("unknown key 'cpu_whel'", "did you mean 'cpu_wheel'?")),
    "wrong_type": ("matrix.pythons", ("expected a list of strings", "got a string")),
    "wrong_type_nested": ('train."12.6".cuda_packages[0].libraries', ("expected a list of strings",)),
    "train_without_archs": (
        'train."13.0".gpu_archs.x86_64',
        ("has no arch list", "never falls back to detecting"),
    ),
    "train_empty_archs": ('train."13.0".gpu_archs.x86_64', ("has no arch list",)),
    "train_without_table": ("matrix.trains[1]", ('CUDA 12.8 has no [train."12.8"] table',)),
    "unreal_arch": ('train."13.0".gpu_archs.x86_64[4]', ("'9.9' is not a real compute capability",)),
    "lowercase_ptx": ('train."13.0".gpu_archs.x86_64[6]', ("'12.0+ptx'", "upper case", "write '12.0+PTX'")),
    "mixedcase_ptx": ('train."13.0".gpu_archs.x86_64[6]', ("'12.0+Ptx'", "write '12.0+PTX'")),
    "ptx_not_newest": ('train."13.0".gpu_archs.x86_64[4]', ("'9.0+PTX'", "newest arch of this row is 12.0")),
    "newest_without_ptx": ('train."13.0".gpu_archs.x86_64[6]', ("must also ship as PTX", "'12.0+PTX'")),
    "python_outside_allowlist": ('train."13.2".pythons[0]', ("Python 3.9 is outside the allowlist",)),
    "python_excluded": ("matrix.pythons[4]", ("Python 3.14 is excluded", "broken upstream")),
    "python_free_threaded": ("matrix.pythons[1]", ("3.13t is excluded", "free-threaded")),
    "duplicate_rows": ("matrix.pythons[3]", ("duplicate entry '3.12'",)),
    "duplicate_train": ("matrix.trains[3]", ("duplicate entry '13.0'",)),
    "duplicate_arch": ('train."13.0".gpu_archs.x86_64[3]', ("duplicate entry '8.6'",)),
    "enum_misspelt": ("matrix.cpu_wheel", ("'enabled' is not allowed", "did you mean 'enable'?")),
    "variant_mismatch": ('train."12.6".variant', ("'cu130' does not match CUDA 12.6", "'cu126'")),
    "empty_matrix": ("matrix.platforms", ("the matrix is empty",)),
    "empty_matrix_no_trains": ("matrix.trains", ("the matrix is empty",)),
    "platform_excluded": ("matrix.platforms[2]", ("'jetpack' is excluded", "stopped shipping device code")),
    "not_toml": ("", ("not valid TOML", f"line {_line_of(BAD / 'not_toml.toml', 'cpu_wheel = enable')}")),
    "target_credentials": (
        "target.production.index.cu126.upload_url",
        ("credentials never go in rows.toml",),
    ),
    "target_missing_variant": ("target.production.index", ("no index for variant(s) cu132",)),
    "target_unknown_variant": (
        "target.production.index.cu133",
        ("unknown variant 'cu133'", "did you mean 'cu132'?"),
    ),
    "target_local_not_rehearsal": ("target.rehearsal.local_server", ("rehearsals only",)),
    "schema_version": ("schema_version", ("2 is not supported",)),
    "unpinned_toolchain": ('train."13.0".pypi_toolchain[0]', ("must be pinned to one exact version",)),
}


def test_every_bad_policy_file_has_an_expectation() -> None:
    files = {p.stem for p in BAD.glob("*.toml")}
    assert files == set(EXPECTED), "regenerate with scripts/make_bad_policies.py and update EXPECTED"


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_policy_message(case: str) -> None:
    key, fragments = EXPECTED[case]
    path = BAD / f"{case}.toml"
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    if key:
        assert f": {key}: " in message, message
    for fragment in fragments:
        assert fragment in message, message


@pytest.mark.parametrize("case", ["unknown_key", "lowercase_ptx", "not_toml", "empty_matrix"])
def test_bad_policy_cli_exit_2_no_traceback(case: str) -> None:
    path = BAD / f"{case}.toml"
    proc = subprocess.run(
        [sys.executable, "-m", "release", "plan", "--policy", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(f"error: {path}: ")
    assert "Traceback" not in proc.stderr


def test_missing_policy_file(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="file not found"):
        load_policy(tmp_path / "nope.toml")


def test_seed_policy_loads() -> None:
    policy = load_policy(ROOT / "rows.toml")
    assert policy.platforms == ("x86_64", "aarch64")
    assert policy.pythons == ("3.10", "3.11", "3.12", "3.13")
    assert [t.version for t in policy.trains] == ["12.6", "13.0", "13.2"]
    t130 = policy.train("13.0")
    assert [str(a) for a in t130.gpu_archs["x86_64"]] == [
        "7.5",
        "8.0",
        "8.6",
        "8.9",
        "9.0",
        "10.0",
        "12.0+PTX",
    ]
    assert [str(a) for a in t130.gpu_archs["aarch64"]] == ["9.0", "10.0", "11.0+PTX"]
    t126 = policy.train("12.6")
    assert [str(a) for a in t126.gpu_archs["x86_64"]] == ["7.5", "8.0", "8.6", "8.9", "9.0+PTX"]
    assert [str(a) for a in t126.gpu_archs["aarch64"]] == ["8.0", "9.0+PTX"]
    assert t126.cuda_packages[0].name == "nvidia-cuda-runtime-cu12"
    assert t126.cuda_packages[0].installs_to == "nvidia/cuda_runtime/lib"
    assert t130.cuda_packages[0].installs_to == "nvidia/cu13/lib"
    assert t130.cuda_packages[0].also_accepted == ("cuda-toolkit[cudart]",)
    assert {e.value for e in policy.exclusions} == {"3.14", "3.13t", "win_amd64", "jetpack"}
