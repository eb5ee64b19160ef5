"""``%%gpumem``'s live view: the profile's table, its step plot, and below them the
``%gpumem`` dashboard of the same device, with its actions (empty_cache, release history)."""

from __future__ import annotations

from typing import Any

from ..model import LineMemoryProfile
from ..render import render_html


def line_memory_widget(profile: LineMemoryProfile, dashboard: Any, plot_html: str | None = None) -> Any:
    """A VBox: the profile (static HTML), its plot (``plot_html``, made with the static copy:
    :class:`~devinspect.render.memory.plot.ProfileWithPlot`), and the ``dashboard`` (a
    :class:`~devinspect.jupyter.memory_dashboard.MemoryDashboard`)."""
    import ipywidgets as widgets

    # Text at the notebook's own line height (a widget's HTML is drawn at the height of a button row).
    parts = [widgets.HTML(f'<div style="line-height:1.4">{render_html(profile)}</div>')]
    if plot_html is not None:
        parts.append(widgets.HTML(plot_html))
    parts.append(dashboard.widget)
    return widgets.VBox(parts)
