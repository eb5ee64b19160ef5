"""The columns of ``%devices``' tensor table, declared once for every view of it.

The DataFrame (:attr:`ScanResult.frame <devinspect.model.scan_result.ScanResult.frame>`), the
plain text, the static HTML and the explorer widget all read :data:`TENSOR_COLUMNS` when they
draw (never a copy taken at import), so a column added to it shows everywhere. Each reader takes
every row at once: a session's many tensors share few shapes and sizes, so each distinct one is
spelled once, and only the few unusual rows (shared memory, meta tensors, notes) are read one by one.
"""

from __future__ import annotations

import itertools
import operator
from itertools import compress, repeat
from typing import Iterable, Sequence

from .columns import Column
from .record_table import RecordTable, record_column, size_keys
from .records import PLAIN_TYPE_NAMES, TensorRecord
from .units import human_bytes, shape_text


def size_key(r: TensorRecord) -> int:
    """Bytes to order by: what a tensor holds, or for a meta tensor what it would need."""
    return size_keys((r,))[0]


def size_cell(r: TensorRecord) -> str:
    """``1.0 MiB``; ``shared`` for a name of memory counted under another; what a meta tensor needs."""
    if r.alias_of is not None:
        return "shared"
    if r.device == "meta" and r.nbytes is not None:
        return f"needs {human_bytes(r.nbytes)}"  # holds nothing yet: the size it would take
    return human_bytes(r.storage_bytes)


def note_cell(r: TensorRecord) -> str:
    """What is unusual about a record: shared memory, its note, its class, requires_grad."""
    parts = []
    if r.alias_of is not None:
        parts.append(f"same memory as {r.alias_of}")
    if r.note:
        parts.append(r.note)
    if r.type_name not in PLAIN_TYPE_NAMES:
        parts.append(r.type_name)
    if r.requires_grad and r.kind == "tensor":
        parts.append("requires_grad")
    return "; ".join(parts)


def _field(name: str):
    return lambda records: record_column(records, name)


def _dtypes(records: Sequence[TensorRecord]) -> list[str]:
    """Each dtype's name, ``?`` where unknown."""
    dtypes = record_column(records, "dtype")
    return [dtype or "?" for dtype in dtypes] if None in dtypes else dtypes


def _shapes(records: Sequence[TensorRecord]) -> list[str]:
    shapes = record_column(records, "shape")
    try:
        texts = {shape: shape_text(shape) for shape in set(shapes)}
    except TypeError:  # an unhashable dimension: each row's own text
        return [shape_text(shape) for shape in shapes]
    return list(map(texts.__getitem__, shapes))


def _unusual_sizes(records: Sequence[TensorRecord]) -> set[int]:
    """Rows whose size is not their storage's: names of shared memory, and meta tensors."""
    rows = range(len(records))
    unusual = set(compress(rows, map(operator.is_not, record_column(records, "alias_of"), repeat(None))))
    devices = record_column(records, "device")
    if "meta" in set(devices):
        unusual.update(compress(rows, map(operator.eq, devices, repeat("meta"))))
    return unusual


def _sizes(records: Sequence[TensorRecord]) -> list[str]:
    storage_bytes = record_column(records, "storage_bytes")
    texts = {size: human_bytes(size) for size in set(storage_bytes)}
    out = list(map(texts.__getitem__, storage_bytes))
    for i in _unusual_sizes(records):
        out[i] = size_cell(records[i])
    return out


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


def _notes(records: Sequence[TensorRecord]) -> list[str]:
    out = [""] * len(records)
    for i in _unusual_sizes(records).union(_noted_rows(records)):
        out[i] = note_cell(records[i])
    return out


#: ``%devices``' columns, in the order they are shown.
TENSOR_COLUMNS: tuple[Column[TensorRecord], ...] = (
    Column("name", _field("name"), width="name", chars=10, sort="natural", field="name"),
    # "optimizer_state" is the longest kind: the column keeps it whole.
    Column("kind", _field("kind"), chars=15, folds=True, field="kind"),
    Column("device", _field("device"), chars=7, sort="natural", field="device"),
    Column("dtype", _dtypes, chars=8, folds=True, field="dtype"),
    Column("shape", _shapes, width="words", chars=8, sort="natural", field="shape"),
    Column("size", _sizes, width="number", chars=9, sort="number", keys=size_keys, field="storage_bytes"),
    Column("note", _notes, width="words", chars=6, field="note", in_grid=False),
)
