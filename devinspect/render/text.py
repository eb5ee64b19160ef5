"""Plain-text rendering for terminal IPython and ``repr``."""

from __future__ import annotations

from ..model.fixes import Finding, Fix
from ..model.scan_result import ScanView
from ..model.units import human_bytes, shape_text
from .table import SEVERITY_MARK, note_cell, size_cell, visible_rows

_MAX_NAME = 72


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 tensor``, ``2 tensors``."""
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def summary_line(result: ScanView) -> str:
    devices = result.devices
    parts = [f"meta needs {human_bytes(d.logical_bytes)} ({d.tensors})" if d.device == "meta"
             else f"{d.device} {human_bytes(d.storage_bytes)} ({d.tensors})" for d in devices]
    head = f"{plural(len(result.records), 'tensor')}, {human_bytes(result.total_bytes)}"
    if devices:
        head += f" on {len(devices)} device{'s' if len(devices) != 1 else ''}: " + " · ".join(parts)
    return head


def fix_block(fix: Fix, indent: str) -> list[str]:
    """``fix: summary``, then the runnable code, the source edits and the note, aligned under it."""
    pad = indent + "     "
    lines = [f"{indent}fix: {fix.summary}"]
    if fix.code:
        lines.extend(pad + line for line in fix.code.splitlines())
    for edit in fix.edits:
        context = f" ({edit.context})" if edit.context else ""
        lines.append(f"{pad}in your code, {edit.where.where}{context}:")
        lines.append(f"{pad}- {edit.old}")
        if edit.new:
            # Each line of a replacement of several lines is marked, its indentation kept.
            lines.extend(f"{pad}+ {line}" for line in edit.new.splitlines())
        else:
            lines.append(f"{pad}  (delete this line)")
    if fix.note:
        lines.append(f"{pad}note: {fix.note}")
    return lines


def render_findings(findings: tuple[Finding, ...] | list[Finding]) -> list[str]:
    lines = []
    for f in findings:
        lines.append(f"{SEVERITY_MARK.get(f.severity, '-')} {f.severity:<7} {f.message}")
        if f.fix:
            lines.extend(fix_block(f.fix, " " * 10))
    return lines


def _clip(text: str, width: int) -> str:
    """``text`` within ``width``, cut in the middle: a long name's end tells rows apart
    (``opt.state[…lora_A.default.weight]["exp_avg"]`` and ``…["exp_avg_sq"]``)."""
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def render_scan(result: ScanView) -> str:
    lines = [f"devinspect: {summary_line(result)}"]
    findings = result.findings
    if findings:
        lines.append("")
        lines.append(f"Findings ({len(findings)}):")
        lines.extend("  " + line for line in render_findings(findings))
    if result.display.findings_only:
        if not findings:
            lines.append("No findings.")
        return "\n".join(lines)
    rows, more = visible_rows(result)
    if rows:
        header = ("name", "kind", "device", "dtype", "shape", "size", "note")
        table = [
            (
                _clip(r.name, _MAX_NAME),
                r.kind,
                r.device,
                r.dtype or "?",
                shape_text(r.shape),
                size_cell(r),
                note_cell(r),
            )
            for r in rows
        ]
        widths = [max(len(header[i]), *(len(row[i]) for row in table)) for i in range(len(header) - 1)]
        lines.append("")
        fmt = "  ".join(f"{{:<{w}}}" if i != 5 else f"{{:>{w}}}" for i, w in enumerate(widths)) + "  {}"
        lines.append(fmt.format(*header).rstrip())
        lines.extend(fmt.format(*row).rstrip() for row in table)
    elif not findings:
        lines.append("No tensors found.")
    if more:
        lines.append(f"… {more:,} more not shown (largest first; .frame has all, %config DevInspect.max_rows)")
    if result.history_bytes and not result.options.get("include_hidden"):
        lines.append(
            f"Output history / last traceback hold {human_bytes(result.history_bytes)} of accelerator memory "
            "not listed above (%devices --hidden lists it)."
        )
    return "\n".join(lines)
