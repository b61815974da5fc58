"""Every malformed-policy rule: each file under tests/policies/bad/ must fail to load with a
message naming the file, the key path, what is wrong and how to fix it.

The files and their expected refusals (tests/policies/bad/expected.json) are written by
scripts/make_bad_policies.py; the same cases run through the command line, with a time and
memory bound, in tests/integration/test_hostile_policies.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
from helpers.policy import stub_project

from release.core.errors import PolicyError
from release.policy.load import load_policy

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / "tests" / "policies" / "bad"
EXPECTED: dict[str, dict[str, object]] = json.loads((BAD / "expected.json").read_text(encoding="utf-8"))
FIRST_29 = {
    "unknown_key", "wrong_type", "wrong_type_nested", "train_without_archs", "train_empty_archs",
    "train_without_table", "unreal_arch", "lowercase_ptx", "mixedcase_ptx", "ptx_not_newest",
    "newest_without_ptx", "python_outside_allowlist", "python_excluded", "python_free_threaded",
    "duplicate_rows", "duplicate_train", "duplicate_arch", "enum_misspelt", "variant_mismatch",
    "empty_matrix", "empty_matrix_no_trains", "platform_excluded", "not_toml", "target_credentials",
    "target_missing_variant", "target_unknown_variant", "target_local_not_rehearsal", "schema_version",
    "unpinned_toolchain",
}  # fmt: skip


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_bad_policies", ROOT / "scripts" / "make_bad_policies.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("make_bad_policies", module)  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_bad_policy_file_has_an_expectation() -> None:
    files = {p.stem for p in BAD.glob("*.toml")}
    assert files == set(EXPECTED), "regenerate with scripts/make_bad_policies.py"
    assert files >= FIRST_29, "the first 29 cases are kept"
    assert len(files - FIRST_29) >= 30, "30 or more malformed or hostile policies beyond the first 29"
    print(f"{len(files)} bad policies ({len(files - FIRST_29)} added for hostile input)")


def test_committed_files_are_what_the_generator_writes() -> None:
    cases = {c.name: c for c in _generator().cases()}
    assert set(cases) == set(EXPECTED)
    for name, case in cases.items():
        assert (BAD / f"{name}.toml").read_bytes() == case.make(), f"{name}: run scripts/make_bad_policies.py"
        assert EXPECTED[name] == {"key": case.key, "fragments": list(case.fragments)}, name


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_bad_policy_message(case: str) -> None:
    key = str(EXPECTED[case]["key"])
    fragments = EXPECTED[case]["fragments"]
    assert isinstance(fragments, list)
    path = BAD / f"{case}.toml"
    with pytest.raises(PolicyError) as info:
        load_policy(path)
    message = str(info.value)
    assert message.startswith(f"{path}: "), message
    if key:
        assert f": {key}: " in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert "SECRET" not in message, "a credential from the file was repeated in the message"
    assert "\n" not in message, "one line: a newline in a value is shown escaped"


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


def test_policy_carries_the_sha256_of_the_bytes_read_and_where_they_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = (ROOT / "rows.toml").read_bytes()
    copy = tmp_path / "copy.toml"
    copy.write_bytes(raw)
    stub_project(tmp_path, "examples/tinyaxpy")
    policy = load_policy(copy)
    assert policy.sha256 == hashlib.sha256(raw).hexdigest()
    assert policy.source == copy
    assert policy.path == str(copy)
    monkeypatch.chdir(tmp_path)
    relative = load_policy("copy.toml")
    assert (relative.path, relative.source, relative.sha256) == ("copy.toml", copy, policy.sha256)
    copy.write_bytes(raw.replace(b"# CPU architectures", b"# The CPU architectures"))
    assert load_policy(copy).sha256 != policy.sha256, "a comment changes the bytes, so the digest"


def test_toolchain_pins_of_the_train_pass() -> None:
    from release.policy.trains import pypi_nvcc_version

    policy = load_policy(ROOT / "rows.toml")
    assert pypi_nvcc_version(policy.train("13.2").pypi_toolchain) == "13.2.86"
    assert pypi_nvcc_version(policy.train("13.0").pypi_toolchain) == "13.0.88"
    assert policy.train("12.6").pypi_toolchain == ()
    assert pypi_nvcc_version(("nvidia-cuda-runtime==13.2.86",)) is None
    assert pypi_nvcc_version(("NVIDIA_CUDA_NVCC==13.0.88",)) == "13.0.88"
