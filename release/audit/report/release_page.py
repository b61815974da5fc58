"""The release page, ``dist/audit.html``: the answer first, every wheel's report folded below.

0. *The run* (when the caller gives it): the terminal's summary, each row built, audited,
   smoke-tested, published, or left out and why, with the commit and the date.
1. *Where each wheel runs*: one grid, the CUDA wheels (one row per wheel and row id) by the GPUs of
   their GPU table (``release/resources/cuda.toml``'s named GPUs), each cell the per-wheel table's
   ``wheel`` column (:func:`release.audit.report.render.gpu_table_rows`: native, ptx-jit, partial,
   none), read as it is, never recomputed; the CPU wheels listed compactly below it.
2. *What failed*: every failing finding of every wheel (wheel, check, message), or one line
   saying that every wheel passed every check.
3. *The reports*: each wheel's full report (the same section as its ``<wheel>.audit.html``) in a
   ``<details>`` element, closed when the wheel passed, open when it failed.

Pure rendering: it reads :class:`AuditResult` values and returns text; the pipeline writes the file.
Every value from a wheel (its name, a message, a library path) is escaped.
"""

from __future__ import annotations

from collections.abc import Sequence

from release.audit import registry
from release.audit.model import AuditResult
from release.audit.report.page import SUPPORT_CLASSES, escape, page, wheel_section
from release.audit.report.render import gpu_table_rows
from release.summary import Report, left_out_lines, render_summary

ALL_PASSED = "Every wheel passed every check."

_STYLE = """
table.overview td.wheel, table.failures td { text-align: left; }
td.row { white-space: nowrap; }
table.failures td.message { white-space: pre-wrap; }
details.report { margin: .4rem 0; border: 1px solid #c8ccd1; padding: .3rem .6rem; }
details.report > summary { cursor: pointer; font-weight: 600; }
p.all-passed { color: #1a7f37; font-weight: 600; }
"""


def _what(result: AuditResult) -> str:
    """The row id, or the variant for an audit held to a variant alone."""
    exp = result.expectation
    return exp.row_id or f"variant {exp.variant}"


def _anchor(index: int) -> str:
    return f"report-{index}"


def _wheel_link(index: int, result: AuditResult) -> str:
    return f'<a href="#{_anchor(index)}">{escape(result.wheel)}</a>'


def _verdict_cell(result: AuditResult) -> str:
    if result.passed:
        return '<td class="pass">passed</td>'
    return '<td class="fail">FAILED</td>'


def _gpu_columns(results: Sequence[AuditResult]) -> list[tuple[str, str]]:
    """(GPU, cc) in the GPU table's order: the named GPUs every CUDA wheel's table holds."""
    columns: list[tuple[str, str]] = []
    for result in results:
        for row in result.gpu_table:
            if (row.name, row.cc) not in columns:
                columns.append((row.name, row.cc))
    return columns


def _overview(indexed: Sequence[tuple[int, AuditResult]]) -> str:
    cuda = [(i, r) for i, r in indexed if r.expectation.is_cuda]
    cpu = [(i, r) for i, r in indexed if not r.expectation.is_cuda]
    out = ['<section id="overview">', "<h2>Where each wheel runs</h2>"]
    if cuda:
        columns = _gpu_columns([r for _, r in cuda])
        out += [
            '<table class="grid overview">',
            "<thead><tr><th>row</th><th>wheel</th><th>audit</th>"
            + "".join(f"<th>{escape(name)}<br>{escape(cc)}</th>" for name, cc in columns)
            + "</tr></thead>",
            "<tbody>",
        ]
        for i, r in cuda:
            cells = [
                f'<td class="row">{escape(_what(r))}</td>',
                f'<td class="wheel">{_wheel_link(i, r)}</td>',
            ]
            cells.append(_verdict_cell(r))
            cells += _gpu_cells(r, columns)
            out.append('<tr class="cuda-wheel">' + "".join(cells) + "</tr>")
        out.append("</tbody></table>")
        out.append(
            '<p class="legend">native: SASS runs as is; ptx-jit: the driver compiles PTX first; '
            "partial: some translation units with kernels have no code for it; none: cannot run. "
            "A wheel runs where every library of it runs (the wheel column of its GPU table). "
            "* the row claims the GPU's compute capability; 'predicted': what coverage predicted from the "
            "row's list before the build, where the wheel differs. Each wheel's table holds only the GPUs "
            "of its own CPU; '-': a GPU of another CPU.</p>"
        )
    else:
        out.append("<p>No CUDA wheel in this release.</p>")
    if cpu:
        out.append("<h3>CPU wheels (no GPU code)</h3>")
        out.append('<ul class="cpu-wheels">')
        for i, r in cpu:
            word = '<span class="pass">passed</span>' if r.passed else '<span class="fail">FAILED</span>'
            out.append(f'<li class="cpu-wheel">{escape(_what(r))}: {_wheel_link(i, r)} {word}</li>')
        out.append("</ul>")
    out.append("</section>")
    return "\n".join(out)


def _gpu_cells(result: AuditResult, columns: Sequence[tuple[str, str]]) -> list[str]:
    """The wheel column of the per-wheel GPU table, one cell per GPU column; ``*`` where the row claims the
    GPU's capability, and coverage's prediction from the row's list (release.coverage) where it differs."""
    header, rows = gpu_table_rows(result)
    if not header:
        return [
            f'<td class="support none" colspan="{len(columns)}">no readable device code: runs on no GPU</td>'
        ]
    by_gpu = {(row[0], row[1]): row[-1] for row in rows}
    claimed = {(row.name, row.cc) for row in result.gpu_table if row.claimed}
    predicted = _predicted(result)
    return [
        _claimed_cell(by_gpu[c], c in claimed, predicted.get(c)) if c in by_gpu else "<td>-</td>"
        for c in columns
    ]


def _predicted(result: AuditResult) -> dict[tuple[str, str], str]:
    """What coverage predicts from the row's list for each GPU of the wheel's table (none without a list)."""
    exp = result.expectation
    if not exp.gpu_archs:
        return {}
    from release.coverage.predict import predict
    from release.resources.cuda import cuda

    names = {(row.name, row.cc) for row in result.gpu_table}
    gpus = [g for g in cuda().gpus if (g.name, g.cc) in names]
    return {(g.gpu.name, g.gpu.cc): g.support for g in predict(exp.gpu_archs, gpus, exp.train)}


def _claimed_cell(support: str, claimed: bool, predicted: str | None) -> str:
    word = support.split(" ", 1)[0]
    css = ("claimed " if claimed else "") + f"support {word if word in SUPPORT_CLASSES else 'other'}"
    extra = ""
    if predicted is not None and predicted != word:
        extra = f'<br><small class="predicted">predicted {escape(predicted)}</small>'
    return f'<td class="{css}">{escape(support)}{"*" if claimed else ""}{extra}</td>'


def _failures(indexed: Sequence[tuple[int, AuditResult]]) -> str:
    out = ['<section id="failures">', "<h2>Failing checks</h2>"]
    failing = [(i, r) for i, r in indexed if not r.passed]
    if not failing:
        out.append(f'<p class="all-passed">{escape(ALL_PASSED)}</p>')
        out.append("</section>")
        return "\n".join(out)
    out += [
        '<table class="grid failures">',
        "<thead><tr><th>wheel</th><th>row</th><th>check</th><th>library</th><th>message</th></tr></thead>",
        "<tbody>",
    ]
    for i, r in failing:
        for f in r.failures:
            out.append(
                '<tr class="failure">'
                f'<td class="wheel">{_wheel_link(i, r)}</td>'
                f'<td class="row">{escape(_what(r))}</td>'
                f'<td data-check="{escape(f.check)}">{escape(registry.title(f.check))}</td>'
                f"<td><code>{escape(f.library or '-')}</code></td>"
                f'<td class="message">{escape(f.message)}</td>'
                "</tr>"
            )
    out.append("</tbody></table>")
    out.append("</section>")
    return "\n".join(out)


def _folded(index: int, result: AuditResult) -> str:
    verdict = "passed" if result.passed else f"FAILED ({', '.join(result.failed_checks())})"
    opened = "" if result.passed else " open"
    css = "pass" if result.passed else "fail"
    return "\n".join(
        [
            f'<details class="report {css}" id="{_anchor(index)}"{opened}>',
            f"<summary>{escape(result.wheel)} ({escape(_what(result))}): "
            f'<span class="{css}">{escape(verdict)}</span></summary>',
            wheel_section(result),
            "</details>",
        ]
    )


def _summary(summary: str | None, commit: str | None, date: str | None) -> str:
    """The page's opening: the terminal's summary of the run (each row built, audited, smoke-tested,
    published, or left out and why), as the terminal printed it, with the commit and the date."""
    if summary is None and commit is None and date is None:
        return ""
    made = ", ".join(
        part
        for part in (f"commit <code>{escape(commit)}</code>" if commit else "", escape(date or ""))
        if part
    )
    out = ['<section id="summary">', "<h2>The run</h2>"]
    if made:
        out.append(f'<p class="made">{made}</p>')
    if summary:
        out.append(f'<pre class="summary">{escape(summary)}</pre>')
    out.append("</section>")
    return "\n".join(out)


def render_release_html(
    results: Sequence[AuditResult],
    *,
    title: str = "Release audit",
    summary: str | None = None,
    commit: str | None = None,
    date: str | None = None,
) -> str:
    """The whole page: the run's summary with its commit and date (when given: the terminal's text,
    :func:`release.summary.render_summary` and the rows left out), the grid, the failing checks,
    then each wheel's report folded."""
    indexed = list(enumerate(results))
    opening = _summary(summary, commit, date)
    if not indexed:
        return page(title, opening + "<p>No wheel was audited.</p>", extra_style=_STYLE)
    body = [
        opening,
        _overview(indexed),
        _failures(indexed),
        '<section id="reports">',
        "<h2>Each wheel's report</h2>",
        *(_folded(i, r) for i, r in indexed),
        "</section>",
    ]
    return page(title, "\n".join(body), extra_style=_STYLE)


def run_summary(reports: Sequence[Report]) -> str:
    """The page's opening text: the terminal's summary of the rows that ran (built, audited,
    smoke-tested, published) and of the rows left out and why, as ``release`` prints them (pure)."""
    text = render_summary(reports)
    out = left_out_lines(reports)
    if out:
        left = sum(r.reason is not None for r in reports)
        text += f"\n\n{left} row(s) not built on this machine:\n" + "\n".join(out)
    return text
