"""Filtering, sorting and paging the tensor table, done in the kernel (pandas).

The browser only ever receives one page of rows, so a 100,000-tensor session stays
fast: each interaction is a vectorised pandas step on the scan's frame, then a page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Sequence

from ..model import Column, TensorRecord, device_matches, tensor_columns

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

#: ``key:value`` words a filter understands (the rest match names).
FIELDS = ("device", "kind", "dtype", "name")


@dataclass(frozen=True)
class GridState:
    """What the user chose: filter text, device and kind, sort column and direction, page."""

    text: str = ""
    device: str | None = None
    kind: str | None = None
    sort: str = "size"
    descending: bool = True
    page: int = 0
    page_size: int = 25

    def sorted_by(self, column: str) -> GridState:
        """Sort by ``column``; choosing the same column again reverses the order."""
        if column == self.sort:
            return replace(self, descending=not self.descending, page=0)
        return replace(self, sort=column, descending=column == "size", page=0)


_NUMBER = re.compile(r"\d+")





def _objects(values: list) -> np.ndarray:
    import numpy as np

    array = np.empty(len(values), dtype=object)
    array[:] = values
    return array


def _padded(match: re.Match) -> str:
    return match.group().zfill(20)


def natural_key(text: str) -> str:
    """``text`` with every number zero-padded, so ``pool[2]`` sorts before ``pool[10]`` and
    ``cuda:2`` before ``cuda:10``, as people count."""
    return _NUMBER.sub(_padded, text)


def natural_keys(texts: list[str]) -> list[str]:
    """``natural_key`` of each text: one substitution over all of them joined (a hundred
    thousand names cost one call, not a hundred thousand), unless a text holds the joint."""
    joined = "\0".join(texts)
    keys = _NUMBER.sub(_padded, joined).split("\0")
    return keys if len(keys) == len(texts) else [natural_key(text) for text in texts]


def grid_columns() -> tuple[Column, ...]:
    """The tensor table's columns the grid shows, as declared now."""
    return tuple(column for column in tensor_columns.TENSOR_COLUMNS if column.in_grid)


def sort_column(column: Column) -> str:
    """The frame column a table column sorts by: its text, or a key made from it."""
    return column.name if column.sort == "text" else f"{column.name}_key"


def table_frame(records: Sequence[TensorRecord]) -> pd.DataFrame:
    """The scan's records as the table's frame: each declared column's text, and the keys its
    sort needs (a natural sort key is added by the first sort on its column, see :func:`select`).

    Built column by column: each column's reader takes every record in one pass."""
    import numpy as np
    import pandas as pd

    data = {"index": np.arange(len(records))}
    for column in tensor_columns.TENSOR_COLUMNS:
        data[column.name] = _objects(column.texts(records))
        if column.sort == "number" and column.keys is not None:
            data[sort_column(column)] = np.array(column.keys(records), dtype=np.int64)
    # Columns handed over as arrays: pandas takes them as they are instead of converting lists.
    return pd.DataFrame(data, copy=False)


def select(frame: pd.DataFrame, state: GridState) -> pd.DataFrame:
    """The rows the state keeps, in its order (all pages)."""
    chosen = next((c for c in tensor_columns.TENSOR_COLUMNS if c.name == state.sort), None)
    column = sort_column(chosen) if chosen is not None else "size_key"
    if column not in frame and chosen is not None:
        # A natural sort key is made the first time the table is sorted by its column, and kept
        # with the frame for the next sorts: a column of distinct texts (names) is keyed in one
        # pass over all of them; one of few distinct texts (devices, shapes), each text once.
        texts = frame[chosen.name]
        if chosen.width == "name":
            frame[column] = natural_keys(texts.tolist())
        else:
            frame[column] = texts.map({text: natural_key(text) for text in texts.unique()})
    rows = frame
    if state.device:
        rows = rows[rows["device"].map(lambda d: device_matches(d, state.device))]
    if state.kind:
        rows = rows[rows["kind"] == state.kind]
    for word in state.text.split():
        key, sep, value = word.partition(":")
        if sep and key in FIELDS and value:
            if key == "device":
                rows = rows[rows["device"].map(lambda d, v=value: device_matches(d, v))]
            else:
                rows = rows[rows[key].str.contains(value, case=False, regex=False)]
        else:
            rows = rows[rows["name"].str.contains(word, case=False, regex=False)
                        | rows["device"].str.contains(word, case=False, regex=False)
                        | rows["dtype"].str.contains(word, case=False, regex=False)
                        | rows["kind"].str.contains(word, case=False, regex=False)]
    # The frame is in record order and filtering keeps that order, so a stable sort on the
    # one column leaves ties in record order, ascending or descending (pandas keeps ties
    # in their original order either way): the same rows as sorting by (column, index).
    return rows.sort_values(column, ascending=not state.descending, kind="stable")


def page(rows: pd.DataFrame, state: GridState) -> tuple[pd.DataFrame, int, int]:
    """(this page's rows, the page shown after clamping, the number of pages)."""
    pages = max(1, -(-len(rows) // state.page_size))
    number = min(max(state.page, 0), pages - 1)
    start = number * state.page_size
    return rows.iloc[start:start + state.page_size], number, pages
