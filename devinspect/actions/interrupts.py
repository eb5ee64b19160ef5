"""KeyboardInterrupt during an action: held while a change is made or undone, taken between changes.

CPython runs the SIGINT handler between two bytecodes of the main thread, and the default
handler raises KeyboardInterrupt right there: in the middle of a change (a Parameter's data
set and its gradient not yet, a ``with torch.no_grad()`` left without its exit). While an
action runs, its outermost call (:func:`atomic`) puts in a handler that only notes the
signal. The action takes a noted interrupt at its step boundaries (:func:`checkpoint`, which
the undo log runs as each change is logged): there it is a failure like any other, so what
was done is undone, and the KeyboardInterrupt is raised again with a note saying so. One that
comes after the last step is raised once the action is complete, with a note saying what it
did. Off the main thread no signal arrives, and nothing is held.
"""

from __future__ import annotations

import _thread
import functools
import signal
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


class _Holding:
    """The outermost action's state: the handler it replaced, and whether a signal came."""

    def __init__(self) -> None:
        self.depth = 0
        self.owner: int | None = None
        self.previous: Any = None
        self.pending = False


_holding = _Holding()


def _note(signum: int, frame: Any) -> None:
    _holding.pending = True


def _mine() -> bool:
    return _holding.depth > 0 and _holding.owner == _thread.get_ident()


def _interrupt(handler: Any) -> BaseException | None:
    """What the handler the action replaced makes of the signal: the exception it raises (the
    default one raises KeyboardInterrupt), or None when it ignores it."""
    if handler is signal.default_int_handler or handler in (signal.SIG_DFL, None):
        return KeyboardInterrupt()
    if handler == signal.SIG_IGN or not callable(handler):
        return None
    try:
        handler(signal.SIGINT, None)
    except BaseException as exc:  # whatever the user's handler raises is what is raised
        return exc
    return None


def checkpoint() -> None:
    """A step boundary: raise the interrupt noted since the last one (the action then undoes
    what it did, as for any failure)."""
    if _holding.pending and _mine():
        _holding.pending = False
        raised = _interrupt(_holding.previous)
        if raised is not None:
            raise raised


def changes_kept(exc: BaseException, left: list[str], undone: int) -> None:
    """Record on an interrupt passing through an action what its undo left changed (``left``)
    and how many changes it put back; the outermost action turns this into the note."""
    try:
        exc.devinspect_left = [*getattr(exc, "devinspect_left", []), *left]
        exc.devinspect_undone = getattr(exc, "devinspect_undone", 0) + undone
    except (AttributeError, TypeError):  # an exception type without a __dict__: nothing to record on
        pass


def _what(func: Callable[..., Any]) -> str:
    return func.__name__.replace("_", " ")


def _noted(exc: BaseException, func: Callable[..., Any], result: Any) -> BaseException:
    """``exc`` with a note saying what the interrupted action left: done, nothing, or what stays."""
    if any(str(n).startswith("devinspect:") for n in getattr(exc, "__notes__", ())) or not hasattr(exc, "add_note"):
        return exc
    if result is not None:
        text = f"devinspect: the interrupt came once {_what(func)} had finished, so it was not undone: {result.message}"
    else:
        left, undone = getattr(exc, "devinspect_left", []), getattr(exc, "devinspect_undone", 0)
        if left:
            text = (f"devinspect: {_what(func)} was interrupted; not all of it could be undone, so these stay "
                    f"changed: {', '.join(left)} (everything else is as before)")
        else:
            undid = f" (the {undone} changes made before it were undone)" if undone > 1 else \
                " (the change made before it was undone)" if undone == 1 else ""
            text = f"devinspect: {_what(func)} was interrupted: nothing was changed{undid}"
    exc.add_note(text)
    return exc


def _release(previous: Any) -> bool:
    """Put back the handler the action replaced; whether a signal was noted and not yet taken.
    From the first line here, an interrupt raises as it would without devinspect: the action
    is over."""
    _holding.depth, _holding.owner, _holding.previous = 0, None, None
    signal.signal(signal.SIGINT, previous)
    return _holding.pending


def atomic(func: F) -> F:
    """Run the action ``func`` with SIGINT held (outermost call only): an interrupt is taken at
    its step boundaries, or raised once it is complete, with a note saying which."""

    @functools.wraps(func)
    def held(*args: Any, **kwargs: Any) -> Any:
        if _mine():
            return func(*args, **kwargs)
        _holding.pending = False  # before the handler is in: a signal noted from here on is taken
        try:
            previous = signal.signal(signal.SIGINT, _note)
        except ValueError:  # not the main thread: no signal arrives here
            return func(*args, **kwargs)
        _holding.depth, _holding.owner, _holding.previous = 1, _thread.get_ident(), previous
        try:
            result = func(*args, **kwargs)
        except KeyboardInterrupt as exc:
            _noted(exc, func, None)
            _release(previous)  # a second interrupt noted while undoing is this one
            raise
        except BaseException:
            _release(previous)
            raise
        late = _interrupt(previous) if _release(previous) else None
        if late is not None:
            raise _noted(late, func, result) if isinstance(late, KeyboardInterrupt) else late
        return result

    return held  # type: ignore[return-value]
