"""Edits of the cell that failed, made when it runs again.

A kernel cannot change the text of a cell in the notebook; the notebook can, when the
kernel answers the cell's next run with the edited text (IPython's ``set_next_input``
with ``replace=True``, as ``%load`` uses). Apply fix on an edit of the failed cell
therefore records the edit here; the IPython layer runs the edited text in place of the
cell's text when that cell runs again (:mod:`devinspect.ipython.edited_cells`), and
forgets the edit once a run of it succeeded, or when the cell runs with other text.

Where a notebook front end can change the editor itself (devinspect's JupyterLab extension),
an edit sink (:mod:`devinspect.runtime.edit_sinks`) is offered each recorded edit too: it shows
the edit in the editor at once, and takes it back if the action it belongs to is undone.
"""

from __future__ import annotations

import linecache
from dataclasses import dataclass
from typing import Any, Iterable

from ..model import EditCell, SourceEdit, Steps
from ..runtime import edit_sinks
from .result import ActionResult
from .undo import UndoLog


@dataclass(frozen=True)
class PendingEdit:
    """The text of a cell as it failed, and as it runs next."""

    original: str
    edited: str
    cell: int | None
    #: Every edit made in ``edited``, each naming a line of ``original``.
    edits: tuple[SourceEdit, ...] = ()


#: Pending edits, by the cell's text as it failed (stripped of trailing whitespace) and its run.
_pending: dict[tuple[str, int | None], PendingEdit] = {}


def apply_lines(text: str, edits: list[SourceEdit]) -> str | None:
    """``text`` with ``edits`` made (each names a line by number); None when a line is not as the edit says."""
    lines = text.split("\n")
    for edit in sorted(edits, key=lambda e: -e.where.line):
        index = edit.where.line - 1
        if not 0 <= index < len(lines) or lines[index].strip() != edit.old.strip():
            return None
        original = lines[index]
        indent = original[: len(original) - len(original.lstrip())]
        lines[index: index + 1] = [indent + part if part else part for part in edit.new.split("\n")] if edit.new else []
    return "\n".join(lines)


def edit_cell(edit: SourceEdit, undo: UndoLog | None = None) -> ActionResult:
    """Record ``edit`` of a cell: the next run of that cell's text runs the edited text (with
    ``undo``, how to forget it again is logged there)."""
    if edit.where.cell is None:
        return ActionResult(False, f"{edit.where.where} is not a notebook cell; make the edit there (nothing was changed)")
    original = "".join(linecache.getlines(edit.where.file)).rstrip()
    if not original:
        return ActionResult(False, f"the text of {edit.where.where} is no longer at hand (nothing was changed)")
    key = (original, edit.where.cell)
    previous = _pending.get(key)
    # Several edits of one cell (a fix's lines in the same cell) all run: each names a line of the
    # text as it is now, so they are made together on that text.
    earlier = previous.edits if previous is not None else ()
    if edit in earlier:
        return ActionResult(False, f"Cell In[{edit.where.cell}], line {edit.where.line} is already recorded to become: "
                                   f"{edit.new.strip()} (nothing was changed)", idle=True)
    edited = apply_lines(original, [*earlier, edit])
    if edited is None:
        return ActionResult(False, f"line {edit.where.line} of Cell In[{edit.where.cell}] is not {edit.old!r} any more "
                                   "(nothing was changed)")
    pending = _pending[key] = PendingEdit(original, edited, edit.where.cell, (*earlier, edit))
    shown = edit_sinks.offered(pending)
    if undo is not None:
        def forget_this() -> None:
            edit_sinks.withdrawn(pending)
            if previous is None:
                _pending.pop(key, None)
            else:
                _pending[key] = previous

        undo.add(f"the edit of Cell In[{edit.where.cell}] (pending)", forget_this)
    then = ("the notebook's editor shows it now: run the cell" if shown else
            "it runs so when the cell runs again")
    return ActionResult(True, f"Cell In[{edit.where.cell}], line {edit.where.line} becomes: {edit.new.strip()} — {then}")


def edits_of(action: Any) -> tuple[SourceEdit, ...]:
    """The edits of cells an action records itself (an ``EditCell``, alone or among ``Steps``)."""
    if isinstance(action, EditCell):
        return (action.edit,)
    if isinstance(action, Steps):
        return tuple(edit for step in action.actions for edit in edits_of(step))
    return ()


def show_in_editors(edits: Iterable[SourceEdit]) -> list[int]:
    """Offer the edits of notebook cells that a fix prints besides what its action does (the
    class cell a ``register_buffer`` fix names) to the edit sinks, one edit per cell; the
    numbers of the cells a front end will change in its editor. Nothing is recorded: without a
    front end such an edit stays printed advice, as it was."""
    by_cell: dict[tuple[str, int], list[SourceEdit]] = {}
    for edit in edits:
        if edit.where.cell is not None:
            by_cell.setdefault((edit.where.file, edit.where.cell), []).append(edit)
    shown = []
    for (file, cell), group in by_cell.items():
        original = "".join(linecache.getlines(file)).rstrip()
        edited = apply_lines(original, group) if original else None
        if edited is not None and edited != original and edit_sinks.offered(PendingEdit(original, edited, cell)):
            shown.append(cell)
    return shown


def pending_edits() -> list[PendingEdit]:
    """The edits recorded and not yet run to success, oldest first."""
    return list(_pending.values())


def forget(edit: PendingEdit) -> None:
    """Drop ``edit`` (it ran and succeeded, or its cell now holds other text)."""
    _pending.pop((edit.original, edit.cell), None)


def forget_pending() -> None:
    _pending.clear()
