"""Text and HTML for every result: pure functions of the data, nothing live.

Importing this package registers each renderer with :mod:`devinspect.model.display`,
through which results draw themselves (``repr``, ``_repr_mimebundle_``, ``figure()``)
without the data importing this code.
"""

from __future__ import annotations

from ..lazy_exports import lazy_surface
from ..model import (
    ActionResult,
    CheckReport,
    DeviceError,
    Explanation,
    Holders,
    LineMemoryProfile,
    MemoryHistory,
    MemorySnapshot,
    Mismatch,
    RankReport,
    ScanView,
    display,
)
from . import (
    action_result,
    check_report_html,
    check_report_text,
    explanation_html,
    explanation_text,
    holders,
    html,
    ranks_html,
    ranks_text,
    text,
)
from .memory import plot, profile, snapshot_html, snapshot_text

display.register(ScanView, text=text.render_scan, html=html.render_scan)
display.register(CheckReport, text=check_report_text.render_check, html=check_report_html.render_check)
display.register(Mismatch, text=lambda m: "\n".join(check_report_text.mismatch_lines(m)), html=check_report_html.mismatch_html)
display.register(DeviceError, text=lambda e: "\n".join(check_report_text.device_error_lines(e)),
                 html=check_report_html.device_error_html)
display.register(Explanation, text=explanation_text.render_explanation, html=explanation_html.render_explanation)
display.register(MemorySnapshot, text=snapshot_text.render_snapshot, html=snapshot_html.render_snapshot)
display.register(MemoryHistory, text=snapshot_text.render_history, html=snapshot_html.render_history,
                 figure=plot.history_figure)
display.register(Holders, text=holders.render_text, html=holders.render_html)
display.register(LineMemoryProfile, text=profile.render_text, html=profile.render_html,
                 figure=plot.lines_figure)
display.register(RankReport, text=ranks_text.report_text, html=ranks_html.report_html)
display.register(ActionResult, text=action_result.render_text, html=action_result.render_html)

_SURFACE = {
    "HistoryPlot": "memory.plot",
    "ModuleNode": "module_tree",
    "NARROW": "html",
    "ProfileWithPlot": "memory.plot",
    "SEVERITY_MARK": "table",
    "bars": "memory.snapshot_html",
    "details": "memory.snapshot_text",
    "device_headline": "memory.snapshot_text",
    "device_title": "memory.snapshot_text",
    "findings_html": "ranks_html",
    "fix_html": "html",
    "headline": "explanation_text",
    "name_html": "html",
    "parent_of": "module_tree",
    "ranks_table_html": "ranks_html",
    "reconciliation_table": "memory.snapshot_html",
    "render": "environment_text",
    "render_html": "memory.profile",
    "report_text": "ranks_text",
    "summary_line": "text",
    "top_table_html": "ranks_html",
}
__getattr__ = lazy_surface(__name__, _SURFACE)

# Named like a module of this package, which would shadow a lazy name once imported:
from .module_tree import module_tree as module_tree  # noqa: E402 - after the lazy door
