"""Choosing which records a rendered table shows, shared by text and HTML."""

from __future__ import annotations

import heapq

from ..model.records import KINDS, TensorRecord
from ..model.scan_result import ScanView
from ..model.units import human_bytes

DEFAULT_MAX_ROWS = 40
SORTS = ("walk", "bytes", "name", "device", "kind")
_KIND_RANK = {k: i for i, k in enumerate(KINDS)}


def visible_rows(result: ScanView) -> tuple[list[TensorRecord], int]:
    """(records to show, how many more exist). Long results keep the largest ones."""
    limit = result.display.max_rows
    sort = result.display.sort
    records = list(result.records)
    if sort == "bytes":
        records.sort(key=lambda r: -size_key(r))
    elif sort == "name":
        records.sort(key=lambda r: r.name)
    elif sort == "device":
        records.sort(key=lambda r: (r.device, -(r.counted_bytes or 0)))
    elif sort == "kind":
        records.sort(key=lambda r: (_KIND_RANK.get(r.kind, 99), r.name))
    if limit <= 0 or len(records) <= limit:
        return records, 0
    if sort == "walk":
        # Keep the largest (the first met among equals), shown in walk order so related names
        # stay together: a partial selection, not a sort of every record.
        sizes = size_keys(records)
        kept = sorted(heapq.nlargest(limit, range(len(records)), key=sizes.__getitem__))
        return [records[i] for i in kept], len(records) - limit
    return records[:limit], len(records) - limit


def size_key(r: TensorRecord) -> int:
    """Bytes to order by: what a tensor holds, or for a meta tensor what it would need."""
    if r.device == "meta" and r.alias_of is None:
        return r.nbytes or 0
    return r.counted_bytes or 0


def size_keys(records: list[TensorRecord]) -> list[int]:
    """:func:`size_key` of each record (one pass, no call per record)."""
    return [0 if r.alias_of is not None else (r.nbytes or 0) if r.device == "meta" else (r.storage_bytes or 0)
            for r in records]


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
    if r.type_name not in ("Tensor", "Parameter"):
        parts.append(r.type_name)
    if r.requires_grad and r.kind == "tensor":
        parts.append("requires_grad")
    return "; ".join(parts)


SEVERITY_MARK = {"error": "✖", "warning": "⚠", "hint": "ℹ"}
