"""Choosing which records a rendered table shows, shared by text and HTML."""

from __future__ import annotations

from ..model.records import KINDS, PLAIN_TYPE_NAMES, TensorRecord
from ..model.scan_result import DEFAULT_MAX_ROWS, SORTS, ScanView, size_keys  # noqa: F401 - named here too
from ..model.units import human_bytes

_KIND_RANK = {k: i for i, k in enumerate(KINDS)}


def visible_rows(result: ScanView) -> tuple[list[TensorRecord], int]:
    """(records to show, how many more exist). Long results keep the largest ones."""
    limit = result.display.max_rows
    sort = result.display.sort
    if sort == "walk" and 0 < limit < len(result.records):
        # Keep the largest (the first met among equals), shown in walk order so related names
        # stay together: a partial selection read from the size columns, and only the rows
        # shown are made into records.
        return [result.records[i] for i in result.largest(limit)], len(result.records) - limit
    records = list(result.records)
    if sort == "bytes":
        sizes = size_keys(records)
        records = [records[i] for i in sorted(range(len(records)), key=lambda i: -sizes[i])]
    elif sort == "name":
        records.sort(key=lambda r: r.name)
    elif sort == "device":
        records.sort(key=lambda r: (r.device, -(r.counted_bytes or 0)))
    elif sort == "kind":
        records.sort(key=lambda r: (_KIND_RANK.get(r.kind, 99), r.name))
    if limit <= 0 or len(records) <= limit:
        return records, 0
    return records[:limit], len(records) - limit


def size_key(r: TensorRecord) -> int:
    """Bytes to order by: what a tensor holds, or for a meta tensor what it would need."""
    return size_keys((r,))[0]


def size_cell(r: TensorRecord) -> str:
    if r.alias_of is not None:
        return "shared"
    if r.device == "meta" and r.nbytes is not None:
        return f"needs {human_bytes(r.nbytes)}"  # holds nothing yet: the size it would take
    return human_bytes(r.storage_bytes)


def note_cell(r: TensorRecord) -> str:
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


SEVERITY_MARK = {"error": "✖", "warning": "⚠", "hint": "ℹ"}
