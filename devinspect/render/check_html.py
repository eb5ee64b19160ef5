"""Static HTML for a CheckReport, themed like the %devices table (no colours of its own)."""

from __future__ import annotations

from html import escape

from ..model import CheckReport
from .check_text import WORST_LINES, mismatch_lines, summary_line, transfer_text
from .html import fix_html

_CELL = "padding:1px 8px;text-align:left;vertical-align:top"
_NUM = "padding:1px 8px;text-align:right;vertical-align:top"


def render_check(report: CheckReport) -> str:
    out = [f'<div class="devinspect"><p><b>devcheck</b>: {escape(summary_line(report))}</p>']
    if report.mismatch is not None:
        lines = mismatch_lines(report.mismatch)
        out.append(f"<p>✖ <b>{escape(lines[0])}</b></p><pre>{escape(chr(10).join(lines[1:]))}</pre>")
    if report.findings:
        out.append(f"<p><b>Findings ({len(report.findings)})</b></p><ul>")
        for f in report.findings:
            out.append(f"<li><b>{escape(f.severity)}</b> {escape(f.message)}")
            if f.fix:
                out.append(fix_html(f.fix))
            out.append("</li>")
        out.append("</ul>")
    worst = report.costliest(WORST_LINES)  # a line is recorded only once it copied or synced
    if worst:
        out.append('<table style="border-collapse:collapse"><thead><tr>')
        for title, style in (("where", _CELL), ("host→device", _NUM), ("device→host", _NUM), ("device→device", _NUM),
                             ("syncs", _CELL), ("code", _CELL)):
            out.append(f'<th style="{style}">{title}</th>')
        out.append("</tr></thead><tbody>")
        for s in worst:
            syncs = ", ".join(f"{k}×{n}" for k, n in s.syncs) or "-"
            cells = [
                (escape(s.where.label), _CELL),
                (transfer_text(s.h2d_count, s.h2d_bytes), _NUM),
                (transfer_text(s.d2h_count, s.d2h_bytes), _NUM),
                (transfer_text(s.d2d_count, s.d2d_bytes), _NUM),
                (escape(syncs), _CELL),
                (f"<code>{escape(s.where.text)}</code>", _CELL),
            ]
            out.append("<tr>" + "".join(f'<td style="{st}">{c}</td>' for c, st in cells) + "</tr>")
        out.append("</tbody></table>")
    if report.error and report.mismatch is None:
        out.append(f"<p>The cell raised {escape(report.error)}</p>")
    out.append("</div>")
    return "".join(out)

