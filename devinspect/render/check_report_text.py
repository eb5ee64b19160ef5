"""Plain-text rendering of a CheckReport."""

from __future__ import annotations

from ..model import CheckReport, Column, DeviceError, LineStats, Mismatch, Operand, each, human_bytes, shape_text
from .table import SEVERITY_MARK, aligned_lines
from .text import fix_block, render_findings

WORST_LINES = 10


def mismatch_lines(m: Mismatch) -> list[str]:
    where = m.cell_line.label if m.cell_line else "?"
    head = f"device mismatch in {m.op} ({', '.join(m.devices)}) at {where}"
    if m.cell_line and m.cell_line.text:
        head += f": {m.cell_line.text}"
    lines = [head]
    if m.user_frame is not None:
        via = f" in module {m.module_path}" if m.module_path else ""
        lines.append(f"  raised in {m.user_frame.label}{via}: {m.user_frame.text}")
    elif m.module_path:
        lines.append(f"  inside module {m.module_path}")
    temporaries = [o for o in m.operands if o.source == "temporary"]
    if temporaries:
        count = "one unnamed tensor" if len(temporaries) == 1 else f"{len(temporaries)} unnamed tensors"
        lines.append(f"  {count} made on the failing line: {', '.join(o.device for o in temporaries)}")
    for o in m.operands:
        name = o.name or o.written or "(unnamed)"
        extra = f" — {o.detail}" if o.detail else ""
        lines.append(f"  {name:<28} {o.device:<8} {operand_kind(o):<14}  [{o.source}]{extra}")
    if m.fix:
        lines.extend(fix_block(m.fix, "  "))
    return lines


def device_error_lines(e: DeviceError) -> list[str]:
    """A device error other than a mismatch: what, where, the objects involved, why, and the fix."""
    where = e.cell_line.label if e.cell_line else "?"
    head = f"{e.kind}: {e.what} at {where}"
    if e.cell_line and e.cell_line.text:
        head += f": {e.cell_line.text}"
    lines = [head]
    if e.user_frame is not None:
        lines.append(f"  raised in {e.user_frame.label}: {e.user_frame.text}")
    for o in e.operands:
        extra = f" — {o.detail}" if o.detail else ""
        lines.append(f"  {o.name or o.written or '(unnamed)':<28} {o.device:<8} {operand_kind(o):<14}  [{o.source}]{extra}")
    if e.cause:
        lines.append(f"  why: {e.cause}")
    if e.fix:
        lines.extend(fix_block(e.fix, "  "))
    return lines


def operand_kind(o: Operand) -> str:
    """``float32[4, 8]``, or ``""`` for an operand never run (its dtype and shape unknown)."""
    return "" if o.dtype == "?" and o.shape is None else f"{o.dtype}{shape_text(o.shape)}"


def transfer_text(count: int, nbytes: int) -> str:
    """``3× 1.2 MiB``, or ``-`` when nothing was copied."""
    return f"{count}× {human_bytes(nbytes)}" if count else "-"


def syncs_text(s: LineStats) -> str:
    """``item×3, cpu×1 (in torch)``: the host syncs of a line by kind, and the libraries that made them."""
    inside = f" (in {', '.join(s.inside)})" if s.inside else ""
    return (", ".join(f"{k}×{n}" for k, n in s.syncs) or "-") + inside


#: ``%%devcheck``'s columns, one row per line that copied or synced.
LINE_COLUMNS: tuple[Column[LineStats], ...] = (
    Column("where", each(lambda s: s.where.label), chars=12),
    Column("host→device", each(lambda s: transfer_text(s.h2d_count, s.h2d_bytes)), width="number", chars=10),
    Column("device→host", each(lambda s: transfer_text(s.d2h_count, s.d2h_bytes)), width="number", chars=10),
    Column("device→device", each(lambda s: transfer_text(s.d2d_count, s.d2d_bytes)), width="number", chars=10,
           folds=True),
    Column("syncs", each(syncs_text), width="words", chars=8),
    Column("code", each(lambda s: s.where.text), width="code"),
)


def summary_line(report: CheckReport) -> str:
    """``3 host→device (1.2 MiB), 0 device→host (0 B), 0 device→device, 12 host syncs in 0.210 s``."""
    totals = report.totals
    head = (
        f"{totals['h2d_count']} host→device ({human_bytes(totals['h2d_bytes'])}), "
        f"{totals['d2h_count']} device→host ({human_bytes(totals['d2h_bytes'])}), "
        f"{totals['d2d_count']} device→device, {totals['syncs']} host syncs"
    )
    if report.elapsed_s is not None:
        head += f" in {report.elapsed_s:.3f} s"
    return head


def render_check(report: CheckReport) -> str:
    lines = [f"devcheck: {summary_line(report)}"]
    lines.extend(f"not counted: {use}; it runs in C++, where copies and syncs are not seen" for use in report.unseen)
    if report.mismatch is not None:
        lines.append("")
        lines.append(f"{SEVERITY_MARK['error']} " + mismatch_lines(report.mismatch)[0])
        lines.extend(mismatch_lines(report.mismatch)[1:])
    if report.device_error is not None:
        lines.append("")
        lines.append(f"{SEVERITY_MARK['error']} " + "\n".join(device_error_lines(report.device_error)))
    if report.findings:
        lines.append("")
        lines.append(f"Findings ({len(report.findings)}):")
        lines.extend("  " + line for line in render_findings(report.findings))
    worst = report.costliest(WORST_LINES)  # a line is recorded only once it copied or synced
    if worst:
        lines.append("")
        lines.extend(aligned_lines(LINE_COLUMNS, worst))
        if len(report.lines) > len(worst):
            lines.append(f"… {len(report.lines) - len(worst)} more lines (.frame has all)")
    if report.error and report.mismatch is None and report.device_error is None:
        lines.append(f"The cell raised {report.error}")
    return "\n".join(lines)
