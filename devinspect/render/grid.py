"""Filtering, sorting and paging the tensor table, done in the kernel (pandas).

The browser only ever receives one page of rows, so a 100,000-tensor session stays
fast: each interaction is a vectorised pandas step on the scan's frame, then a page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..model.records import TensorRecord
from ..model.scan_result import device_matches

if TYPE_CHECKING:
    import pandas as pd

#: Columns the table shows, in order, with the frame column each sorts by.
COLUMNS = (("name", "name_key"), ("kind", "kind"), ("device", "device_key"), ("dtype", "dtype"),
           ("shape", "shape_key"), ("size", "size_key"))
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


def natural_key(text: str) -> str:
    """``text`` with every number zero-padded, so ``pool[2]`` sorts before ``pool[10]`` and
    ``cuda:2`` before ``cuda:10``, as people count."""
    return _NUMBER.sub(lambda m: m.group().zfill(20), text)


def table_frame(records: tuple[TensorRecord, ...]) -> pd.DataFrame:
    """The scan's records as the table's frame: the shown columns plus what sorting needs."""
    import pandas as pd

    from ..model.units import shape_text
    from .table import note_cell, size_cell, size_key

    rows = [(i, r.name, r.kind, r.device, r.dtype or "?", shape_text(r.shape), size_cell(r), size_key(r), note_cell(r))
            for i, r in enumerate(records)]
    frame = pd.DataFrame(rows, columns=["index", "name", "kind", "device", "dtype", "shape_text", "size", "size_key",
                                        "note"])
    for column, key in (("name", "name_key"), ("device", "device_key"), ("shape_text", "shape_key")):
        frame[key] = frame[column].map(natural_key)
    return frame


def select(frame: pd.DataFrame, state: GridState) -> pd.DataFrame:
    """The rows the state keeps, in its order (all pages)."""
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
    column = dict(COLUMNS).get(state.sort, "size_key")
    return rows.sort_values([column, "index"], ascending=[not state.descending, True], kind="stable")


def page(rows: pd.DataFrame, state: GridState) -> tuple[pd.DataFrame, int, int]:
    """(this page's rows, the page shown after clamping, the number of pages)."""
    pages = max(1, -(-len(rows) // state.page_size))
    number = min(max(state.page, 0), pages - 1)
    start = number * state.page_size
    return rows.iloc[start:start + state.page_size], number, pages
