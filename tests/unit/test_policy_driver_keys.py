"""The policy keys behind two audit claims, checked at load: a train's ``oldest_driver`` (the
audit predicts for it) and ``matrix.embedded_device_code`` (device code embedded as data), each
reaching every row. Parsed for real from the repository's rows.toml with one change."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path
from typing import Any

import pytest
from helpers.policy import stub_project

from release.core.errors import PolicyError
from release.policy.load import parse_policy
from release.policy.matrix import expand
from release.policy.model import Policy

ROOT = Path(__file__).resolve().parents[2]
BASE: dict[str, Any] = tomllib.loads((ROOT / "rows.toml").read_text(encoding="utf-8"))


def _load(
    tmp_path: Path, *, train: dict[str, Any] | None = None, matrix: dict[str, Any] | None = None
) -> Policy:
    data = copy.deepcopy(BASE)
    for version, keys in (train or {}).items():
        data["train"][version].update(keys)
    data["matrix"].update(matrix or {})
    stub_project(tmp_path, "examples/tinyaxpy")
    return parse_policy(data, "rows.toml", source=tmp_path / "rows.toml", sha256="0" * 64)


def _refusal(tmp_path: Path, **change: dict[str, Any]) -> str:
    with pytest.raises(PolicyError) as info:
        _load(tmp_path, **change)
    return str(info.value)


def test_oldest_driver_reaches_the_trains_rows_only(tmp_path: Path) -> None:
    rows = expand(_load(tmp_path, train={"13.2": {"oldest_driver": "13.0"}}))
    assert {r.oldest_driver for r in rows if r.variant == "cu132"} == {"13.0"}
    assert {r.oldest_driver for r in rows if r.variant != "cu132"} == {None}
    by_driver = expand(_load(tmp_path, train={"13.2": {"oldest_driver": "580.65.06"}}))
    assert {r.to_json()["oldest_driver"] for r in by_driver if r.variant == "cu132"} == {"580.65.06"}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("thirteen", "train.\"13.2\".oldest_driver: 'thirteen': write the CUDA version the driver supports"),
        ("9.9", 'train."13.2".oldest_driver: 9.9: not a CUDA release wheelwright knows'),
        ("13.2", None),  # the train's own release: fine
        ("100.1", 'train."13.2".oldest_driver: 100.1: older than every release wheelwright knows'),
    ],
)
def test_oldest_driver_is_checked_at_load(tmp_path: Path, value: str, message: str | None) -> None:
    if message is None:
        assert _load(tmp_path, train={"13.2": {"oldest_driver": value}}).trains[-1].oldest_driver == value
        return
    said = _refusal(tmp_path, train={"13.2": {"oldest_driver": value}})
    assert said.startswith("rows.toml: ") and message in said, said


def test_an_oldest_driver_newer_than_its_train_is_refused(tmp_path: Path) -> None:
    said = _refusal(tmp_path, train={"13.0": {"oldest_driver": "13.2"}})
    assert 'train."13.0".oldest_driver: CUDA 13.2 is newer than the train (13.0)' in said
    assert "write 13.0 or older" in said


def test_embedded_device_code_defaults_to_reject_and_reaches_every_row(tmp_path: Path) -> None:
    assert {r.embedded_device_code for r in expand(_load(tmp_path))} == {"reject"}
    allowed = expand(_load(tmp_path, matrix={"embedded_device_code": "allow"}))
    assert {r.embedded_device_code for r in allowed} == {"allow"}
    said = _refusal(tmp_path, matrix={"embedded_device_code": "maybe"})
    assert "matrix.embedded_device_code: 'maybe' is not allowed" in said, said
