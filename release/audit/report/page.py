"""Render audit results as one static HTML page: the GPU support grid, the findings, the inventory.

No JavaScript, no external resources: the page opens from a file, from a CI artifact or
from an index. Like the other renderers it only reads :class:`AuditResult` values.

``<wheel>.audit.html`` is written beside each audit record; the release page (``dist/audit.html``,
every wheel of a release) is :mod:`release.audit.report.release_page`'s, built on this module.
"""

from __future__ import annotations

import html

from release.audit import registry
from release.audit.model import AuditResult
from release.audit.report.render import claim_text, gpu_table_rows

HTML_SUFFIX = ".audit.html"

# native / ptx-jit / none, and the columns that are not a support value.
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5rem; color: #1b1f24; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
table.grid { border-collapse: collapse; margin: .6rem 0; }
table.grid th, table.grid td { border: 1px solid #c8ccd1; padding: .25rem .5rem; text-align: center; }
table.grid th { background: #f3f4f6; }
td.native { background: #2da44e; color: #fff; }
td.ptx-jit { background: #d4a72c; color: #1b1f24; }
td.partial { background: #e16f24; color: #fff; }
td.none { background: #cf222e; color: #fff; }
td.gpu { text-align: left; }
.pass { color: #1a7f37; } .fail { color: #cf222e; font-weight: 600; }
ul.findings { list-style: none; padding-left: .5rem; }
ul.findings li { margin: .15rem 0; white-space: pre-wrap; }
.legend span { display: inline-block; padding: .1rem .5rem; margin-right: .4rem; }
"""
SUPPORT_CLASSES = ("native", "ptx-jit", "partial", "none")


def escape(text: object) -> str:
    """Any value as HTML text (a wheel's names and messages are untrusted)."""
    return html.escape(str(text), quote=True)


_e = escape


def support_cell(value: str) -> str:
    word = value.split(" ", 1)[0]
    css = word if word in SUPPORT_CLASSES else "other"
    return f'<td class="support {css}">{_e(value)}</td>'


def _grid(result: AuditResult) -> str:
    header, rows = gpu_table_rows(result)
    if not header:
        return f"<p>{_e(result.wheel)} carries no readable device code: it runs on no GPU.</p>"
    lib_columns = len(header) - 4  # GPU, cc, claimed, ...libraries..., wheel
    out = [
        '<table class="grid">',
        "<thead><tr>" + "".join(f"<th>{_e(h)}</th>" for h in header) + "</tr></thead>",
    ]
    out.append("<tbody>")
    for row in rows:
        gpu, cc, claimed, *support = row
        cells = [f'<td class="gpu">{_e(gpu)}</td>', f"<td>{_e(cc)}</td>", f"<td>{_e(claimed)}</td>"]
        cells += [support_cell(v) for v in support[:lib_columns]]
        cells.append(support_cell(support[-1]))
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _findings(result: AuditResult) -> str:
    out: list[str] = []
    for check in (*registry.CHECKS, *registry.OPTIONAL_CHECKS):
        found = [f for f in result.findings if f.check == check]
        if not found:
            continue
        out.append(f"<h3>{_e(registry.title(check))}</h3>")
        out.append('<ul class="findings">')
        for f in found:
            css, mark = ("pass", "✓") if f.ok else ("fail", "✗")
            out.append(f'<li class="finding {css}" data-check="{_e(check)}">{mark} {_e(f.message)}</li>')
        out.append("</ul>")
    return "\n".join(out)


def wheel_section(result: AuditResult) -> str:
    exp = result.expectation
    what = f"row {exp.row_id}" if exp.row_id else f"variant {exp.variant}"
    archs = claim_text(result) or "-"
    verdict = (
        '<p class="verdict pass">PASSED</p>'
        if result.passed
        else f'<p class="verdict fail">FAILED: {len(result.failures)} failing finding(s) '
        f"({_e(', '.join(result.failed_checks()))})</p>"
    )
    found = f"<p>Device code found, as a claim: <code>{_e(result.arch_list_found)}</code></p>"
    return "\n".join(
        [
            f'<section class="wheel" id="{_e(result.wheel)}">',
            f"<h2>{_e(result.wheel)}</h2>",
            f"<p>Audited against {_e(what)}; claimed GPU archs <code>{_e(archs)}</code>; "
            f"sha256 <code>{_e(result.sha256)}</code></p>",
            verdict,
            found if result.arch_list_found else "",
            "<h3>GPU support</h3>",
            '<p class="legend"><span class="native" style="background:#2da44e;color:#fff">native</span>'
            '<span style="background:#d4a72c">ptx-jit</span>'
            '<span style="background:#e16f24;color:#fff">partial</span>'
            '<span style="background:#cf222e;color:#fff">none</span></p>',
            _grid(result),
            _findings(result),
            _inventory(result),
            "</section>",
        ]
    )


def _inventory(result: AuditResult) -> str:
    """Per library: its claim read back, its entries grouped by target, its translation units."""
    if not result.inventory:
        return ""
    out = ["<h3>Device code inventory</h3>", '<table class="grid"><thead><tr>',
           "<th>library</th><th>claim read back</th><th>entries</th><th>units (with kernels)</th>"
           "<th>loads</th></tr></thead><tbody>"]  # fmt: skip
    for item in result.inventory:
        entries = ", ".join(
            f"{e['target']}×{e['count']}"
            + (f" PTX {e['ptx_isa']}" if e.get("ptx_isa") else "")
            + (" reloc" if e.get("relocatable") else "")
            for e in item.get("entries", [])
        )
        units = item.get("units", {})
        out.append(
            f'<tr><td class="gpu">{_e(item["library"])}</td><td><code>{_e(item.get("claim") or "-")}</code></td>'
            f'<td class="gpu">{_e(entries)}</td><td>{_e(units.get("total"))} ({_e(units.get("with_kernels"))})</td>'
            f"<td>{'yes' if item.get('loads') else 'no'}</td></tr>"
        )
    out.append("</tbody></table>")
    return "\n".join(out)


def page(title: str, body: str, *, extra_style: str = "") -> str:
    """A whole self-contained document: the style inline, no script, no external resource."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(title)}</title><style>{_STYLE}{extra_style}</style></head>\n"
        f"<body>\n<h1>{_e(title)}</h1>\n{body}\n</body></html>\n"
    )


def render_html(result: AuditResult) -> str:
    """One wheel's page."""
    return page(f"Audit of {result.wheel}", wheel_section(result))
