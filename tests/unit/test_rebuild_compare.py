"""verify --rebuild's pure half (release.publish.rebuild): which manifest entry a row is, and how a
rebuilt wheel differs from it. The build itself: tests/integration/test_verify_rebuild.py."""

from __future__ import annotations

import pytest

from release.core.errors import InputError
from release.publish import manifest as mf
from release.publish.rebuild import Rebuilt, manifest_entry, rebuild_problems

WHEEL = "tinyaxpy-0.3.0-cp312-cp312-manylinux_2_28_x86_64.whl"
ENTRY = mf.ManifestFile(WHEEL, "cpu", "cpu-py312-x86_64", "a" * 64, 1, "0" * 64, None)
MANIFEST = mf.Manifest("tinyaxpy", "0.3.0", "0" * 64, None, (ENTRY,))


def test_the_row_s_entry_or_the_rows_the_manifest_has() -> None:
    assert manifest_entry(MANIFEST, "cpu-py312-x86_64") == ENTRY
    with pytest.raises(
        InputError, match=r"lists no file of row 'cu130-py312-x86_64'; its rows: cpu-py312-x86_64"
    ):
        manifest_entry(MANIFEST, "cu130-py312-x86_64")


def test_the_same_bytes_pass_and_other_bytes_name_both_digests() -> None:
    assert rebuild_problems(ENTRY, Rebuilt("cpu-py312-x86_64", WHEEL, "a" * 64)) == []
    (problem,) = rebuild_problems(ENTRY, Rebuilt("cpu-py312-x86_64", WHEEL, "b" * 64))
    assert problem == (
        f"{WHEEL}: rebuilt with sha256 {'b' * 64}, the manifest says {'a' * 64}: this checkout does not build "
        "the published bytes [rule: reproducible]"
    )
    other = WHEEL.replace("0.3.0", "0.3.1")
    assert rebuild_problems(ENTRY, Rebuilt("cpu-py312-x86_64", other, "a" * 64)) == [
        f"the rebuild is {other}, the manifest lists {WHEEL} [rule: reproducible]"
    ]
