"""Static HTML of an explained error, in the style of the %%devcheck report."""

from __future__ import annotations

from html import escape

from ..model import Explanation, OutOfMemory, human_bytes
from .check_report_html import device_error_html, mismatch_html
from .explanation_text import (
    DEVCHECK_HINT,
    advice_text,
    asked_text,
    figures_line,
    held_text,
    holder_text,
    others_text,
    unwound_text,
    what_text,
)
from .html import CELL, NUM, fix_html

_NOWRAP = CELL + ";white-space:nowrap"


def out_of_memory_html(m: OutOfMemory) -> str:
    out = [f'<p style="margin:4px 0">✖ <b>out of memory on {escape(m.device or "an unknown device")}</b>: '
           f'{escape(asked_text(m))}</p>',
           f'<p style="margin:2px 0">when it failed: {escape(figures_line(m.at_failure))}<br>'
           f'now: {escape(figures_line(m.now) + unwound_text(m))}</p>']
    if m.largest:
        out.append(f'<p style="margin:2px 0">largest live tensors on {escape(m.device or "")}:</p>'
                   '<table style="border-collapse:collapse;margin:2px 0"><thead><tr>'
                   f'<th style="{_NOWRAP}">tensor</th><th style="{NUM}">size</th>'
                   f'<th style="{_NOWRAP}">dtype/shape</th><th style="{CELL}">held by</th></tr></thead><tbody>')
        for t in m.largest:
            out.append(f'<tr><td style="{_NOWRAP}"><code>{escape(t.name)}</code></td>'
                       f'<td style="{NUM}">{escape(human_bytes(t.nbytes))}</td>'
                       f'<td style="{_NOWRAP}">{escape(what_text(t))}</td>'
                       f'<td style="{CELL}">{escape(holder_text(t))}</td></tr>')
        if m.others:
            out.append(f'<tr><td colspan="4" style="{CELL}">{escape(others_text(m))}</td></tr>')
        out.append("</tbody></table>")
    if held_text(m):
        out.append(f'<p style="margin:2px 0">held only by {escape(held_text(m))}</p>')
    if m.releasable_bytes is not None:
        out.append(f'<p style="margin:2px 0">empty_cache() would release {escape(human_bytes(m.releasable_bytes))} '
                   "of cached segments now</p>")
    advice = f'<p style="margin:2px 0">{escape(advice_text(m))}</p>' if m.advice else ""
    if m.exceeds_capacity:
        out.append(advice)
    out.extend(fix_html(fix) for fix in m.fixes)
    if not m.exceeds_capacity:
        out.append(advice)
    return "".join(out)


def render_explanation(e: Explanation) -> str:
    out = ['<div class="devinspect">']
    if e.mismatch is not None:
        out.append(mismatch_html(e.mismatch))
        out.append(f'<p style="margin:2px 0">({escape(DEVCHECK_HINT)})</p>')
    elif e.device_error is not None:
        out.append(device_error_html(e.device_error))
    elif e.out_of_memory is not None:
        out.append(out_of_memory_html(e.out_of_memory))
    else:
        out.append(f'<p style="margin:2px 0"><b>devinspect</b>: {escape(e.error)}: {escape(e.note)}</p>')
    out.append("</div>")
    return "".join(out)
