"""Static HTML for memory snapshots and per-cell history (nbconvert, GitHub, the widget's tables).

Like :mod:`devinspect.render.html`: no colours of its own, no scripts; the bars are
HTML ``<meter>`` elements, which every browser draws in its own theme.
"""

from __future__ import annotations

from html import escape

from ...model import DeviceMemory, MemoryHistory, MemorySnapshot, ReconRow, human_bytes
from ..html import CELL, NUM, text_table
from .snapshot_text import (
    HISTORY_HEADERS,
    details,
    device_headline,
    device_title,
    history_rows,
    recon_value,
    snapshot_title,
)


def bars(d: DeviceMemory) -> list[tuple[str, int]]:
    """(label, bytes) of what to draw as a fraction of ``d.driver_total_bytes``: allocated /
    reserved / used for a device, this process / in use for the CPU; unmeasured ones left out."""
    total = d.driver_total_bytes
    if not total:
        return []
    in_use = None if d.driver_free_bytes is None else total - d.driver_free_bytes
    if d.kind == "cpu":
        found = [("this process", d.process_bytes), ("in use", in_use)]
    else:
        used = d.driver_used_bytes if d.driver_used_bytes is not None else in_use
        found = [("allocated", d.allocated_bytes), ("reserved", d.reserved_bytes), ("used (driver)", used)]
    return [(label, value) for label, value in found if value is not None]


def meters(d: DeviceMemory) -> str:
    """The bars as HTML ``<meter>`` elements."""
    shown = bars(d)
    if not shown:
        return ""
    total = d.driver_total_bytes
    out = ['<table style="border-collapse:collapse">']
    for label, value in shown:
        out.append(
            f'<tr><td style="{CELL}">{label}</td>'
            f'<td style="{CELL}"><meter min="0" max="{total}" value="{value}" style="width:16em"></meter></td>'
            f'<td style="{NUM}">{escape(human_bytes(value))} of {escape(human_bytes(total))}</td></tr>'
        )
    out.append("</table>")
    return "".join(out)


def reconciliation_table(d: DeviceMemory) -> str:
    rows = d.reconciliation
    if not rows:
        return ""
    out = ['<table style="border-collapse:collapse"><thead><tr>',
           f'<th style="{CELL};white-space:nowrap">where the memory is</th><th style="{NUM}">bytes</th>',
           f'<th style="{CELL}">source</th><th style="{CELL}">how</th></tr></thead><tbody>']
    for r in rows:
        # A wrapped label continues under its own first word (a hanging indent), not flush left.
        indent = "padding-left:1.2em;text-indent:-1.2em;" if r.total else "padding-left:2.2em;text-indent:-1.2em;"
        label = f"<b>= {escape(r.label)}</b>" if r.total else escape(r.label)
        top = "border-top:1px solid currentColor;" if r.total else ""
        out.append(f'<tr style="line-height:1.25"><td style="{top}{CELL};{indent}">{label}</td>'
                   f'<td style="{top}{NUM}">{escape(recon_value(r))}</td>'
                   f'<td style="{top}{CELL}">{escape(r.source)}</td>{_how(r, top)}</tr>')
    out.append("</tbody></table>")
    return "".join(out)


def _how(r: ReconRow, top: str) -> str:
    """The row's "how", in words; the call that reads it in a tooltip (dotted underline)."""
    if not r.call:
        return f'<td style="{top}{CELL}">{escape(r.note)}</td>'
    return (f'<td style="{top}{CELL}" title="{escape(r.call, quote=True)}"><span style="text-decoration:underline '
            f'dotted;cursor:help">{escape(r.note)}</span></td>')


def render_device(d: DeviceMemory) -> str:
    parts = [f"<p><b>{escape(device_title(d))}</b><br>{escape(device_headline(d))}"]
    extra = details(d)
    if extra:
        parts.append(f"<br>{escape(extra)}")
    if d.driver_status and d.kind != "cpu":
        parts.append(f"<br>driver: {escape(d.driver_status)}")
    parts.append("</p>")
    parts.append(meters(d))
    parts.append(reconciliation_table(d))
    return "".join(parts)


def render_snapshot(snapshot: MemorySnapshot) -> str:
    out = [f'<div class="devinspect"><p><b>devinspect</b>: {escape(snapshot_title(snapshot))}</p>']
    for note in snapshot.notes:
        out.append(f"<p>{escape(note)}</p>")
    for d in snapshot.devices:
        out.append(render_device(d))
    out.append("</div>")
    return "".join(out)


def render_history(history: MemoryHistory) -> str:
    if not history.cells:
        return "<p>devinspect: no cells recorded yet (<code>%gpumem --track</code> starts recording).</p>"
    return (f'<div class="devinspect"><p><b>devinspect</b>: memory per cell ({len(history.cells)} cells)</p>'
            + text_table(HISTORY_HEADERS, history_rows(history), numeric={2, 3, 4, 5, 6}, code=7) + "</div>")
