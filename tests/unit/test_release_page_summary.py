"""The release page opens with the terminal's summary, the commit and the date, then the GPU grid
(issue 33 item 5). The page's renderer takes them (release.audit.report.release_page); the summary is
the terminal's own text (release.summary.render_summary), shown as it is, escaped."""

from __future__ import annotations

from pathlib import Path

from release.audit.model import AuditResult, Expectation
from release.audit.report.release_page import render_release_html

SUMMARY = (
    "row               build  audit  smoke  publish\n"
    "cpu-py312-x86_64  ok     ok     ok     ok\n"
    "  6 rows, cu126 × py3.10, 3.11, 3.12, 3.13 on x86_64: no CUDA 12.6 toolkit here; to fix: <CUDA_HOME>"
)


def cpu_result() -> AuditResult:
    exp = Expectation("cpu", None, (), (), row_id="cpu-py312-x86_64")
    return AuditResult(
        "tinyaxpy-0.3.0-cp312-cp312-manylinux_2_28_x86_64.whl", Path("x.whl"), "0" * 64, exp, (), (), None
    )


def test_the_page_opens_with_the_runs_summary_commit_and_date_then_the_grid() -> None:
    html = render_release_html([cpu_result()], summary=SUMMARY, commit="33577b9", date="2026-12-06 11:50 UTC")
    assert html.index('id="summary"') < html.index('id="overview"') < html.index('id="failures"')
    assert "commit <code>33577b9</code>, 2026-12-06 11:50 UTC" in html
    assert "cpu-py312-x86_64  ok     ok     ok     ok" in html
    assert "to fix: &lt;CUDA_HOME&gt;" in html  # the terminal's text, escaped


def test_without_a_summary_the_page_is_as_before() -> None:
    assert 'id="summary"' not in render_release_html([cpu_result()])
