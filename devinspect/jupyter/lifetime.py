"""Closing a view's widgets when its output goes.

ipywidgets keeps every widget it made (and its comm) until ``close()`` is called on it; a
notebook that clears or replaces an output only removes the views in the browser. A
view of ours is a tree of widgets (boxes, their children, each one's layout and style),
so closing it means closing every widget in that tree.
"""

from __future__ import annotations

from typing import Any, Iterable


def widgets_below(roots: Iterable[Any], keep: Iterable[Any] = ()) -> list[Any]:
    """``roots`` and every widget their synchronised traits hold (children, layout, style,
    a tab's pages …), each once, leaving out ``keep`` and what lies below it."""
    from ipywidgets import Widget

    found: list[Any] = []
    seen: set[int] = {id(k) for k in keep}
    stack = list(roots)
    while stack:
        widget = stack.pop()
        if not isinstance(widget, Widget) or id(widget) in seen:
            continue
        seen.add(id(widget))
        found.append(widget)
        for name in widget.keys:
            value = widget._trait_values.get(name)  # the stored value: no trait default is made here
            if isinstance(value, Widget):
                stack.append(value)
            elif isinstance(value, (tuple, list)):
                stack.extend(v for v in value if isinstance(v, Widget))
    return found


def close_all(roots: Iterable[Any], keep: Iterable[Any] = ()) -> int:
    """Close every widget in the trees of ``roots`` except those in ``keep`` (layouts shared
    with rows that stay); returns how many were open."""
    closed = 0
    for widget in widgets_below(roots, keep):
        if widget.comm is None:
            continue
        widget.close()
        closed += 1
    return closed
