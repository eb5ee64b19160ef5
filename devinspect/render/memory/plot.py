"""The per-cell memory plot, drawn by matplotlib (optional: ``pip install matplotlib``).

A bare :class:`matplotlib.figure.Figure` with the Agg canvas: no pyplot state, so
the user's figures, backend and ``%matplotlib`` mode are left alone.

The y-axis is fitted to the data (a change of 2 MiB on 3 GiB stays visible), the
legend sits beside the panels, never on a point, and the figure comes in a light and
a dark rendering: :class:`HistoryPlot` shows the one that matches JupyterLab's theme
(the page says which through ``data-jp-theme-light``) and the light one elsewhere.
"""

from __future__ import annotations

import base64
import io
from typing import Any

from ...model import LineMemory, LineMemoryProfile, MemoryHistory

_MIB = float(1 << 20)

#: Text, axes and grid colours per theme; line colours that read on both backgrounds.
_THEMES = {
    "light": {"text": "#1f1f1f", "grid": "#c8c8c8", "face": "#ffffff"},
    "dark": {"text": "#e6e6e6", "grid": "#4a4a4a", "face": "#111111"},
}
_LINES = ("#1f77b4", "#e8710a", "#2ca02c")


def history_figure(history: MemoryHistory, theme: str = "light") -> Any:
    """One panel per device: memory after each cell and the peak during it (MiB)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    colours = _THEMES[theme]
    frame = history.frame
    devices = list(dict.fromkeys(frame["device"])) or ["cpu"]
    fig = Figure(figsize=(8.5, 2.3 * len(devices)), layout="constrained", facecolor=colours["face"])
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(devices), 1, squeeze=False)[:, 0]
    for ax, device in zip(axes, devices):
        rows = frame[frame["device"] == device]
        x = [str(c) for c in rows["cell"]]
        cpu = device == "cpu"
        series = [("resident (RSS)" if cpu else "allocated", "allocated_after", "-", "o"),
                  ("peak during cell", "peak_allocated", ":", "^")]
        if not cpu:
            series.insert(1, ("reserved", "reserved_after", "--", "s"))
        low = high = None
        for (label, column, style, marker), colour in zip(series, _LINES):
            values = rows[column].astype("float64") / _MIB
            if values.notna().any():
                ax.plot(x, values, linestyle=style, marker=marker, label=label, color=colour)
                low = values.min() if low is None else min(low, values.min())
                high = values.max() if high is None else max(high, values.max())
        if low is not None:
            span = max(high - low, max(abs(high), 1.0) * 0.02)  # a flat line still gets a visible band
            ax.set_ylim(low - 0.15 * span, high + 0.15 * span)
        _themed(ax, colours, device)
    axes[-1].set_xlabel("cell", color=colours["text"])
    return fig


def _themed(ax: Any, colours: dict[str, str], title: str) -> None:
    ax.set_facecolor(colours["face"])
    ax.set_title(title, loc="left", fontsize="medium", color=colours["text"])
    ax.set_ylabel("MiB", color=colours["text"])
    ax.tick_params(colors=colours["text"])
    for spine in ax.spines.values():
        spine.set_color(colours["grid"])
    ax.grid(True, color=colours["grid"], alpha=0.6)
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    for text in legend.get_texts():
        text.set_color(colours["text"])


def as_they_ended(lines: tuple[LineMemory, ...]) -> list[LineMemory]:
    """The profile's lines (each under the line that called it) in the order they ended: a
    function's lines before the line that ran them, so that "after" reads as a timeline."""
    out: list[LineMemory] = []
    running: list[LineMemory] = []
    for m in lines:
        while running and running[-1].depth >= m.depth:
            out.append(running.pop())
        running.append(m)
    out.extend(reversed(running))
    return out


def lines_figure(profile: LineMemoryProfile, theme: str = "light") -> Any:
    """``%%gpumem``'s step plot: allocated and reserved after each profiled line, from the
    cell's start, with the peak inside each line (MiB); lines in the order they ended."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    colours = _THEMES[theme]
    fig = Figure(figsize=(8.5, 2.6), layout="constrained", facecolor=colours["face"])
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    lines = as_they_ended(profile.lines)
    x = ["start", *(m.label.replace("line ", "") for m in lines)]
    series = [("allocated", [profile.allocated_start, *(m.allocated_after for m in lines)], "-"),
              ("reserved", [profile.reserved_start, *(m.reserved_after for m in lines)], "--"),
              ("peak in line", [None, *(m.peak for m in lines)], ":")]
    for (label, values, style), colour in zip(series, _LINES):
        points = [(i, v / _MIB) for i, v in enumerate(values) if v is not None]
        if points:
            ax.step([p[0] for p in points], [p[1] for p in points], where="post", linestyle=style,
                    label=label, color=colour)
    ax.set_xticks(range(len(x)), x, rotation=0 if len(x) < 16 else 90, fontsize="small")
    _themed(ax, colours, f"{profile.device}, by line")
    nested = any(m.depth for m in lines)
    ax.set_xlabel("after line" + (" (a function's lines come before the line that called them)" if nested else ""),
                  color=colours["text"])
    return fig


def figure_png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, facecolor=figure.get_facecolor())
    return buffer.getvalue()


def history_png(history: MemoryHistory, theme: str = "light") -> bytes:
    return figure_png(history_figure(history, theme))


class HistoryPlot:
    """The plot for a notebook: the rendering that matches JupyterLab's theme, light elsewhere."""

    alt = "memory per cell"

    def __init__(self, history: MemoryHistory):
        self.light = history_png(history, "light")
        self.dark = history_png(history, "dark")

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        light = base64.b64encode(self.light).decode()
        dark = base64.b64encode(self.dark).decode()
        # Never wider than the output area (577 px in JupyterLab beside its file browser).
        html = (
            "<style>"
            "[data-jp-theme-light='false'] .devinspect-plot-light{display:none!important}"
            "[data-jp-theme-light='false'] .devinspect-plot-dark{display:inline!important}"
            "</style>"
            # As wide as drawn, or as the output where that is narrower (a notebook beside a file browser).
            f'<img class="devinspect-plot-light" alt="{self.alt}" style="max-width:100%;height:auto" '
            f'src="data:image/png;base64,{light}">'
            f'<img class="devinspect-plot-dark" alt="{self.alt}" style="display:none;max-width:100%;height:auto" '
            f'src="data:image/png;base64,{dark}">'
        )
        return {"text/html": html, "image/png": light, "text/plain": f"<{self.alt} plot>"}


class LinesPlot(HistoryPlot):
    """``%%gpumem``'s step plot, in both themes."""

    alt = "memory by line"

    def __init__(self, profile: LineMemoryProfile):
        self.light = figure_png(lines_figure(profile, "light"))
        self.dark = figure_png(lines_figure(profile, "dark"))


class ProfileWithPlot:
    """``%%gpumem``'s static copy: the profile, then its step plot, as one output, so that a
    notebook saved or exported (nbconvert) shows both without a running kernel. ``plot_html``
    is the plot's HTML, made once for this copy and for the live view (None without
    matplotlib, or with no line to plot)."""

    def __init__(self, profile: LineMemoryProfile):
        self.profile = profile
        self.plot_html: str | None = None
        if profile.lines:
            try:
                self.plot_html = LinesPlot(profile)._repr_mimebundle_()["text/html"]
            except ImportError:  # matplotlib is optional: the table says it all
                pass

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        out = dict(self.profile._repr_mimebundle_())
        if self.plot_html is not None and "text/html" in out:
            out["text/html"] += self.plot_html
        return out
