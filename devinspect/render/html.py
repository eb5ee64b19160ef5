"""Static HTML: readable in JupyterLab light and dark themes, nbconvert and GitHub.

No colours of its own (text inherits the theme's), no scripts, no classes that
need a stylesheet: severity is a symbol, sizes are right-aligned, names are code.
"""

from __future__ import annotations

import re
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


#: A table as wide as the output it sits in, never wider (its rows fold, see :func:`text_table`), and
#: no wider than a long line of code on a wide screen, so its numbers stay near their labels. Auto
#: layout, stated: JupyterLab lays its HTML tables out ``fixed`` (equal columns at a set width).
TABLE = "border-collapse:collapse;table-layout:auto;width:100%;max-width:72em;margin:2px 0;line-height:1.4"
#: One line of code across the table, cut where the table ends (the whole line is its tooltip).
#: ``width:0;min-width:100%``: the line adds nothing to the table's own width (a long line never
#: widens it, nor takes width from the columns under it) and fills the row it is in.
_CODE_ROW = "padding:3px 8px 0 8px;text-align:left;border-top:1px solid rgba(128, 128, 128, 0.35)"
_CUT = "width:0;min-width:100%;overflow:hidden;text-overflow:ellipsis;white-space:nowrap;text-align:left"
#: Numbers right-aligned; a long one (``54.0 MiB → 108.0 MiB``) may break after its arrow, nowhere else.
_NUM_FOLDING = "padding:1px 8px;text-align:right;vertical-align:top;font-variant-numeric:tabular-nums"


def words_html(text: str) -> str:
    """Text that wraps between words, but never just before a number (``line 2`` stays whole)."""
    return re.sub(r" (?=\d)", "\u00a0", escape(text))


def number_html(text: str) -> str:
    """A number's text kept on one line, except after an arrow (``before → after``)."""
    return escape(text).replace(" ", "\u00a0").replace("\u00a0→\u00a0", "\u00a0→ ")


def code_line(text: str, colspan: int) -> str:
    """A table row holding one line of code across ``colspan`` columns, cut with an ellipsis
    where the table ends; the whole line is its tooltip."""
    return (f'<tr><td colspan="{colspan}" style="{_CODE_ROW}"><div style="{_CUT}" title="{escape(text, quote=True)}">'
            f'<code style="white-space:pre">{escape(text)}</code></div></td></tr>')


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Container[int], code: int,
               wrapped: Container[int] = ()) -> str:
    """A table of text cells that reads at any width, from a notebook beside a file browser
    (577 px) to a wide screen: each row's ``code`` is a line of its own across the table (cut
    where the table ends, the whole line in its tooltip), and the other cells follow on the
    line under it, ``numeric`` ones right-aligned, the rest (``wrapped`` ones too) wrapping
    within their column. The table is as wide as the output, never wider."""
    others = [i for i in range(len(headers)) if i != code]
    out = [f'<table style="{TABLE}"><thead><tr>']
    out.extend(f'<th style="{_NUM_FOLDING if i in numeric else CELL}">{escape(headers[i])}</th>' for i in others)
    out.append("</tr></thead><tbody>")
    previous = None
    for row in rows:
        if row[code] != previous:  # rows of one line (a cell's devices) share its code line
            out.append(code_line(row[code], len(others)))
        previous = row[code]
        cells = [f'<td style="{_NUM_FOLDING}">{number_html(row[i])}</td>' if i in numeric
                 else f'<td style="{WRAP if i in wrapped else CELL}">{words_html(row[i])}</td>' for i in others]
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
        out.append(f'<table style="{TABLE}"><thead><tr>')
        for title, style in (("name", CELL), ("kind", CELL), ("device", CELL), ("dtype", CELL),
                             ("shape", CELL), ("size", NUM), ("note", CELL)):
            out.append(f'<th style="{style}">{title}</th>')
        out.append("</tr></thead><tbody>")
        for r in rows:
            out.append(
                "<tr>"
                f'<td style="{WRAP}"><code>{escape(r.name)}</code></td>'
                f'<td style="{CELL}">{escape(r.kind)}</td>'
                f'<td style="{CELL}">{escape(r.device)}</td>'
                f'<td style="{CELL}">{escape(r.dtype or "?")}</td>'
                f'<td style="{CELL}">{escape(shape_text(r.shape))}</td>'
                f'<td style="{NUM}">{escape(size_cell(r))}</td>'
                f'<td style="{WRAP}">{escape(note_cell(r))}</td>'
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
