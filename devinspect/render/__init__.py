"""Text and HTML for every result: pure functions of the data, nothing live.

Importing this package registers each renderer with :mod:`devinspect.model.display`,
through which results draw themselves (``repr``, ``_repr_mimebundle_``, ``figure()``)
without the data importing this code.
"""

from __future__ import annotations

from ..model import display
from ..model.check_report import CheckReport, DeviceError, Mismatch
from ..model.explanation import Explanation
from ..model.holders import Holders
from ..model.line_memory import LineMemoryProfile
from ..model.memory import MemoryHistory, MemorySnapshot
from ..model.ranks import RankReport
from ..model.scan_result import ScanView
from . import (
                 check_html,
                 check_text,
                 explain_html,
                 explain_text,
                 holders,
                 html,
                 line_memory,
                 memory_html,
                 memory_plot,
                 memory_text,
                 ranks_html,
                 ranks_text,
                 text,
)

display.register(ScanView, text=text.render_scan, html=html.render_scan)
display.register(CheckReport, text=check_text.render_check, html=check_html.render_check)
display.register(Mismatch, text=lambda m: "\n".join(check_text.mismatch_lines(m)), html=check_html.mismatch_html)
display.register(DeviceError, text=lambda e: "\n".join(check_text.device_error_lines(e)),
                 html=check_html.device_error_html)
display.register(Explanation, text=explain_text.render_explanation, html=explain_html.render_explanation)
display.register(MemorySnapshot, text=memory_text.render_snapshot, html=memory_html.render_snapshot)
display.register(MemoryHistory, text=memory_text.render_history, html=memory_html.render_history,
                 figure=memory_plot.history_figure)
display.register(Holders, text=holders.render_text, html=holders.render_html)
display.register(LineMemoryProfile, text=line_memory.render_text, html=line_memory.render_html,
                 figure=memory_plot.lines_figure)
display.register(RankReport, text=ranks_text.report_text, html=ranks_html.report_html)
