"""Static HTML of a per-rank report (nbconvert, GitHub, and the widget's tables)."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from ..model import human_bytes, shape_text
from .html import CELL, NUM
from .ranks_text import MARK, dtensor_lines, rank_rows, report_text, skew_text

if TYPE_CHECKING:
    from ..model import RankReport, RankSummary


def ranks_table_html(report: RankReport) -> str:
    header, rows = rank_rows(report)
    numeric = {i for i, h in enumerate(header) if i >= 4 and h != "status"}
    head = "".join(f'<th style="{NUM if i in numeric else CELL}">{escape(h)}</th>' for i, h in enumerate(header))
    body = "".join("<tr>" + "".join(f'<td style="{NUM if i in numeric else CELL}">{escape(c)}</td>'
                                    for i, c in enumerate(row)) + "</tr>" for row in rows)
    return f'<table style="border-collapse:collapse"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def top_table_html(s: RankSummary) -> str:
    rows = "".join(f'<tr><td style="{CELL}"><code>{escape(t.name)}</code></td><td style="{CELL}">{escape(t.kind)}</td>'
                   f'<td style="{CELL}">{escape(t.device)}</td>'
                   f'<td style="{CELL}">{escape(t.dtype + shape_text(t.shape))}</td>'
                   f'<td style="{NUM}">{escape(human_bytes(t.storage_bytes))}</td></tr>' for t in s.top)
    return f'<table style="border-collapse:collapse"><tbody>{rows}</tbody></table>' if rows else "<p>no tensors</p>"


def findings_html(report: RankReport) -> str:
    parts = []
    if skew_text(report):
        parts.append(f"<li>memory: {escape(skew_text(report))}</li>")
    parts += [f"<li>{MARK.get(f.severity, '·')} {escape(f.message)}</li>" for f in report.findings]
    parts += [f"<li>DTensor {escape(line)}</li>" for line in dtensor_lines(report)]
    return f'<ul style="margin:4px 0;padding-left:18px">{"".join(parts)}</ul>' if parts else ""


def report_html(report: RankReport) -> str:
    head = escape(report_text(report).splitlines()[0])
    return (f'<div class="devinspect-ranks"><p style="margin:4px 0"><b>{head}</b></p>'
            f"{ranks_table_html(report)}{findings_html(report)}</div>")
