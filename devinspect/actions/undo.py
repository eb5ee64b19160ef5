"""An action's undo log: what each committed change restores, run newest first when a later
change (or a later step of a several-step fix) fails, and the one message a failure gives."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

from .interrupts import changes_kept, checkpoint
from .result import ActionResult

NOTHING_CHANGED = " (nothing was changed)"


class UndoLog:
    """``(label, restore)`` for each change made so far; ``label`` says what stays where if its
    ``restore`` fails (``"x (on sim:0)"``). A change that cannot be undone (a released
    traceback) is logged with no ``restore``: a rollback reports it as staying."""

    def __init__(self) -> None:
        self._entries: list[tuple[str, Callable[[], None] | None]] = []

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, label: str, restore: Callable[[], None]) -> None:
        """Log a change; the point after it is a step boundary, where a held interrupt is taken."""
        self._entries.append((label, restore))
        checkpoint()

    def add_final(self, label: str) -> None:
        """A change that stays even when the steps around it are undone."""
        self._entries.append((label, None))

    def extend(self, other: UndoLog) -> None:
        """Take over ``other``'s entries (a step that succeeded inside a larger fix)."""
        self._entries.extend(other._entries)
        other._entries = []

    def rollback(self) -> list[str]:
        """Undo every change, newest first; the labels of those that stay (in the order made)."""
        stuck = []
        while self._entries:
            label, restore = self._entries.pop()
            if restore is None:
                stuck.append(label)
                continue
            try:
                restore()
            except BaseException:  # undo the rest; say which change stayed
                stuck.append(label)
        stuck.reverse()
        return stuck

    @contextmanager
    def undone_on_error(self) -> Iterator[None]:
        """Whatever escapes the block (an interrupt taken at a step boundary, an error no step
        handled) first undoes every change logged here; the exception records what stayed."""
        try:
            yield
        except BaseException as exc:
            count = len(self._entries)
            stuck = self.rollback()
            changes_kept(exc, stuck, count - len(stuck))
            raise


def failure(detail: str, left: list[str] | tuple[str, ...] = (), *, undone: int = 0,
            follow_up: object = None) -> ActionResult:
    """A failed action's result, in one truthful sentence: ``detail`` (what failed and why), then
    either that nothing was changed (``undone`` earlier steps were put back) or what stays."""
    if not left:
        if undone:
            steps = "step done before it was" if undone == 1 else f"{undone} steps done before it were"
            message = f"{detail} (nothing was changed: the {steps} undone)"
        else:
            message = detail + NOTHING_CHANGED
    else:
        message = (f"{detail}; not all of it could be undone, so these stay changed: {', '.join(left)} "
                   "(everything else is as before)")
    return ActionResult(False, message, 0, follow_up, detail=detail, left=tuple(left))


def escaped(detail: str, exc: BaseException) -> ActionResult:
    """The result for an error that escaped an action's steps: what its undo left, as recorded on
    the exception by :meth:`UndoLog.undone_on_error` (unknown where nothing recorded it)."""
    if hasattr(exc, "devinspect_undone"):
        return failure(detail, getattr(exc, "devinspect_left", ()), undone=exc.devinspect_undone)
    return failure(detail, ("whatever the step did before the error",))


def detail_of(result: ActionResult) -> str:
    """What failed and why, without the closing words about what changed."""
    return result.detail if result.detail is not None else result.message.removesuffix(NOTHING_CHANGED)
