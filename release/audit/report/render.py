"""Render audit results: a human report, versioned JSON, and a markdown GPU table.

Renderers only read :class:`~release.audit.model.AuditResult` values; they never
decide anything. JSON is ``{"version": 1, ...}`` with sorted keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from release.audit import registry
from release.audit.model import AuditResult, Finding, GpuRow

REPORT_JSON_VERSION = 1

_LEGEND = (
    "native: SASS runs as is; ptx-jit: the driver compiles PTX first; partial: some translation units "
    "with kernels have no code for it; none: cannot run"
)


def fold(message: str, limit: int = 1000) -> str:
    """A message of ``limit`` characters or more, folded for a terminal: the first items of its list,
    "and N more", then its last items (what follows the list: the fix); the JSON keeps it whole. Pure."""
    sep = max(("; ", ", "), key=message.count)  # the list's separator: the one that splits it most
    parts = message.split(sep)
    if len(message) < limit or len(parts) < 3:
        return message
    head: list[str] = []
    while len(sep.join(head)) < limit * 0.6 and len(head) < len(parts) - 1:
        head.append(parts[len(head)])
    tail = [parts[-1][: int(limit * 0.3)] + ("..." if len(parts[-1]) > limit * 0.3 else "")]
    while (
        len(parts) - len(head) - len(tail) > 1 and len(sep.join([parts[-len(tail) - 1], *tail])) < limit * 0.3
    ):
        tail.insert(0, parts[-len(tail) - 1])
    more = len(parts) - len(head) - len(tail)
    return (
        f"{sep.join(head)}{sep}and {more} more (the whole list: --json){sep}{sep.join(tail)}"
        if more
        else message
    )


def _finding_lines(f: Finding) -> list[str]:
    mark = "✓" if f.ok else "✗"
    first, *rest = fold(f.message).splitlines() or [""]
    return [f"  {mark} {first}", *(f"      {line}" for line in rest)]


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _cell(row: GpuRow, lib: str) -> str:
    """``native``, or ``ptx-jit (CUDA 13.2+)`` when the path needs a newer driver than the library's major."""
    support = row.libraries[lib]
    need = row.needs.get(lib)
    if support == "ptx-jit" and need:
        return f"{support} ({need.split(' (')[0].removeprefix('CUDA ')}+ driver)"
    return support


def gpu_table_rows(result: AuditResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the GPU table: GPU, capability, claimed, each library, the wheel."""
    if not result.gpu_table:
        return [], []
    libs = list(result.gpu_table[0].libraries)
    # a library the loader cannot load (rdc never device-linked) is said so in its column, not "none"
    unloadable = {str(i.get("library")) for i in result.inventory if i.get("loads") is False}
    header = ["GPU", "cc", "claimed", *(_short(lib) for lib in libs), "wheel"]
    rows = [
        [
            row.name,
            row.cc,
            "yes" if row.claimed else "",
            *("cannot load" if lib in unloadable else _cell(row, lib) for lib in libs),
            row.wheel,
        ]
        for row in result.gpu_table
    ]
    return header, rows


def render_gpu_markdown(result: AuditResult) -> str:
    header, rows = gpu_table_rows(result)
    if not header:
        return f"`{result.wheel}` carries no readable device code: it runs on no GPU.\n"
    out = [
        f"GPU support of `{result.wheel}` ({_LEGEND}).",
        "",
        "| " + " | ".join(header) + " |",
        "| " + " | ".join("---" for _ in header) + " |",
    ]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def _plain_table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def claim_text(result: AuditResult) -> str:
    """The claim the wheel was held to, in the audit's claim syntax."""
    exp = result.expectation
    parts = [";".join(str(a) for a in exp.gpu_archs)] if exp.gpu_archs else []
    parts += [f"{name}={';'.join(str(a) for a in archs)}" for name, archs in exp.library_archs]
    return " ".join(parts)


def _what(result: AuditResult) -> str:
    exp = result.expectation
    if exp.row_id:
        return f"row {exp.row_id}"
    train = f", CUDA {exp.train}" if exp.train else ""
    how = f" ({exp.train_source})" if exp.standalone and exp.train_source else ""
    kind = "a CUDA wheel" if exp.standalone and exp.variant == "cuda" else f"variant {exp.variant}"
    return f"{kind}{train}{how}" + (", no policy" if exp.standalone else "")


def render_text(result: AuditResult) -> str:
    exp = result.expectation
    archs = claim_text(result) or ("-" if not exp.is_cuda else "none given")
    first = f"{result.wheel}: {exp.by_design}" if exp.by_design else result.wheel  # said first, not failed
    out = [first, f"  audited against {_what(result)} (GPU archs: {archs})"]
    if exp.runs_on:
        out.append(f"  must run on: {', '.join(f'{a}.{b}' for a, b in exp.runs_on)}")
    if exp.driver is not None:
        out.append(f"  predicted for a CUDA {exp.driver.label} driver ({exp.driver_source or 'the policy'})")
    if result.partial:
        out.append(f"  only these checks ran: {', '.join(result.checks_run)} (a partial audit)")
    if result.arch_list_found:
        out.append(f"  device code found, as a claim: {result.arch_list_found}")
    for check in (*registry.CHECKS, *registry.OPTIONAL_CHECKS):
        found = [f for f in result.findings if f.check == check]
        if not found:
            continue
        out.append(registry.title(check))
        for f in found:
            out += _finding_lines(f)
    header, rows = gpu_table_rows(result)
    if header:
        out.append(f"GPU support ({_LEGEND})")
        out += ["  " + line for line in _plain_table(header, rows)]
    failures = result.failures
    if failures:
        checks = ", ".join(result.failed_checks())
        out.append(f"FAILED: {len(failures)} failing finding{'s' if len(failures) != 1 else ''} ({checks})")
    else:
        out.append(f"PASSED: {len(result.findings)} findings, none failing")
    return "\n".join(out)


def result_json(result: AuditResult) -> dict[str, Any]:
    exp = result.expectation
    return {
        "wheel": result.wheel,
        "sha256": result.sha256,
        "passed": result.passed,
        "row": exp.row_id,
        "variant": exp.variant,
        "train": exp.train,
        "train_source": exp.train_source,
        "standalone": exp.standalone,
        "gpu_archs": [str(a) for a in exp.gpu_archs],
        "library_archs": {name: [str(a) for a in archs] for name, archs in exp.library_archs},
        "claim": claim_text(result) or None,
        "runs_on": [f"{a}.{b}" for a, b in exp.runs_on],
        "driver": exp.driver.label if exp.driver else None,
        "arch_list_found": result.arch_list_found,
        "checks_run": list(result.checks_run),
        "partial": result.partial,
        "failed_checks": list(result.failed_checks()),
        "findings": [f.to_json() for f in result.findings],
        "gpu_table": [row.to_json() for row in result.gpu_table],
        "inventory": [dict(item) for item in result.inventory],
        "timings": {k: round(v, 3) for k, v in result.timings.items()},
    }


def render_json(results: Sequence[AuditResult], errors: Sequence[dict[str, Any]] = ()) -> str:
    """``{"version": 1, "results": [...], "errors": [...]}``: one entry per wheel."""
    doc = {
        "version": REPORT_JSON_VERSION,
        "results": [result_json(r) for r in results],
        "errors": list(errors),
    }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False)
