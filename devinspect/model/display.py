"""How a result object shows itself, without the data importing the code that draws it.

The renderers (:mod:`devinspect.render`) register one function per result type and
form (``text``, ``html``, ``figure``); a result's ``__repr__`` and
``_repr_mimebundle_`` ask here. Importing ``devinspect`` names the loader that registers
them all (:func:`load_with`), run the first time a result is drawn, so a result always has its
text and HTML while ``import devinspect`` stays cheap; without it, ``text`` falls back to a
plain repr.
"""

from __future__ import annotations

from typing import Any, Callable

_renderers: dict[tuple[type, str], Callable[[Any], Any]] = {}
#: Registers the renderers; run once, when a result is first drawn.
_loader: Callable[[], Any] | None = None


def load_with(loader: Callable[[], Any]) -> None:
    """``loader()`` registers the renderers; it runs the first time one is asked for."""
    global _loader
    _loader = loader


def register(cls: type, **forms: Callable[[Any], Any]) -> None:
    """Draw instances of ``cls`` with these functions (``text=…, html=…, figure=…``)."""
    for form, draw in forms.items():
        _renderers[(cls, form)] = draw


def renderer(obj: Any, form: str) -> Callable[[Any], Any] | None:
    """The function registered for ``obj``'s type (or a base class of it) and ``form``."""
    global _loader
    if _loader is not None:
        load, _loader = _loader, None
        load()
    for cls in type(obj).__mro__:
        draw = _renderers.get((cls, form))
        if draw is not None:
            return draw
    return None


def text(obj: Any) -> str:
    """``obj`` as text, the way a terminal shows it."""
    draw = renderer(obj, "text")
    return draw(obj) if draw is not None else object.__repr__(obj)


def bundle(obj: Any, include: Any = None, exclude: Any = None) -> dict[str, Any]:
    """The MIME bundle of ``obj``: ``text/plain`` always, ``text/html`` where registered;
    only the types in ``include`` (when given) and none in ``exclude``, as IPython asks."""

    def wanted(mime: str) -> bool:
        return (not include or mime in include) and not (exclude and mime in exclude)

    out = {"text/plain": text(obj)} if wanted("text/plain") else {}
    html = renderer(obj, "html") if wanted("text/html") else None
    if html is not None:
        out["text/html"] = html(obj)
    return out


class Displayed:
    """A result that shows itself through the registered renderers: its ``repr`` is its
    text, and a frontend gets its MIME bundle. Dataclasses that use it pass ``repr=False``,
    so that the generated repr does not replace this one."""

    __slots__ = ()

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        return bundle(self, include, exclude)

    def __repr__(self) -> str:
        return text(self)


def draw(obj: Any, form: str) -> Any:
    """What the renderer registered for ``form`` makes of ``obj`` (a figure, say); LookupError if none."""
    found = renderer(obj, form)
    if found is None:
        raise LookupError(f"nothing draws a {type(obj).__name__} as {form}")
    return found(obj)
