"""What a rendered table shows, shared by text and HTML: which records, and its columns aligned as text."""

from __future__ import annotations

from typing import Sequence

from ..model import (  # noqa: F401 - named here too  # noqa: F401 - named here too
    DEFAULT_MAX_ROWS,
    KINDS,
    SORTS,
    Column,
    ScanView,
    TensorRecord,
    human_bytes,
    note_cell,
    size_cell,
    size_key,
    size_keys,
)

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


SEVERITY_MARK = {"error": "✖", "warning": "⚠", "hint": "ℹ"}


#: A name longer than this is cut in the middle in plain text (the HTML and the frame keep it whole).
MAX_NAME = 72


def clip_middle(text: str, width: int) -> str:
    """``text`` within ``width``, cut in the middle: a long name's end tells rows apart
    (``opt.state[…lora_A.default.weight]["exp_avg"]`` and ``…["exp_avg_sq"]``)."""
    if len(text) <= width:
        return text
    head = (width - 1) * 2 // 5
    return text[:head] + "…" + text[len(text) - (width - 1 - head):]


def aligned_lines(columns: Sequence[Column], rows: Sequence) -> list[str]:
    """The header and one line per row, each column as wide as its widest text, numbers to the
    right (their header too), names cut in the middle past :data:`MAX_NAME`."""
    texts = [column.texts(rows) for column in columns]
    texts = [[clip_middle(text, MAX_NAME) for text in cells] if column.width == "name" else cells
             for column, cells in zip(columns, texts)]
    widths = [max(len(column.name), *map(len, cells)) for column, cells in zip(columns, texts)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(text.rjust(width) if column.right else text.ljust(width)
                         for column, text, width in zip(columns, cells, widths)).rstrip()

    return [line([column.name for column in columns])] + [line(cells) for cells in zip(*texts)]


def closing_notes(result: ScanView, more: int) -> list[str]:
    """What follows the table, in words, written once for text and HTML: how many rows are not
    shown, and what the output history holds that is not listed."""
    out = []
    if more:
        out.append(f"… {more:,} more not shown (largest first; .frame has all, %config DevInspect.max_rows)")
    if result.history_bytes and not result.options.get("include_hidden"):
        out.append(f"Output history / last traceback hold {human_bytes(result.history_bytes)} of accelerator "
                   "memory not listed above (%devices --hidden lists it).")
    return out
