"""Render audit results: a human report, versioned JSON, and a markdown GPU table.

Renderers only read :class:`~release.audit.model.AuditResult` values; they never
decide anything. JSON is ``{"version": 1, ...}`` with sorted keys.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from release.audit.model import CHECKS, OPTIONAL_CHECKS, AuditResult, Finding

REPORT_JSON_VERSION = 1

TITLES = {
    "libraries": "libraries",
    "device_code": "device code",
    "gpus": "GPUs (per translation unit)",
    "packages": "declared CUDA packages",
    "loader": "loader (RPATH/RUNPATH)",
    "hygiene": "hygiene",
    "cpp_consumer": "C++ consumer",
    "cross_check": "cuobjdump cross-check",
}
_LEGEND = "native: SASS runs as is; ptx-jit: the driver compiles PTX first; none: cannot run"


def _finding_lines(f: Finding) -> list[str]:
    mark = "✓" if f.ok else "✗"
    first, *rest = f.message.splitlines() or [""]
    return [f"  {mark} {first}", *(f"      {line}" for line in rest)]


def _short(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def gpu_table_rows(result: AuditResult) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the GPU table: GPU, capability, claimed, each library, the wheel."""
    if not result.gpu_table:
        return [], []
    libs = list(result.gpu_table[0].libraries)
    header = ["GPU", "cc", "claimed", *(_short(lib) for lib in libs), "wheel"]
    rows = [
        [row.name, row.cc, "yes" if row.claimed else "", *(row.libraries[lib] for lib in libs), row.wheel]
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


def render_text(result: AuditResult) -> str:
    exp = result.expectation
    what = f"row {exp.row_id}" if exp.row_id else f"variant {exp.variant}"
    archs = ";".join(str(a) for a in exp.gpu_archs) or ("-" if not exp.is_cuda else "none given")
    out = [f"{result.wheel}", f"  audited against {what} (GPU archs: {archs})"]
    if result.arch_list_found:
        out.append(f"  device code found, as an arch list: {result.arch_list_found}")
    for check in (*CHECKS, *OPTIONAL_CHECKS):
        found = [f for f in result.findings if f.check == check]
        if not found:
            continue
        out.append(TITLES[check])
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
        "gpu_archs": [str(a) for a in exp.gpu_archs],
        "arch_list_found": result.arch_list_found,
        "failed_checks": list(result.failed_checks()),
        "findings": [f.to_json() for f in result.findings],
        "gpu_table": [row.to_json() for row in result.gpu_table],
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
