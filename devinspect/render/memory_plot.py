"""The per-cell memory plot, drawn by matplotlib (optional: ``pip install matplotlib``).

A bare :class:`matplotlib.figure.Figure` with the Agg canvas: no pyplot state, so
the user's figures, backend and ``%matplotlib`` mode are left alone.
"""

from __future__ import annotations

import io
from typing import Any

from ..memory_model import MemoryHistory

_MIB = float(1 << 20)


def history_figure(history: MemoryHistory) -> Any:
    """One panel per device: allocated and reserved after each cell, and the peak during it (MiB)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    frame = history.frame
    devices = list(dict.fromkeys(frame["device"])) or ["cpu"]
    fig = Figure(figsize=(7.5, 2.4 * len(devices)), layout="constrained")
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
        for label, column, style, marker in series:
            values = rows[column].astype("float64") / _MIB
            if values.notna().any():
                ax.plot(x, values, linestyle=style, marker=marker, label=label)
        ax.set_title(device, loc="left", fontsize="medium")
        ax.set_ylabel("MiB")
        ax.set_ylim(bottom=0)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("cell")
    return fig


def history_png(history: MemoryHistory) -> bytes:
    buffer = io.BytesIO()
    history_figure(history).savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()
