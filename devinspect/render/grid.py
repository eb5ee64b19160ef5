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

#: Types a row's note does not mention.
_PLAIN_TYPES = ("Tensor", "Parameter")


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
    import pandas as pd

    from ..model.units import shape_text
    from .table import note_cell, size_cell, size_key

    shapes = [r.shape for r in records]
    try:
        shape_texts = {shape: shape_text(shape) for shape in set(shapes)}
        shape_column = [shape_texts[shape] for shape in shapes]
    except TypeError:  # an unhashable dimension: each row's own text
        shape_column = [shape_text(shape) for shape in shapes]
    # What a size cell and its sort key depend on; one record stands for all that share it.
    size_facts = [(r.alias_of is None, r.device == "meta", r.nbytes, r.storage_bytes) for r in records]
    sizes = {facts: (size_cell(r), size_key(r)) for facts, r in dict(zip(size_facts, records)).items()}
    note_column = [note_cell(r) if (r.alias_of is not None or r.note or r.type_name not in _PLAIN_TYPES
                                    or (r.requires_grad and r.kind == "tensor")) else "" for r in records]
    frame = pd.DataFrame({
        "index": range(len(records)), "name": [r.name for r in records], "kind": [r.kind for r in records],
        "device": [r.device for r in records], "dtype": [r.dtype or "?" for r in records],
        "shape_text": shape_column, "size": [sizes[facts][0] for facts in size_facts],
        "size_key": [sizes[facts][1] for facts in size_facts], "note": note_column})
    for column, key in (("device", "device_key"), ("shape_text", "shape_key")):
        # Few distinct devices and shapes among many rows: each distinct text is keyed once.
        frame[key] = frame[column].map({text: natural_key(text) for text in frame[column].unique()})
    return frame


def select(frame: pd.DataFrame, state: GridState) -> pd.DataFrame:
    """The rows the state keeps, in its order (all pages)."""
    if state.sort == "name" and "name_key" not in frame:
        # Every name is distinct, so its key costs a pass over all of them: made the first
        # time the table is sorted by name, and kept with the frame for the next sorts.
        frame["name_key"] = natural_keys(frame["name"].tolist())
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
