"""What a person reads after a release, and while it runs: pure text from the pipeline's reports.

- :func:`step_line`: one line as a row's step finishes (``build ok (1.2 s)``);
- :func:`failure_block`: a failing step shown whole: the FAIL line, the error, the step's log;
- :func:`render_summary`: the table of the rows that ran; :func:`left_out_lines`: the rows this
  machine cannot build, one line per reason;
- :func:`summary_markdown`: the same for a GitHub Actions job summary, with each CUDA wheel's
  GPU support table.

Nothing here runs anything or decides a verdict; :mod:`release.pipeline` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from release.policy.matrix import Row

if TYPE_CHECKING:
    from pathlib import Path

    from release.audit.model import AuditResult

STEPS = ("build", "audit", "smoke", "publish")
INDENT = "      "
CLIP = 60


class Report(Protocol):
    """What the summary reads of a row's report (:class:`release.pipeline.RowReport`)."""

    @property
    def row(self) -> Row: ...
    @property
    def wheel(self) -> Path | None: ...
    @property
    def status(self) -> dict[str, str]: ...
    @property
    def seconds(self) -> float: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def audit(self) -> AuditResult | None: ...


def step_line(step: str, status: str, seconds: float) -> str:
    """``build ok (1.2 s)``, ``smoke ok (no GPU: run skipped) (3.0 s)``."""
    return f"{step} {status} ({seconds:.1f} s)"


def row_title(row_id: str, status: dict[str, str], times: dict[str, float]) -> str:
    """``cu130-py312-x86_64: build ok (1.2 s), audit FAIL (0.3 s)``: a row's steps in one line."""
    steps = [
        step_line(s, "FAIL" if status.get(s, "").startswith("FAIL") else status.get(s, "?"), t)
        for s, t in times.items()
    ]
    return f"{row_id}: {', '.join(steps)}"


def first_line(text: str) -> str:
    stripped = text.strip()
    return stripped.splitlines()[0] if stripped else ""


def failure_block(row_id: str, step: str, seconds: float, error: str, log: Sequence[str]) -> str:
    """The FAIL line, the rest of the error, and the step's whole log, indented."""
    head, *rest = error.strip().splitlines() or [""]
    out = [f"FAIL [{row_id}] {step} ({seconds:.1f} s): {head}"]
    out += [INDENT + line for line in rest]
    if log:
        out.append(f"   the {step} step's log:")
        out += [INDENT + line for line in log]
    return "\n".join(out)


def _size(rep: Report) -> str:
    wheel = rep.wheel
    return f"{wheel.stat().st_size / 1024:.0f} KiB" if wheel is not None and wheel.exists() else "-"


def row_label(row: Row) -> str:
    """The row's id, and the Pythons its one wheel serves when that is more than one (abi3, py3-none):
    ``cu130-py310-x86_64 (py3.10-3.13)``."""
    pythons = row.pythons
    return row.id if len(pythons) < 2 else f"{row.id} (py{pythons[0]}-{pythons[-1]})"


def _cells(rep: Report) -> list[str]:
    return [
        row_label(rep.row),
        rep.wheel.name if rep.wheel else "-",
        _size(rep),
        *(rep.status.get(s, "-") for s in STEPS),
        f"{rep.seconds:.1f} s" if rep.seconds else "-",
    ]


HEADER = ["row", "wheel", "size", *STEPS, "time"]


def render_summary(reports: Sequence[Report]) -> str:
    """The rows that ran, one line each (the rows left out are :func:`left_out_lines`)."""
    ran = [r for r in reports if r.reason is None]
    cells = [
        [c if len(c) <= CLIP else c[: CLIP - 3] + "..." for c in line] for line in [HEADER, *map(_cells, ran)]
    ]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADER))]
    out = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def compact_rows(rows: Sequence[Row]) -> str:
    """``cu126 × py3.10, 3.11, 3.12, 3.13 on x86_64`` for a whole block of rows (an abi3 or py3-none row
    counts for every Python its wheel serves), else their ids."""
    parts: list[str] = []
    platforms = list(dict.fromkeys(r.platform for r in rows))
    for platform in platforms:
        mine = [r for r in rows if r.platform == platform]
        variants = list(dict.fromkeys(r.variant for r in mine))
        pythons = list(dict.fromkeys(py for r in mine for py in r.pythons))  # every Python served
        cells = {(r.variant, py) for r in mine for py in r.pythons}
        if len(cells) > 1 and len(cells) == len(variants) * len(pythons):
            parts.append(f"{'/'.join(variants)} × py{', '.join(pythons)} on {platform}")
        else:
            parts.append(", ".join(map(row_label, mine)))
    return "; ".join(parts)


def reason_line(reason: str, row_id: str) -> str:
    """A reason in one line: its first line (less the row's name) and its ``to fix:`` line."""
    lines = [line.strip() for line in reason.strip().splitlines() if line.strip()]
    if not lines:
        return "no reason given"
    head = lines[0].removeprefix(f"row {row_id} ").rstrip(":").replace(row_id, "this row")
    fix = next((line for line in lines[1:] if line.startswith("to fix:")), None)
    return f"{head}; {fix}" if fix else head


def _groups(reports: Sequence[Report]) -> list[list[Report]]:
    groups: dict[str, list[Report]] = {}
    for r in reports:
        if r.reason is not None:
            groups.setdefault(r.reason.replace(r.row.id, "{row}"), []).append(r)
    return list(groups.values())


def left_out_lines(reports: Sequence[Report], *, verbose: bool = False) -> list[str]:
    """One line per distinct reason, naming the rows it applies to (``verbose``: the whole reason)."""
    lines: list[str] = []
    for members in _groups(reports):
        first = members[0]
        count = f"{len(members)} row{'s' if len(members) != 1 else ''}"
        lines.append(
            f"  {count}, {compact_rows([m.row for m in members])}: {reason_line(first.reason or '', first.row.id)}"
        )
        if verbose:
            lines += [INDENT + line for line in (first.reason or "").splitlines()]
    return lines


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def summary_markdown(
    reports: Sequence[Report], install: Sequence[str], *, title: str, html: Path | None = None
) -> str:
    """The job summary: the table of the rows that ran, the rows left out, the install lines,
    and the GPU support table of each CUDA wheel that was audited."""
    from release.audit.report.render import render_gpu_markdown

    ran = [r for r in reports if r.reason is None]
    out = [
        f"## {title}",
        "",
        "| " + " | ".join(HEADER) + " |",
        "| " + " | ".join("---" for _ in HEADER) + " |",
    ]
    out += ["| " + " | ".join(_md(c) for c in _cells(r)) + " |" for r in ran]
    left = left_out_lines(reports)
    if left:
        out += ["", f"{sum(r.reason is not None for r in reports)} row(s) not built on this machine:", ""]
        out += [f"- {_md(line.strip())}" for line in left]
    if install:
        out += ["", "Install lines (checked against the published indexes):", "", "```", *install, "```"]
    if html is not None:
        out += ["", f"The audit report of every wheel, as one page: `{html}` (keep it as an artifact)."]
    for r in ran:
        if r.audit is not None and r.row.is_cuda:
            out += ["", f"### {r.row.id}", "", render_gpu_markdown(r.audit).rstrip("\n")]
    return "\n".join(out) + "\n"
