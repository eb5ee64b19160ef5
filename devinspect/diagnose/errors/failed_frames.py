"""A failed call as its traceback shows it: its frames, the user's among them, their lines, and
how a fix that edits those lines is offered (shared by the readers of device errors)."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from ...collect import Entry, locations
from ...model import EditCell, Fix, Operand, SourceEdit, SourceLine
from ...runtime import tensor_getters
from ..causes import line_edits


@dataclass
class Failed:
    """A failed call as its traceback shows it: the frames, which are the user's, and names."""

    exc: BaseException
    entries: list[Entry]
    namespace: Mapping[str, Any]
    users: list[Entry] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.users = [e for e in self.entries if locations.is_user_code(e.frame.f_code)]

    @property
    def cell(self) -> Entry | None:
        """The outermost frame of the user's code (the cell, the checked block, the script)."""
        return self.users[0] if self.users else None

    @property
    def inner(self) -> Entry | None:
        """The innermost frame of the user's code: the line that called into the failing code."""
        return self.users[-1] if self.users else None

    def line(self, entry: Entry | None) -> SourceLine | None:
        if entry is None:
            return None
        code = entry.frame.f_code
        return locations.source_line(code.co_filename, entry.lineno, code.co_name)

    def deeper_line(self) -> SourceLine | None:
        """The innermost user line when it is not the cell's own (a helper the cell calls)."""
        return self.line(self.inner) if self.inner is not None and self.inner is not self.cell else None

    def statement(self, entry: Entry) -> line_edits.Statement | None:
        code = entry.frame.f_code
        return line_edits.statement_at(code.co_filename, entry.lineno, code.co_name)

    def library(self) -> str:
        """The package the innermost user line called that raised (``numpy``, ``matplotlib``)."""
        if self.inner is None:
            return ""
        after = self.entries[self.entries.index(self.inner) + 1:]
        for entry in after:
            filename = entry.frame.f_code.co_filename
            if not locations.is_own_file(filename):
                return locations.package_of(filename)
        return ""

    def device_of_default(self) -> str:
        return str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "cpu"

    def edit_fix(self, summary: str, edits: tuple[SourceEdit, ...], *, code: str | None = None,
                 note: str | None = None) -> Fix:
        """A fix that edits the user's lines: Apply fix makes an edit of the failed cell itself (the
        cell then runs edited); an edit elsewhere is printed, with the cells to run again."""
        cell_file = self.cell.frame.f_code.co_filename if self.cell is not None else None
        here = [e for e in edits if e.where.cell is not None and e.where.file == cell_file]
        action = EditCell(here[0]) if len(here) == 1 and len(edits) == 1 else None
        elsewhere = sorted({e.where.where.split(",")[0] for e in edits if e not in here})
        again = (f"Then run {', '.join(elsewhere)} again, and the cells after it that use what it makes"
                 if elsewhere and any(e.where.cell is not None for e in edits) else None)
        note = " ".join(filter(None, [note, again and again + "."])) or None
        return Fix(summary=summary, code=code, edits=edits, action=action, note=note,
                   rerun=action is not None or code is not None)


def describe(value: Any, name: str, source: str, detail: str = "") -> Operand:
    """An operand row for a tensor (its device, dtype and shape read statically)."""
    try:
        shape = tuple(int(s) for s in tensor_getters.shape(value))
    except Exception:
        shape = None
    return Operand(name, source, str(tensor_getters.device(value)), str(tensor_getters.dtype(value)).removeprefix("torch."), shape, detail)


def source_of(frame: types.FrameType, failed: Failed) -> str:
    """How a name of ``frame`` is known: a namespace variable (a cell's own frame) or a local."""
    return "namespace" if frame.f_locals is frame.f_globals or frame.f_globals is failed.namespace else "local"
