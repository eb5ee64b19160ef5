"""Which records share memory with an earlier one, marked once the walk is done.

The walk records runs of plain tensors without looking each one's memory up (a lookup
table of a hundred thousand storages would cost more memory than the records), so the
aliases are found afterwards, in bulk: the storage identities are sorted once, and a
record whose identity an earlier record has is marked with that record's name.
"""

from __future__ import annotations

import numpy as np

from ...model import RecordTable


def link_aliases(records: RecordTable) -> list[int]:
    """Mark each record whose memory an earlier record holds with that record's name (the
    first name wins, in walk order) and return the indexes whose mark changed. A record
    without a storage identity keeps the mark the walk gave it (the same tensor met twice)."""
    if len(records) < 2:
        return []
    ids = np.frombuffer(records.storage_ids(), dtype=np.uint64)
    order = np.argsort(ids, kind="stable")  # stable: within one memory, walk order
    ordered = ids[order]
    repeats = np.flatnonzero((ordered[1:] == ordered[:-1]) & (ordered[1:] != 0)) + 1
    del ordered
    linked = {i: alias for i, alias in records.aliases().items() if ids[i] == 0}
    names = records.column("name") if len(repeats) else []
    first = previous = -2
    for position in repeats.tolist():
        if position != previous + 1:  # a new memory: its first record precedes this position
            first = int(order[position - 1])
        previous = position
        linked[int(order[position])] = names[first]
    return records.relink(linked)
