"""A failed cell's explanation, owned in one place from the line drawn at the top of its
traceback to the display after the cell: made once, shown once, and kept for
``%devcheck --last``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class FailedCells:
    """What devinspect has done about the error of the cell that failed, keyed by the error's
    identity (a cell that fails again raises a new error object)."""

    #: The error a ``%%devcheck`` report explained already: the cell's end says nothing more.
    reported: int = 0
    #: (error, explanation) made while the traceback was drawn, for the cell's end to show.
    early: tuple[int, Any] | None = None
    #: The error whose explanation went above its traceback (a notebook): not shown again.
    shown_above: int = 0
    #: (error, explanation) made when the cell failed: what ``%devcheck --last`` shows for it.
    last: tuple[int, Any] | None = None

    def new_cell(self) -> None:
        self.shown_above = 0

    def report_explained(self, error: BaseException) -> None:
        """A ``%%devcheck`` report explained ``error``: the explanation after the cell does not repeat it."""
        self.reported = id(error)

    def was_reported(self, error: BaseException) -> bool:
        return id(error) == self.reported

    def take_reported(self, error: BaseException) -> bool:
        """Whether a report explained ``error``; forgotten once asked after its cell."""
        if id(error) != self.reported:
            return False
        self.reported = 0
        return True

    def made_early(self, error: BaseException, explanation: Any) -> None:
        self.early = (id(error), explanation)

    def early_for(self, error: BaseException) -> Any | None:
        """The explanation made while ``error``'s traceback was drawn, if it was."""
        return self.early[1] if self.early is not None and self.early[0] == id(error) else None

    def take_early(self, error: BaseException) -> tuple[bool, Any]:
        """(whether one was made, the explanation) for ``error``, forgotten after the cell."""
        early, self.early = self.early, None
        return (True, early[1]) if early is not None and early[0] == id(error) else (False, None)

    def show_above(self, error: BaseException) -> None:
        self.shown_above = id(error)

    def take_shown_above(self, error: BaseException) -> bool:
        shown, self.shown_above = self.shown_above, 0
        return shown == id(error)

    def remember(self, error: BaseException, explanation: Any) -> None:
        self.last = (id(error), explanation) if explanation else None

    def last_for(self, error: BaseException) -> Any | None:
        """The explanation made when ``error``'s cell failed (from the operands as they were then)."""
        return self.last[1] if self.last is not None and self.last[0] == id(error) else None
