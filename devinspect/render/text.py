"""Plain-text rendering for terminal IPython and ``repr``."""

from __future__ import annotations

from ..model import Finding, Fix, ScanView, human_bytes, tensor_columns
from .table import SEVERITY_MARK, aligned_lines, closing_notes, visible_rows


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
        lines.append("")
        lines.extend(aligned_lines(tensor_columns.TENSOR_COLUMNS, rows))
    elif not findings:
        lines.append("No tensors found.")
    lines.extend(closing_notes(result, more))
    return "\n".join(lines)
