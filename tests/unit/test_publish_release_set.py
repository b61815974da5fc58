"""The ``release-set`` refusal says which index, which file and how to get past it (issue 33 item 2).

After a rehearsal, publishing one row (``nox -s upload-cu130-py312``) met the rehearsal's other
files of the same version and said only "remove it from the index". Now the refusal names the
variant's index (and its URL when the caller knows it), the file's path on a local rehearsal index,
and the ways out: remove it, publish its row too, or bump the version. The publish refusal of a
record audited against a variant names the row's audit command with the user's options when the
caller has them. Pure; milliseconds.
"""

from __future__ import annotations

from pathlib import Path

from release.publish.guards.plan import PublishPlan, check_audit_record, unexpected_problem
from release.records import AuditRecord

OTHER = "tinyaxpy-0.3.0+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"
WHEEL = "tinyaxpy-0.3.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl"


def test_the_refusal_names_the_variants_index_and_the_fixes() -> None:
    text = unexpected_problem(OTHER)
    assert text.startswith(
        f"{OTHER}: on the index for this release's version but not in the audited set (the cu130 index: "
    ), text
    assert f"remove {OTHER} from the cu130 index" in text and "bump the version" in text, text
    assert "publish its row too" in text and text.endswith("[rule: release-set]"), text


def test_on_a_local_rehearsal_index_it_names_the_files_path() -> None:
    folder = Path(".wheelwright/index/packages/cu130")
    url = "http://127.0.0.1:4040/cu130/simple/"
    (text,) = PublishPlan((), (), (), (OTHER,)).problems(where=url, local_folder=folder)
    assert f"(the cu130 index, {url}: " in text, text
    assert f"this is the local rehearsal index: remove {folder / OTHER}" in text, text


def test_an_sdist_names_the_index_without_a_variant() -> None:
    text = unexpected_problem("tinyaxpy-0.3.0.tar.gz")
    assert "audited set (the index: " in text and "remove tinyaxpy-0.3.0.tar.gz from the index" in text


def _variant_record() -> AuditRecord:
    return AuditRecord(
        wheel=WHEEL,
        sha256="1" * 64,
        policy_sha256="a" * 64,
        row=None,
        variant="cu130",
        passed=True,
        findings=(),
    )


def test_a_variant_audits_refusal_names_the_rows_audit_as_given() -> None:
    hint = "`python -m release audit cu130-py312-x86_64 --policy /p/rows.toml --dist /d`"
    text = check_audit_record(WHEEL, "1" * 64, _variant_record(), policy_sha256="a" * 64, rerun=hint)
    assert text is not None and f"audit it as its row ({hint}) to publish it" in text, text
    bare = check_audit_record(WHEEL, "1" * 64, _variant_record(), policy_sha256="a" * 64)
    assert bare is not None and "(python -m release audit ROW)" in bare, bare
