"""Static HTML for a CheckReport: compact, themed like the %devices table (no colours of its own).

Names wrap where their column ends (inside a long name too) and are never cut; each line of
code in the per-line table has a line of its own (cut where the table ends, the whole line in
its tooltip): at a laptop's width the tables stay within the notebook.
"""

from __future__ import annotations

from html import escape

from ..model import CheckReport, DeviceError, Mismatch, Operand
from . import check_report_text
from .check_report_text import WORST_LINES, operand_kind, summary_line
from .html import CELL, TABLE, WRAP, column_table, fix_html, name_html

_NOWRAP = CELL + ";white-space:nowrap"
_NAME = WRAP + ";min-width:8em"


def _code(text: str) -> str:
    return f"<code>{escape(text)}</code>"


def _operand_row(o: Operand) -> str:
    name = o.name or o.written or "(unnamed)"
    return (
        "<tr>"
        f'<td style="{_NAME}" title="{escape(name, quote=True)}"><code>{name_html(name)}</code></td>'
        f'<td style="{_NOWRAP}">{escape(o.device)}</td>'
        f'<td style="{_NOWRAP}">{escape(operand_kind(o))}</td>'
        f'<td style="{_NOWRAP}">{escape(o.source)}</td>'
        f'<td style="{CELL}">{escape(o.detail)}</td>'
        "</tr>"
    )


def mismatch_html(m: Mismatch) -> str:
    where = escape(m.cell_line.where) if m.cell_line else "?"
    code = f": {_code(m.cell_line.text)}" if m.cell_line and m.cell_line.text else ""
    out = [f"<p style=\"margin:4px 0\">✖ <b>device mismatch in {_code(m.op)}</b> "
           f"({escape(', '.join(m.devices))}) at {where}{code}</p>"]
    if m.user_frame is not None:
        via = f" in module {_code(m.module_path)}" if m.module_path else ""
        out.append(f"<p style=\"margin:2px 0\">raised in {escape(m.user_frame.label)}{via}: "
                   f"{_code(m.user_frame.text)}</p>")
    elif m.module_path:
        out.append(f"<p style=\"margin:2px 0\">inside module {_code(m.module_path)}</p>")
    if m.operands:
        out.append(f'<table style="{TABLE}"><thead><tr>')
        for title in ("input", "device", "dtype/shape", "found as", "note"):
            out.append(f'<th style="{_NOWRAP}">{title}</th>')
        out.append("</tr></thead><tbody>")
        out.extend(_operand_row(o) for o in m.operands)
        out.append("</tbody></table>")
    if m.fix is not None:
        out.append(fix_html(m.fix))
    return "".join(out)


def device_error_html(e: DeviceError) -> str:
    where = escape(e.cell_line.where) if e.cell_line else "?"
    code = f": {_code(e.cell_line.text)}" if e.cell_line and e.cell_line.text else ""
    out = [f"<p style=\"margin:4px 0\">✖ <b>{escape(e.kind)}</b>: {escape(e.what)} at {where}{code}</p>"]
    if e.user_frame is not None:
        out.append(f"<p style=\"margin:2px 0\">raised in {escape(e.user_frame.label)}: {_code(e.user_frame.text)}</p>")
    if e.operands:
        out.append('<table style="border-collapse:collapse;margin:2px 0"><thead><tr>')
        for title in ("name", "device", "dtype/shape", "found as", "note"):
            out.append(f'<th style="{_NOWRAP}">{title}</th>')
        out.append("</tr></thead><tbody>")
        out.extend(_operand_row(o) for o in e.operands)
        out.append("</tbody></table>")
    if e.cause:
        out.append(f"<p style=\"margin:2px 0\">why: {escape(e.cause)}</p>")
    if e.fix is not None:
        out.append(fix_html(e.fix))
    return "".join(out)


def render_check(report: CheckReport) -> str:
    out = [f'<div class="devinspect"><p style="margin:4px 0"><b>devcheck</b>: {escape(summary_line(report))}</p>']
    out.extend(f'<p style="margin:2px 0">not counted: {escape(use)}; it runs in C++, where copies and syncs '
               "are not seen</p>" for use in report.unseen)
    if report.mismatch is not None:
        out.append(mismatch_html(report.mismatch))
    if report.device_error is not None:
        out.append(device_error_html(report.device_error))
    if report.findings:
        out.append(f"<p style=\"margin:4px 0\"><b>Findings ({len(report.findings)})</b></p><ul style=\"margin:2px 0\">")
        for f in report.findings:
            out.append(f"<li><b>{escape(f.severity)}</b> {escape(f.message)}")
            if f.fix:
                out.append(fix_html(f.fix))
            out.append("</li>")
        out.append("</ul>")
    shown = report.costliest(WORST_LINES)  # in the order the code reads
    if shown:
        out.append(column_table(check_report_text.LINE_COLUMNS, shown))
        hidden = len(report.lines) - len(shown)
        if hidden:
            out.append(f"<p style=\"margin:2px 0\">… {hidden} more lines (<code>.frame</code> has all)</p>")
    if report.error and report.mismatch is None and report.device_error is None:
        out.append(f"<p style=\"margin:2px 0\">The cell raised {escape(report.error)}</p>")
    out.append("</div>")
    return "".join(out)
