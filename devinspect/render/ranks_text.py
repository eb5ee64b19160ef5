"""Plain text of a per-rank report: one row per rank, then what differs across ranks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..model import human_bytes, shape_text

if TYPE_CHECKING:
    from ..model import RankReport

MARK = {"error": "✖", "warning": "⚠", "hint": "·"}
#: Largest tensors shown per rank in text (``.tensors_frame`` has them all).
TOP_SHOWN = 3


def rank_rows(report: RankReport) -> tuple[list[str], list[list[str]]]:
    """The per-rank table as cells, shared by text and HTML; which columns lead follows ``focus``."""
    memory = report.focus == "memory"
    header = ["rank", "host", "local", "devices"]
    header += (["allocated", "reserved", "driver (process)", "tensors", "tensor bytes"] if memory
               else ["tensors", "tensor bytes", "allocated", "reserved"])
    header += ["findings", "status"]
    rows = []
    for s in report.summaries:

        def total(figure: str) -> str:
            n = s.accelerator_total(figure)
            return human_bytes(n) if n is not None else "–"

        figures = ([total("allocated_bytes"), total("reserved_bytes"), total("process_bytes"), str(s.tensors),
                    human_bytes(s.tensor_bytes)] if memory
                   else [str(s.tensors), human_bytes(s.tensor_bytes), total("allocated_bytes"), total("reserved_bytes")])
        rows.append([str(s.rank), s.hostname or "?", "–" if s.local_rank is None else str(s.local_rank),
                     ", ".join(d.device for d in s.devices) or "–", *figures, str(len(s.findings)),
                     "✖ " + _short(s.error) if s.error else "ok"])
    return header, rows


def skew_text(report: RankReport) -> str:
    figures = report.skew
    if figures is None:
        return ""
    median, rank, worst = figures
    pct = f" ({(worst / median - 1) * 100:+.0f}%)" if median else ""
    return f"median rank {human_bytes(median)}, worst rank {rank} {human_bytes(worst)}{pct}"


def dtensor_lines(report: RankReport) -> list[str]:
    """Each DTensor parameter once: mesh, placements, global shape, and each rank's local shard."""
    by_name: dict[str, list] = {}
    for s in report.summaries:
        for d in s.dtensors:
            by_name.setdefault(d.name, []).append((s.rank, d))
    lines = []
    for name, per_rank in by_name.items():
        first = per_rank[0][1]
        mesh = "×".join(str(n) for n in first.mesh_shape)
        dims = f" ({', '.join(first.mesh_dim_names)})" if first.mesh_dim_names else ""
        local = " · ".join(f"rank {r} {shape_text(d.local_shape)}" for r, d in per_rank)
        lines.append(f"{name}: [{', '.join(first.placements)}] on a {first.mesh_device_type} mesh {mesh}{dims}, "
                     f"global {shape_text(first.global_shape)}; local {local}")
    return lines


def report_text(report: RankReport) -> str:
    n = len(report.summaries)
    hosts = len({s.hostname for s in report.summaries if s.hostname})
    transports = sorted({s.transport for s in report.summaries if s.transport})
    missing = report.world_size - n if report.world_size > n else 0
    head = (f"devinspect: {n} rank{'s' if n != 1 else ''} of {report.world_size}"
            f"{' over ' + ', '.join(transports) if transports else ''}"
            + (f", {hosts} host{'s' if hosts != 1 else ''}" if hosts else "")
            + (f"; {missing} did not report" if missing else ""))
    header, rows = rank_rows(report)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [head, "  " + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for row in rows:
        lines.append("  " + "  ".join(c.ljust(w) if i < 4 or i == len(row) - 1 else c.rjust(w)
                                      for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    if skew_text(report):
        lines.append(f"  memory: {skew_text(report)}")
    for f in report.findings:
        lines.append(f"  {MARK.get(f.severity, '·')} {f.message}")
    dtensors = dtensor_lines(report)
    if dtensors:
        lines.append("  DTensor parameters:")
        lines.extend(f"    {line}" for line in dtensors)
    tops = [s for s in report.summaries if s.top]
    if tops:
        lines.append("  largest tensors:")
        for s in tops:
            shown = ", ".join(f"{t.name} {human_bytes(t.storage_bytes)}" for t in s.top[:TOP_SHOWN])
            lines.append(f"    rank {s.rank}: {shown}")
    return "\n".join(lines)


def _short(error: str) -> str:
    return error if len(error) <= 60 else error[:59] + "…"
