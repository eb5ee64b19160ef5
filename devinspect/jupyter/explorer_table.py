"""Filtering, sorting and paging the tensor table, done in the kernel (pandas).

The browser only ever receives one page of rows, so a 100,000-tensor session stays
fast: each interaction is a vectorised pandas step on the scan's frame, then a page.
"""

from __future__ import annotations

import itertools
import operator
import re
from dataclasses import dataclass, replace
from itertools import compress, repeat
from typing import TYPE_CHECKING, Iterable, Sequence

from ..model.record_table import RecordTable, record_column
from ..model.records import PLAIN_TYPE_NAMES, TensorRecord
from ..model.scan_result import device_matches

if TYPE_CHECKING:
    import numpy as np
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


def table_frame(records: tuple[TensorRecord, ...]) -> pd.DataFrame:
    """The scan's records as the table's frame: the shown columns plus what sorting needs
    (the name's sort key is added by the first sort by name, see :func:`select`).

    Built column by column: a session's many tensors share few shapes and sizes, so each
    distinct shape and size is turned into text once, not once per row.
    """
    import numpy as np
    import pandas as pd

    from ..model.units import human_bytes, shape_text
    from ..render.table import note_cell, size_cell, size_key

    rows = range(len(records))
    shapes = record_column(records, "shape")
    try:
        shape_texts = {shape: shape_text(shape) for shape in set(shapes)}
        shape_column = list(map(shape_texts.__getitem__, shapes))
    except TypeError:  # an unhashable dimension: each row's own text
        shape_column = [shape_text(shape) for shape in shapes]
    aliases, devices = record_column(records, "alias_of"), record_column(records, "device")
    # A size cell and its sort key follow from the storage's size, except on the few rows
    # that share memory or are meta tensors: each distinct size is spelled once.
    storage_bytes = record_column(records, "storage_bytes")
    texts = {size: human_bytes(size) for size in set(storage_bytes)}
    size_column = list(map(texts.__getitem__, storage_bytes))
    # The sort keys are the sizes themselves where all are known (the list read above is this
    # function's own, so its few unusual rows are set in place).
    size_key_column = [size or 0 for size in storage_bytes] if None in storage_bytes else storage_bytes
    unusual = set(compress(rows, map(operator.is_not, aliases, repeat(None))))
    if "meta" in set(devices):
        unusual.update(compress(rows, map(operator.eq, devices, repeat("meta"))))
    for i in unusual:
        size_column[i], size_key_column[i] = size_cell(records[i]), size_key(records[i])
    # A note only for the few unusual rows: shared memory, a note, a gradient, another class.
    note_column = [""] * len(records)
    unusual.update(_noted_rows(records))
    for i in unusual:
        note_column[i] = note_cell(records[i])
    # Columns handed over as arrays: pandas takes them as they are instead of converting lists.
    return pd.DataFrame({
        "index": np.arange(len(records)), "name": _objects(record_column(records, "name")),
        "kind": _objects(record_column(records, "kind")), "device": _objects(devices),
        "dtype": _objects(_spelled(record_column(records, "dtype"))),
        "shape_text": _objects(shape_column), "size": _objects(size_column),
        "size_key": np.array(size_key_column, dtype=np.int64), "note": _objects(note_column),
    }, copy=False)


def _noted_rows(records: Sequence[TensorRecord]) -> Iterable[int]:
    """Rows with something to note beyond their size: a note, a gradient, a class other than
    Tensor and Parameter. A table answers from the codes of its shared fields."""
    if isinstance(records, RecordTable):
        return itertools.chain(
            records.indexes_where("note", records.values_of("note") - {None}),
            records.indexes_where("requires_grad", (True,)),
            records.indexes_where("type_name", records.values_of("type_name") - PLAIN_TYPE_NAMES))
    rows = range(len(records))
    type_names = record_column(records, "type_name")
    return itertools.chain(
        compress(rows, record_column(records, "note")), compress(rows, record_column(records, "requires_grad")),
        compress(rows, map(operator.not_, map(PLAIN_TYPE_NAMES.__contains__, type_names))))


def _spelled(dtypes: list[str | None]) -> list[str]:
    """Each dtype's name, ``?`` where unknown."""
    return [dtype or "?" for dtype in dtypes] if None in dtypes else dtypes


def select(frame: pd.DataFrame, state: GridState) -> pd.DataFrame:
    """The rows the state keeps, in its order (all pages)."""
    column = dict(COLUMNS).get(state.sort, "size_key")
    if column not in frame:
        # A natural sort key is made the first time the table is sorted by its column, and kept
        # with the frame for the next sorts: every name is distinct, so its key costs a pass over
        # all of them; few distinct devices and shapes are each keyed once.
        if column == "name_key":
            frame[column] = natural_keys(frame["name"].tolist())
        else:
            texts = frame["device" if column == "device_key" else "shape_text"]
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
