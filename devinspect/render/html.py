"""Static HTML: readable in JupyterLab light and dark themes, nbconvert and GitHub.

No colours of its own (text inherits the theme's), no scripts, no classes that
need a stylesheet: severity is a symbol, sizes are right-aligned, names are code.
"""

from __future__ import annotations

import io
import re
import tokenize
from html import escape
from typing import Container, Iterable, Sequence

from ..model import Column, Fix, ScanView, tensor_columns
from .table import SEVERITY_MARK, closing_notes, visible_rows
from .text import summary_line

CELL = "padding:1px 8px;text-align:left;vertical-align:top"
NUM = "padding:1px 8px;text-align:right;vertical-align:top;font-variant-numeric:tabular-nums;white-space:nowrap"
#: Names and prose: wrapped between words (a name between its parts, see :func:`name_html`), and
#: inside a word only where one alone is wider than the whole column; never cut.
WRAP = CELL + ";overflow-wrap:break-word"
#: Code as written, its indentation kept; a line wider than the output wraps at a space or between
#: two tokens (see :func:`code_html`), inside a token only where one alone is wider than the output.
_PRE = "margin:2px 0 4px 0;white-space:pre-wrap;overflow-wrap:break-word;word-break:normal;max-width:100%"
#: Tokens a line of code may wrap before (``model<wbr>.pos``, ``x<wbr>[0]``, ``f<wbr>(x)``) and after
#: (``f(<wbr>x,<wbr>y)``): between two tokens, never inside a name, a number or a string.
_WRAP_BEFORE = frozenset({".", "[", "("})
_WRAP_AFTER = frozenset({"(", ",", "="})


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


#: Spaces a line never breaks at: after a short word before a number (``line 2``), and between a
#: number and its unit (``4.0 KiB``).
_KEPT_SPACES = re.compile(r"\b([A-Za-z]{1,8}) (?=\d)|(?<=\d) (?=[KMGTP]?i?B\b)")
#: Where a name in prose may wrap: before each of its parts (``.weight``, ``[0]``).
_PARTS_IN_WORDS = re.compile(r"(?<=[\w\]])(?=\.[A-Za-z_]|\[)")


#: A word longer than this may wrap between its parts (a long name in a note); a shorter one stays whole.
_LONG_WORD = 24


def _word_html(word: str) -> str:
    if len(word) <= _LONG_WORD:
        return escape(word)
    return "<wbr>".join(escape(part) for part in _PARTS_IN_WORDS.split(word))


def words_html(text: str) -> str:
    """Text that wraps between words, and inside a long name between its parts only; never inside
    ``line 2`` nor inside a size."""
    kept = _KEPT_SPACES.sub(lambda m: (m.group(1) or "") + "\u00a0", text)
    return "".join(_word_html(word) for word in re.split(r"( )", kept))


def number_html(text: str) -> str:
    """A number's text kept on one line, except after an arrow (``before → after``)."""
    return escape(text).replace(" ", "\u00a0").replace("\u00a0→\u00a0", "\u00a0→ ")


def code_line(text: str, colspan: int) -> str:
    """A table row holding one line of code across ``colspan`` columns, cut with an ellipsis
    where the table ends; the whole line is its tooltip."""
    return (f'<tr><td colspan="{colspan}" style="{_CODE_ROW}"><div style="{_CUT}" title="{escape(text, quote=True)}">'
            f'<code style="white-space:pre">{escape(text)}</code></div></td></tr>')


#: Width of a character of a column's text, for its least width (a proportional digit is about
#: 0.55em, a code character 0.6em).
_CHAR_EM = 0.6
#: Where a name may wrap: before each of its parts (``.weight``, ``[0]``), never inside one.
_NAME_PARTS = re.compile(r"(?<=.)(?=[.\[])")


def name_html(text: str) -> str:
    """A name that wraps only between its parts: a break opportunity before each ``.`` and ``[``
    (``model<wbr>.fc<wbr>.weight``, ``losses<wbr>[0]``), none inside ``losses[0]``'s ``[0]``."""
    return "<wbr>".join(escape(part) for part in _NAME_PARTS.split(text))


#: Below this width the columns declared to fold leave a static table (the explorer's width too),
#: by a container query of the table's own stylesheet; where a page drops stylesheets (GitHub) every
#: column stays.
NARROW = "46em"
_FOLDS = "devinspect-folds"
_FOLDING = (f'<style>.devinspect-columns{{container-type:inline-size}}'
            f'@container (max-width: {NARROW}){{.{_FOLDS}{{display:none}}}}</style>')


def _style(column: Column, head: bool = False) -> str:
    """A cell's style from its column's width class (see :data:`~devinspect.model.columns.WidthClass`)."""
    least = f";min-width:{column.chars * _CHAR_EM:.1f}em"
    if column.width == "number":
        return _NUM_FOLDING + least
    if column.width == "word":
        return CELL + ";white-space:nowrap"
    return CELL + least if head else WRAP + least


def _cell_html(column: Column, text: str) -> str:
    if column.width == "number":
        body = number_html(text)
    elif column.width == "name":
        body = f"<code>{name_html(text)}</code>"
    elif column.width == "word":
        body = escape(text)
    else:
        body = words_html(text)
    return f'<td{_folds(column)} style="{_style(column)}">{body}</td>'


def _folds(column: Column) -> str:
    return f' class="{_FOLDS}"' if column.folds else ""


def column_table(columns: Sequence[Column], rows: Sequence) -> str:
    """A table of ``rows`` with these ``columns``, each cell styled by its column's width class.

    It reads at any width, from a notebook beside a file browser (577 px) to a wide screen: it is
    as wide as the output, never wider, and a ``code`` column's line is a row of its own across
    the table (cut where the table ends, the whole line in its tooltip), the other cells following
    on the line under it. Rows of one line of code share its line."""
    code = next((i for i, column in enumerate(columns) if column.width == "code"), None)
    others = [column for column in columns if column.width != "code"]
    texts = [column.texts(rows) for column in columns]
    folding = any(column.folds for column in others)
    out = [f'{_FOLDING}<div class="devinspect-columns">' if folding else "", f'<table style="{TABLE}"><thead><tr>']
    out.extend(f'<th{_folds(column)} style="{_style(column, head=True)}">{escape(column.name)}</th>'
               for column in others)
    out.append("</tr></thead><tbody>")
    previous = None
    for cells in zip(*texts):
        if code is not None and cells[code] != previous:
            out.append(code_line(cells[code], len(others)))  # a folded column still counts: it is hidden, not gone
            previous = cells[code]
        out.append("<tr>" + "".join(_cell_html(column, text) for column, text in zip(columns, cells)
                                    if column.width != "code") + "</tr>")
    out.append("</tbody></table></div>" if folding else "</tbody></table>")
    return "".join(out)


def text_table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Container[int], code: int,
               wrapped: Container[int] = ()) -> str:
    """:func:`column_table` of rows of texts: ``numeric`` columns right-aligned, ``code`` the line
    of code, ``wrapped`` ones holding names, the rest words."""
    def column(i: int, header: str) -> Column:
        width = "number" if i in numeric else "code" if i == code else "words"
        return Column(header, lambda rows, i=i: [row[i] for row in rows], width=width,
                      chars=12 if i in wrapped else min(len(header), 8))

    return column_table([column(i, header) for i, header in enumerate(headers)], list(rows))


def code_html(line: str) -> str:
    """One line of code as HTML that wraps only between its tokens (a ``<wbr>`` where a line may
    break besides its spaces), read with Python's own tokenizer; a line it cannot read is kept
    as it is (it then wraps at its spaces)."""
    cuts: set[int] = set()
    previous = ""
    try:
        for token in tokenize.generate_tokens(io.StringIO(line).readline):
            if token.start[0] != 1:
                break
            at = token.start[1]
            if at and (token.string in _WRAP_BEFORE or previous in _WRAP_AFTER) and not line[at - 1].isspace():
                cuts.add(at)
            previous = token.string
    except (tokenize.TokenError, SyntaxError):
        pass  # an unclosed bracket or string: the tokens read before it keep their breaks
    bounds = [0, *sorted(cuts), len(line)]
    return "<wbr>".join(escape(line[a:b]) for a, b in zip(bounds, bounds[1:]))


def _code_block(lines: Iterable[str]) -> str:
    return "\n".join(map(code_html, lines))


def fix_html(fix: Fix) -> str:
    """A fix as static HTML: the summary, the code to run, the edits to make, the note."""
    out = [f"<div>fix: {escape(fix.summary)}</div>"]
    if fix.code:
        out.append(f'<pre style="{_PRE}">{_code_block(fix.code.splitlines())}</pre>')
    for edit in fix.edits:
        context = f" ({escape(edit.context)})" if edit.context else ""
        out.append(f"<div>in your code, {escape(edit.where.where)}{context}:</div>"
                   f'<pre style="{_PRE}">- {code_html(edit.old)}\n'
                   + ("\n".join("+ " + code_html(line) for line in edit.new.splitlines()) if edit.new
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
        out.append(column_table(tensor_columns.TENSOR_COLUMNS, rows))
    elif not findings:
        out.append("<p>No tensors found.</p>")
    out.extend(f"<p>{escape(line)}</p>" for line in closing_notes(result, more))
    out.append("</div>")
    return "".join(out)
