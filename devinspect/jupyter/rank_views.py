"""The per-rank report as a widget: the ranks side by side, what differs, and one rank's
largest tensors at a time (pick the rank)."""

from __future__ import annotations

from typing import Any

from ..model import RankReport
from ..render import findings_html, ranks_table_html, report_text, top_table_html


def ranks_widget(report: RankReport) -> Any:
    import ipywidgets as w

    head = w.HTML(f"<b>{report_text(report).splitlines()[0]}</b>")
    table = w.HTML(ranks_table_html(report))
    findings = w.HTML(findings_html(report))
    by_rank = {s.rank: s for s in report.summaries}
    # The outlier first: it is the rank one wants to look into.
    figures = report.skew
    first = figures[1] if figures is not None else next(iter(by_rank), None)
    pick = w.Dropdown(options=[(f"rank {r}", r) for r in by_rank], value=first, description="largest on",
                      layout=w.Layout(width="auto"))
    top = w.HTML(top_table_html(by_rank[first]) if first is not None else "")

    def show(change: dict[str, Any]) -> None:
        top.value = top_table_html(by_rank[change["new"]])

    pick.observe(show, "value")
    box = w.VBox([head, table, findings, pick, top])
    box.add_class("devinspect-ranks")
    return box
