"""Static HTML: readable in JupyterLab light and dark themes, nbconvert and GitHub.

No colours of its own (text inherits the theme's), no scripts, no classes that
need a stylesheet: severity is a symbol, sizes are right-aligned, names are code.
"""

from __future__ import annotations

from html import escape
from typing import Container, Iterable, Sequence

from ..model.fixes import Fix
from ..model.scan_result import ScanView
from ..model.units import human_bytes, shape_text
from .table import SEVERITY_MARK, note_cell, size_cell, visible_rows
from .text import summary_line

CELL = "padding:1px 8px;text-align:left;vertical-align:top"
NUM = "padding:1px 8px;text-align:right;vertical-align:top;font-variant-numeric:tabular-nums;white-space:nowrap"
#: Names and code: wrapped where the column ends (anywhere, even inside a long name), never cut.
WRAP = CELL + ";overflow-wrap:anywhere;word-break:break-word"
_PRE = "margin:2px 0 4px 0;white-space:pre-wrap;overflow-wrap:anywhere;max-width:100%"


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Container[int], code: int,
               wrapped: Container[int] = ()) -> str:
    """A table of text cells: ``numeric`` columns right-aligned, column ``code`` as code, the
    code and ``wrapped`` columns wrapping anywhere (a long line never widens the page)."""
    out = ['<table style="border-collapse:collapse"><thead><tr>']
    out.extend(f'<th style="{NUM if i in numeric else CELL}">{escape(h)}</th>' for i, h in enumerate(headers))
    out.append("</tr></thead><tbody>")
    for row in rows:
        cells = []
        for i, v in enumerate(row):
            text = f"<code>{escape(v)}</code>" if i == code else escape(v)
            cells.append(f'<td style="{NUM if i in numeric else WRAP if i == code or i in wrapped else CELL}">{text}</td>')
        out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def fix_html(fix: Fix) -> str:
    """A fix as static HTML: the summary, the code to run, the edits to make, the note."""
    out = [f"<div>fix: {escape(fix.summary)}</div>"]
    if fix.code:
        out.append(f'<pre style="{_PRE}">{escape(fix.code)}</pre>')
    for edit in fix.edits:
        context = f" ({escape(edit.context)})" if edit.context else ""
        out.append(f"<div>in your code, {escape(edit.where.where)}{context}:</div>"
                   f'<pre style="{_PRE}">- {escape(edit.old)}\n'
                   + ("\n".join("+ " + escape(line) for line in edit.new.splitlines()) if edit.new
                      else "  (delete this line)") + "</pre>")
    if fix.note:
        out.append(f"<div>note: {escape(fix.note)}</div>")
    return "".join(out)


def render_scan(result: ScanView) -> str:
    out = [f'<div class="devinspect"><p><b>devinspect</b>: {escape(summary_line(result))}</p>']
    findings = result.findings
    if findings:
        out.append(f"<p><b>Findings ({len(findings)})</b></p><ul>")
        for f in findings:
            out.append(f"<li>{SEVERITY_MARK.get(f.severity, '-')} <b>{escape(f.severity)}</b> {escape(f.message)}")
            if f.fix:
                out.append(fix_html(f.fix))
            out.append("</li>")
        out.append("</ul>")
    if result.display.findings_only:
        if not findings:
            out.append("<p>No findings.</p>")
        out.append("</div>")
        return "".join(out)
    rows, more = visible_rows(result)
    if rows:
        out.append('<table style="border-collapse:collapse"><thead><tr>')
        for title, style in (("name", CELL), ("kind", CELL), ("device", CELL), ("dtype", CELL),
                             ("shape", CELL), ("size", NUM), ("note", CELL)):
            out.append(f'<th style="{style}">{title}</th>')
        out.append("</tr></thead><tbody>")
        for r in rows:
            out.append(
                "<tr>"
                f'<td style="{CELL}"><code>{escape(r.name)}</code></td>'
                f'<td style="{CELL}">{escape(r.kind)}</td>'
                f'<td style="{CELL}">{escape(r.device)}</td>'
                f'<td style="{CELL}">{escape(r.dtype or "?")}</td>'
                f'<td style="{CELL}">{escape(shape_text(r.shape))}</td>'
                f'<td style="{NUM}">{escape(size_cell(r))}</td>'
                f'<td style="{CELL}">{escape(note_cell(r))}</td>'
                "</tr>"
            )
        out.append("</tbody></table>")
    elif not findings:
        out.append("<p>No tensors found.</p>")
    if more:
        out.append(f"<p>… {more:,} more not shown (largest first; <code>.frame</code> has all)</p>")
    if result.history_bytes and not result.options.get("include_hidden"):
        out.append(
            f"<p>Output history / last traceback hold {escape(human_bytes(result.history_bytes))} of accelerator "
            "memory not listed above (<code>%devices --hidden</code> lists it).</p>"
        )
    out.append("</div>")
    return "".join(out)
