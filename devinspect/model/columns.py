"""A table's columns as data: each declared once, read by every view of that table.

A :class:`Column` says what a column is called, how its text is read from the rows (all of them
at once, so a table of 100,000 tensors reads a column in one pass), how it sorts, which side it
keeps to, how wide it may be (its :data:`WidthClass`), and whether it leaves the table when the
output is narrow. The DataFrame, the plain text, the static HTML and the explorer widget all
walk the same tuple of columns, as pytorch_memlab's line profiler walks ``DEFAULT_COLUMNS``:
a new column is one more entry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Generic, Literal, Sequence, TypeVar

Row = TypeVar("Row")

#: How a column takes its width, in every view:
#:
#: - ``name``: a name the user typed (``model.fc1.weight``, ``losses[0]``), in code type. It takes
#:   the width the others leave and wraps only between the name's parts (before ``.`` and ``[``,
#:   after ``,``), never inside one.
#: - ``word``: a short value kept whole on one line (a kind, a device, a dtype, a shape), as wide as
#:   its ``chars``.
#: - ``number``: right-aligned and kept on one line, except after an arrow (``1.0 MiB → 2.0 MiB``).
#: - ``words``: prose; wraps between words, and between the names of a list of names.
#: - ``code``: a line of the user's code, on a line of its own across the table.
WidthClass = Literal["name", "word", "number", "words", "code"]
#: How the explorer orders a column: by its text, by its text with numbers counted as numbers
#: (``pool[2]`` before ``pool[10]``), or by the numbers its ``keys`` reader gives.
SortClass = Literal["text", "natural", "number"]


@dataclass(frozen=True)
class Column(Generic[Row]):
    """One column of a table, declared once (see the module's text)."""

    #: The header, and the name of its column in a frame of texts.
    name: str
    #: Every row's text, read from the rows in one pass.
    texts: Callable[[Sequence[Row]], list[str]]
    width: WidthClass = "word"
    #: The longest text shown whole without wrapping, in characters: a ``word`` column's width,
    #: and the least width of the others (so a short column never collapses to a sliver).
    chars: int = 6
    #: Leaves the table when the output is narrow (a laptop with the file browser open); its
    #: value stays in the row's tooltip and in the DataFrame.
    folds: bool = False
    sort: SortClass = "text"
    #: The numbers a ``number`` sort orders by, read from the rows in one pass.
    keys: Callable[[Sequence[Row]], list[int]] | None = None
    #: The record field the DataFrame keeps for this column (its value, not its text); None when
    #: the frame keeps the column's text under its name.
    field: str | None = None
    #: Shown as a column of the explorer's grid; otherwise in each row's tooltip.
    in_grid: bool = True

    @property
    def right(self) -> bool:
        """Right-aligned (numbers)."""
        return self.width == "number"

    def text(self, row: Row) -> str:
        """One row's text."""
        return self.texts((row,))[0]


def each(read: Callable[[Any], str]) -> Callable[[Sequence[Any]], list[str]]:
    """A column's reader made from a reader of one row."""
    return lambda rows: [read(row) for row in rows]


def column_named(columns: Sequence[Column], name: str) -> Column:
    """The column called ``name``; KeyError when there is none."""
    for column in columns:
        if column.name == name:
            return column
    raise KeyError(name)
