"""Coverage as text: one grid per CPU (its GPUs down, the rows across), then each row against its GPU
dependencies. Cells: ``native``, ``jit`` (PTX JIT, driver of the row's train or newer), ``-`` (nothing
runs), ``n/a`` (a generic wheel of the row's CUDA cannot reach that GPU); ``*`` marks a capability the
row's list claims."""

from __future__ import annotations

from collections.abc import Sequence

from release.coverage.run import CoverageReport, RowReport

__all__ = ["render", "render_grid"]

_CELL = {"native": "native", "ptx-jit": "jit", "none": "-"}


def _table(header: Sequence[str], lines: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(x[i]) for x in [header, *lines]) for i in range(len(header))]
    out = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip()]
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    return out


def _columns(rows: Sequence[RowReport]) -> list[tuple[str, RowReport, list[str]]]:
    """Rows of one CPU with the same train and list share a column, named by their variant."""
    groups: dict[tuple[str | None, str], list[RowReport]] = {}
    for r in rows:
        groups.setdefault((r.row.train, r.row.archs), []).append(r)
    out = []
    for members in groups.values():
        ids = [m.row.row_id for m in members]
        head = ids[0] if len(ids) == 1 else f"{ids[0].split('-')[0]} ({len(ids)} rows)"
        out.append((head, members[0], ids))
    return out


def render_grid(rows: Sequence[RowReport]) -> list[str]:
    """One grid per CPU, in the rows' order; rows of the same train and list share a column."""
    out: list[str] = []
    for cpu in dict.fromkeys(r.row.cpu for r in rows):
        columns = _columns([r for r in rows if r.row.cpu == cpu])
        gpus: dict[tuple[str, str], None] = {}
        for _, r, _ids in columns:
            for g in r.row.gpus:
                gpus[(g.gpu.name, g.gpu.cc)] = None
            for gpu, _ in r.row.out_of_reach:
                gpus[(gpu.name, gpu.cc)] = None
        lines = []
        for name, cc in gpus:
            cells = []
            for _, r, _ids in columns:
                got = next((g for g in r.row.gpus if (g.gpu.name, g.gpu.cc) == (name, cc)), None)
                cells.append("n/a" if got is None else _CELL[got.support] + ("*" if got.claimed else ""))
            lines.append([name, cc, *cells])
        out.append(
            f"{cpu}: which GPUs each row's gpu_archs serve (* claimed; jit: by PTX JIT; n/a: out of reach)"
        )
        out += _table(["GPU", "cc", *(head for head, _, _ in columns)], lines)
        for head, r, ids in columns:
            rows_ = f" ({', '.join(ids)})" if len(ids) > 1 else ""
            out.append(f"  {head}: gpu_archs {r.row.archs}, CUDA {r.row.train}{rows_}")
            out += [f"    n/a {g.name} ({g.cc}): {why}" for g, why in r.row.out_of_reach]
            jit = sorted({g.needs_driver for g in r.row.gpus if g.needs_driver})
            out += [f"    jit needs a driver of {need}" for need in jit]
        out.append("")
    return out


def _gpus(names: Sequence[str]) -> str:
    return ", ".join(names) if names else "none"


def render_dependencies(rows: Sequence[RowReport]) -> list[str]:
    out: list[str] = []
    for r in rows:
        for package, why in r.not_read:
            out.append(f"{r.row.row_id} against {package}: not read: {why}")
        for d in r.dependencies:
            lost = [f"{g.name} ({g.cc})" for g in d.lost]
            served = [f"{g.name} ({g.cc})" for g, dep, _ in d.support if dep != "none"]
            mark = "✗" if d.failed else ("!" if d.lost or d.dead or d.disjoint else "✓")
            out.append(f"{mark} {r.row.row_id} against {d.package} ({d.wheel}, gpu_coverage = {d.mode!r}):")
            out.append(f"    {d.package} runs on: {_gpus(served)}")
            out.append(f"    {d.package} carries: {d.carried_text}")
            out.append(f"    as a list: {d.taken_text or 'none (no plain SASS)'}")
            out.append(f"    lost (the dependency runs there, the row does not): {_gpus(lost)}")
            out.append(f"    dead (claimed, no GPU the dependency serves): {_gpus(d.dead)}")
            if d.disjoint:
                out.append(f"    the row serves no GPU {d.package} serves")
            out += [f"    Jetson: {g.name} ({g.cc}): {verdict}" for g, verdict in d.jetson]
            if d.mode == "take":
                out.append(f"    taken: gpu_archs {d.taken_text} (instead of {r.row.archs})")
    return out


def render(report: CoverageReport) -> str:
    if not report.rows:
        return "no CUDA row selected: a CPU wheel runs on no GPU, so there is nothing to cover"
    lines = render_grid(report.rows) + render_dependencies(report.rows)
    if report.jetsons:  # the seed's Jetson answer: a row of its own only where the dependency has code
        lines += ["Jetson rows ([[jetson]]):", *(f"  {j.line()}" for j in report.jetsons)]
    if report.seconds:
        read = ", ".join(f"{name} {s:.1f} s" for name, s in report.seconds.items())
        lines.append(f"dependency wheels read: {read}")
    return "\n".join(lines).rstrip()
