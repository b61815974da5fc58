"""Expansion and selection: pure functions over the seed policy, checked against a golden file.

Regenerate the golden file after an intended policy change:
    python -m pytest tests/unit/test_matrix.py --regen-golden
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from release.commands.plan import plan_json
from release.core.errors import InputError, SelectionError
from release.policy.load import load_policy
from release.policy.matrix import check_offered, expand, github_matrix, load_offered, pick_pr_row, select
from release.policy.model import Policy

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "seed_plan.json"


@pytest.fixture(scope="module")
def policy() -> Policy:
    return load_policy(ROOT / "rows.toml")


def test_golden_snapshot(policy: Policy, request: pytest.FixtureRequest) -> None:
    data = plan_json(policy, expand(policy))
    data["policy"] = "rows.toml"  # the path as loaded; the snapshot holds what the file expands to
    text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    if request.config.getoption("--regen-golden"):
        GOLDEN.write_text(text, encoding="utf-8")
    assert GOLDEN.read_text(encoding="utf-8") == text, "run with --regen-golden if the change is intended"


def test_seed_counts_and_ids(policy: Policy) -> None:
    rows = expand(policy)
    cuda = [r for r in rows if r.is_cuda]
    assert len(cuda) == 24  # 2 arches x 3 trains x 4 Pythons
    assert len(rows) - len(cuda) == 8  # CPU: 2 arches x 4 Pythons
    assert len({r.id for r in rows}) == len(rows)
    row = next(r for r in rows if r.id == "cu130-py312-x86_64")
    assert row.torch_cuda_arch_list == "7.5;8.0;8.6;8.9;9.0;10.0;12.0+PTX"
    assert row.cmake_cuda_architectures.endswith("120-real;120-virtual")
    assert row.cibw_identifier == "cp312-manylinux_x86_64"
    assert row.platform_tag == "manylinux_2_28_x86_64"
    assert row.rpath_targets == ("nvidia/cu13/lib",)
    assert row.session_suffix == "cu130-py312"
    arm = next(r for r in rows if r.id == "cu126-py310-aarch64")
    assert arm.torch_cuda_arch_list == "8.0;9.0+PTX"
    assert arm.rpath_targets == ("nvidia/cuda_runtime/lib",)
    cpu = next(r for r in rows if r.id == "cpu-py312-x86_64")
    assert (cpu.gpu_archs, cpu.cuda_packages, cpu.local_version) == ((), (), None)


def test_expand_is_pure(policy: Policy) -> None:
    assert expand(policy) == expand(policy)


def test_select_by_glob(policy: Policy) -> None:
    rows = expand(policy)
    chosen = select(policy, rows, patterns=("cu13*-py312-*",), platform="x86_64")
    assert [r.id for r in chosen] == ["cu130-py312-x86_64", "cu132-py312-x86_64"]


def test_select_nothing_fails(policy: Policy) -> None:
    with pytest.raises(SelectionError, match="no row matches 'cu999-\\*'"):
        select(policy, expand(policy), patterns=("cu999-*",))


def test_jetpack_fails_with_its_reason(policy: Policy) -> None:
    with pytest.raises(SelectionError, match=r"jetpack.*excluded.*a Jetson is an aarch64 machine"):
        select(policy, expand(policy), platform="jetpack")
    with pytest.raises(SelectionError, match="excluded platform jetpack"):
        select(policy, expand(policy), patterns=("cu130-py312-jetpack",))


def test_excluded_python_fails_with_its_reason(policy: Policy) -> None:
    with pytest.raises(SelectionError, match=r"excluded python 3\.14.*broken upstream"):
        select(policy, expand(policy), patterns=("cu130-py314-*",))


def test_pr_picks_newest_cuda_on_offer(policy: Policy) -> None:
    rows = expand(policy)
    assert pick_pr_row(rows, "x86_64").id == "cu132-py313-x86_64"
    # The builders do not offer CUDA 13.2 images: preference moves down, it does not fail.
    offered = load_offered(
        json.dumps(
            {
                "version": 1,
                "identifiers": [r.cibw_identifier for r in rows],
                "images": [r.builder_image for r in rows if r.train in ("12.6", "13.0")],
            }
        ),
        "offered.json",
    )
    assert pick_pr_row(rows, "x86_64", offered).id == "cu130-py313-x86_64"
    assert pick_pr_row(rows, "aarch64", offered).id == "cu130-py313-aarch64"


def test_offered_names_every_missing_combination(policy: Policy) -> None:
    rows = expand(policy)
    offered = load_offered(
        json.dumps(
            {
                "version": 1,
                "identifiers": [r.cibw_identifier for r in rows if r.python != "3.13"],
                "images": sorted({r.builder_image for r in rows}),
            }
        ),
        "offered.json",
    )
    with pytest.raises(SelectionError) as info:
        check_offered(rows, offered)
    message = str(info.value)
    missing = [r.id for r in rows if r.python == "3.13"]
    assert f"{len(missing)} advertised row(s) are not offered" in message
    for row_id in missing:
        assert row_id in message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("not json", "not valid JSON"),
        ('{"version": 1, "identifiers": "cp312"}', "'identifiers' must be a list"),
        ('{"version": 2, "identifiers": [], "images": []}', "'version' must be 1"),
        ('{"version": 1, "identifers": [], "images": []}', "unknown keys"),
    ],
)
def test_offered_bad_input(text: str, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        load_offered(text, "offered.json")


def test_github_matrix_is_the_expansion(policy: Policy) -> None:
    rows = expand(policy)
    include = github_matrix(rows)["include"]
    assert [i["id"] for i in include] == [r.id for r in rows]
    assert {i["runner"] for i in include if i["platform"] == "aarch64"} == {"ubuntu-24.04-arm"}


def test_duplicate_rows_are_refused_in_linear_time(policy: Policy) -> None:
    import dataclasses
    import time

    once = expand(policy)
    twice = dataclasses.replace(policy, trains=policy.trains + policy.trains[:1])
    with pytest.raises(SelectionError, match=r"duplicate rows \['cu126-py310-aarch64', "):
        expand(twice)
    # 5,000 copies of one train: 40,000 rows. A quadratic check (list.count per row) takes
    # minutes here; a linear one well under a second.
    many = dataclasses.replace(policy, trains=policy.trains[:1] * 5000)
    start = time.monotonic()
    with pytest.raises(SelectionError, match="duplicate rows"):
        expand(many)
    assert time.monotonic() - start < 5.0
    assert expand(policy) == once


def test_policy_digest_is_of_the_file_loaded(policy: Policy) -> None:
    import hashlib

    assert policy.sha256 == hashlib.sha256((ROOT / "rows.toml").read_bytes()).hexdigest()
    assert policy.source == ROOT / "rows.toml"


def test_a_cibuildwheel_identifier_selects_its_rows(policy: Policy) -> None:
    """Issue 24 item 9: cibuildwheel's identifiers select rows (every variant of that Python and arch)."""
    rows = expand(policy)
    got = {r.id for r in select(policy, rows, patterns=("cp312-manylinux_x86_64",))}
    assert got == {f"{v}-py312-x86_64" for v in ("cpu", "cu126", "cu130", "cu132")}
    got = {r.id for r in select(policy, rows, patterns=("cp31[13]-manylinux_aarch64",))}
    assert got == {f"{v}-py31{m}-aarch64" for v in ("cpu", "cu126", "cu130", "cu132") for m in (1, 3)}
    with pytest.raises(SelectionError, match="no row matches 'cp39-manylinux_x86_64'"):
        select(policy, rows, patterns=("cp39-manylinux_x86_64",))
    with pytest.raises(SelectionError, match="no row matches 'cp312-musllinux_x86_64'"):
        select(policy, rows, patterns=("cp312-musllinux_x86_64",))
