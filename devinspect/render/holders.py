"""Rendering what keeps a tensor alive (``%devices --why``): text and static HTML."""

from __future__ import annotations

from html import escape

from ..model import Holders, Reference, human_bytes, shape_text
from .html import text_table
from .text import plural


def headline(h: Holders) -> str:
    size = h.unread or f"{human_bytes(h.nbytes)} on {h.device}, {h.dtype}{shape_text(h.shape)}"
    if not h.references and h.cut:
        return (f"{h.name} ({size}): no path found from your names, the output history or the last error in the "
                "part looked at (see below)")
    if not h.references:
        return f"{h.name} ({size}): no path from your names, the output history or the last error reaches it"
    return f"{h.name} ({size}) is kept alive by {plural(len(h.references), 'reference')}"


def _how(r: Reference) -> str:
    return "; ".join(part for part in (r.root, r.via, r.note) if part)


def footer(h: Holders) -> list[str]:
    out = []
    if h.unreached:
        out.append(f"also referred to directly by objects no name reaches: {', '.join(h.unreached)}")
    out.extend(h.cut)
    if h.too_deep:
        out.append("objects deeper than the search's depth bound were not followed: there may be more")
    if not h.complete and not h.cut and not h.too_deep:
        out.append("the search stopped at its bounds (objects visited or paths found): there may be more")
    return out


def render_text(h: Holders) -> str:
    lines = ["devinspect: " + headline(h)]
    width = max((len(r.path) for r in h.references), default=0)
    lines.extend(f"  {r.path:<{width}}  {_how(r)}" for r in h.references)
    lines.extend(f"  ({line})" for line in footer(h))
    return "\n".join(lines)


def render_html(h: Holders) -> str:
    out = [f'<div class="devinspect"><p style="margin:4px 0"><b>devinspect</b>: {escape(headline(h))}</p>']
    if h.references:
        out.append(text_table(("reference", "from", "through", "note"), [(r.path, r.root, r.via, r.note)
                                                                         for r in h.references], numeric=(), code=0))
    out.extend(f'<p style="margin:2px 0">({escape(line)})</p>' for line in footer(h))
    out.append("</div>")
    return "".join(out)
