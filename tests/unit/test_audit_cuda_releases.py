"""release/resources/cuda.toml's CUDA releases, PTX ISA versions, drivers and GPU driver floors."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.text import edited

from release.resources.cuda import ResourceError, cuda, parse

TABLE = Path(__file__).resolve().parents[2] / "release" / "resources" / "cuda.toml"


def test_releases_know_their_ptx_isa_and_driver() -> None:
    facts = cuda()
    assert [r.label for r in facts.releases][:2] == ["11.0", "11.1"]
    assert facts.release((13, 2)) is not None and facts.release((13, 2)).ptx_isa == (9, 2)  # type: ignore[union-attr]
    assert facts.release_for_ptx_isa((9, 2)).label == "13.2"  # type: ignore[union-attr]
    assert facts.release_for_ptx_isa((8, 5)).label == "12.5"  # type: ignore[union-attr]  # 12.6 kept 8.5
    assert facts.release_for_ptx_isa((9, 9)) is None
    assert facts.release_for_driver("580.159.04").label == "13.0"  # type: ignore[union-attr]  # the lent H200
    assert facts.release_for_driver("570.26").label == "12.8"  # type: ignore[union-attr]
    assert facts.release_for_driver("440.33") is None
    assert {g.name: g.since for g in facts.gpus}["RTX 50 / RTX PRO"] == (12, 8)
    assert facts.toolkit_extras["cudart"] == ("nvidia-cuda-runtime",)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (('[release."12.1"]\nptx_isa = "8.1"', '[release."12.1"]\nptx_isa = "7.9"'), 'release."12.1".ptx_isa: older than'),
        (('driver = "580.65.06"', 'driver = "five-eighty"'), "is not a driver version"),
        (('driver = "580.65.06"', 'driver = "500.1"'), 'release."13.0".driver: older than'),
        (('[release."13.2"]\nptx_isa = "9.2"', '[release."13.2"]\nptx_isa = "9.2"\nbranch = "595"'), "must be { ptx_isa }"),
        (('"9.0" = "11.8"', '"9.0" = "eleven"'), "is not a version like"),
        (('"8.0" = "11.0"', '"8.0" = "10.0"'), "older than every [release]"),
        (('cudart = ["nvidia-cuda-runtime"]', "cudart = []"), "toolkit_extras.cudart"),
    ],
)  # fmt: skip
def test_a_broken_release_table_is_refused(edit: tuple[str, str], expected: str) -> None:
    with pytest.raises(
        ResourceError, match=expected.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")
    ):
        parse(edited(TABLE.read_text(encoding="utf-8"), edit))
