"""Where an edit of a notebook cell is shown at once, besides being recorded.

A kernel cannot change a cell's editor; a notebook front end can (devinspect's JupyterLab
extension). Such a front end registers an :class:`EditSink` here, and the code that records an
edit of a cell (:mod:`devinspect.actions.cells`) offers it each edit. Kept apart from that
code so that registering a sink when devinspect loads imports nothing heavy (no torch).
"""

from __future__ import annotations

from typing import Any, Protocol


class EditSink(Protocol):
    """Something that shows an edit of a cell where the user reads the cell (a notebook's editor).

    An edit has ``original`` (the cell's text as it ran), ``edited`` (its text after the fix) and
    ``cell`` (the execution count it ran under): :class:`devinspect.actions.cells.PendingEdit`.
    """

    def offer(self, edit: Any) -> bool:
        """Show ``edit`` once the action that made it has finished; True when a front end will."""

    def withdraw(self, edit: Any) -> None:
        """Do not show ``edit`` after all: the action that made it was undone."""


_sinks: list[EditSink] = []


def add(sink: EditSink) -> None:
    if sink not in _sinks:
        _sinks.append(sink)


def remove(sink: EditSink) -> None:
    if sink in _sinks:
        _sinks.remove(sink)


def offered(edit: Any) -> bool:
    """Offer ``edit`` to every sink; whether any will show it."""
    shown = False
    for sink in list(_sinks):
        try:
            shown = sink.offer(edit) or shown
        except Exception:  # a front end that cannot show it leaves the edit pending, as without one
            pass
    return shown


def withdrawn(edit: Any) -> None:
    """Take ``edit`` back from every sink (its action was undone)."""
    for sink in list(_sinks):
        try:
            sink.withdraw(edit)
        except Exception:
            pass
