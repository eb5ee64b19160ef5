"""From a recorded run to the profile ``%%gpumem`` shows: lines added up, the tensors
each line made that are still alive, by name, and the peak explained."""

from __future__ import annotations

from typing import Any, Callable, Collection

from ..model import LineKey, LineMemory, LineMemoryProfile, MemoryEvent, PeakMoment, Recording, line_label

BEFORE_THE_CELL = "held before the cell"


def build_profile(recording: Recording, text_of: Callable[[LineKey], str],
                  names_of: Callable[[Collection[int]], dict[int, str]],
                  error: str | None = None) -> LineMemoryProfile:
    """The profile of ``recording``. ``names_of(addresses)`` maps each of the addresses (the
    allocations the cell made that are still alive) that a user's name reaches at the end to
    that name (asked only when there are any: it may walk the namespace); ``text_of`` gives a
    line's source."""
    replay = _Replay(recording)
    names = names_of(replay.alive_at_end.keys()) if replay.alive_at_end else {}
    rows = _rows(recording, replay, text_of, names)
    return LineMemoryProfile(
        device=recording.device, lines=rows, peak=_peak(recording, replay, names),
        allocated_start=recording.allocated_start, allocated_end=recording.allocated_end,
        reserved_start=recording.reserved_start, reserved_end=recording.reserved_end,
        events_source=recording.events_source, has_events=recording.has_events, error=error,
        events_dropped=recording.events_dropped,
        elsewhere=tuple((d, recording.others_start.get(d, 0), n) for d, n in recording.others_end.items()
                        if n != recording.others_start.get(d, 0)),
    )


def label(key: LineKey | None) -> str:
    return "outside the profiled lines" if key is None else line_label(key[1], key[2])


class _Replay:
    """The alloc and free events replayed from the allocated bytes at the start: the total
    after each, the highest total while each line ran, and when each allocation was freed.

    Added up as arrays: a loop of small allocations makes millions of events, and each costs
    a few steps in C; Python steps once per distinct stack of lines."""

    def __init__(self, recording: Recording):
        import numpy as np

        events = recording.events
        columns = tuple(zip(*events))
        if columns and not set(columns[0]) <= {"alloc", "free"}:  # the reserved bytes' events: not counted here
            events = [e for e in events if e[0] == "alloc" or e[0] == "free"]
            columns = tuple(zip(*events))
        self.events: list[MemoryEvent] = events
        count = len(events)
        self.line_peaks: dict[LineKey, int] = {}
        #: Bytes allocated less bytes freed while each line ran (every line on an event's stack).
        self.line_changes: dict[LineKey, int] = {}
        #: Index of each alloc's free (the number of events when never freed; 0 where the address
        #: was allocated again before any free was seen).
        self.freed = np.zeros(count, dtype=np.int64)
        #: Address -> index of the alloc holding it at the end, in the order they were made.
        self.alive_at_end: dict[int, int] = {}
        start = recording.allocated_start or 0
        if not count:
            self.totals = np.zeros(0, dtype=np.int64)
            return
        actions, addresses, sizes, stacks = columns
        made = np.fromiter(map("alloc".__eq__, actions), dtype=bool, count=count)
        size = np.fromiter(sizes, dtype=np.int64, count=count)
        signed = np.where(made, size, -size)
        self.totals = totals = np.cumsum(signed) + start
        # Added up per stack: the events of one line run share their stack's tuple.
        stack_ids, first, which = np.unique(np.fromiter(map(id, stacks), dtype=np.int64, count=count),
                                            return_index=True, return_inverse=True)
        changes = np.zeros(len(stack_ids), dtype=np.int64)
        np.add.at(changes, which, signed)
        peaks = np.full(len(stack_ids), -1, dtype=np.int64)
        np.maximum.at(peaks, which[made], totals[made])
        for at in np.argsort(first, kind="stable").tolist():  # as each stack first came
            lines, change, peak = stacks[int(first[at])], int(changes[at]), int(peaks[at])
            for key in lines:
                self.line_changes[key] = self.line_changes.get(key, 0) + change
                if peak > -1 and peak > self.line_peaks.get(key, -1):
                    self.line_peaks[key] = peak
        # Each address's events in order: an alloc followed by a free of it is freed there; an
        # address whose last event is an alloc is alive at the end.
        address = np.fromiter(addresses, dtype=np.int64, count=count)
        order = np.argsort(address, kind="stable")
        ordered_made = made[order]
        same = address[order][:-1] == address[order][1:]
        pairs = np.flatnonzero(same & ordered_made[:-1] & ~ordered_made[1:])
        self.freed[order[pairs]] = order[pairs + 1]
        alive = np.sort(order[np.append(~same, True) & ordered_made])
        self.freed[alive] = count
        self.alive_at_end = {addresses[i]: i for i in alive.tolist()}

    def where_made(self, index: int) -> LineKey | None:
        lines = self.events[index][3]
        return lines[0] if lines else None


def _rows(recording: Recording, replay: _Replay, text_of: Callable[[LineKey], str],
          names: dict[int, str]) -> tuple[LineMemory, ...]:
    alive: dict[LineKey, list[tuple[str, int]]] = {}
    unnamed: dict[LineKey, int] = {}
    for address, index in replay.alive_at_end.items():
        key = replay.where_made(index)
        if key is None:
            continue
        size = replay.events[index][2]
        name = names.get(address)
        if name is not None:
            alive.setdefault(key, []).append((name, size))
        else:
            unnamed[key] = unnamed.get(key, 0) + size
    rows = []
    for key, depth in _as_they_ran(recording, replay):
        totals = recording.lines.get(key)
        if totals is None:  # known from events alone: no runs and no counters
            runs = allocated_before = allocated_after = reserved_before = reserved_after = None
            change, peak = replay.line_changes[key], replay.line_peaks.get(key)
        else:
            runs, change, peak = totals.runs, totals.change, totals.peak
            allocated_before, allocated_after = totals.allocated_before, totals.allocated_after
            reserved_before, reserved_after = totals.reserved_before, totals.reserved_after
            if key in replay.line_peaks:
                peak = max(replay.line_peaks[key], peak if peak is not None else -1,
                           *(v for v in (allocated_before, allocated_after) if v is not None))
        rows.append(LineMemory(
            function=key[1], line=key[2], text=text_of(key), runs=runs, allocated_before=allocated_before,
            allocated_after=allocated_after, change=change, peak=peak, reserved_before=reserved_before,
            reserved_after=reserved_after, alive=tuple(sorted(alive.get(key, ()), key=lambda a: -a[1])),
            alive_unnamed=unnamed.get(key, 0), filename=key[0], depth=depth,
        ))
    return tuple(rows)


def _as_they_ran(recording: Recording, replay: _Replay) -> list[tuple[LineKey, int]]:
    """Each line once, with its depth: as they first ran, each under the line that was running
    it (a function's lines under the line that called the function)."""
    callers: dict[LineKey, LineKey | None] = {key: totals.caller for key, totals in recording.lines.items()}
    # Lines heard only through events (a function's, where a marked cell reads them from the
    # stack): as their first event came, under the line below them on its stack.
    if any(k not in callers and k[1] != "<module>" for k in replay.line_changes):
        for _, _, _, lines in replay.events:
            for i, key in enumerate(lines):
                if key not in callers and key[1] != "<module>":
                    callers[key] = lines[i + 1] if i + 1 < len(lines) else None
    children: dict[LineKey | None, list[LineKey]] = {}
    for key, caller in callers.items():
        children.setdefault(caller if caller in callers and caller != key else None, []).append(key)
    ordered: list[tuple[LineKey, int]] = []
    pending = [(key, 0) for key in reversed(children.get(None, []))]
    while pending:
        key, depth = pending.pop()
        ordered.append((key, depth))
        pending.extend((child, depth + 1) for child in reversed(children.get(key, [])))
    return ordered


def _peak(recording: Recording, replay: _Replay, names: dict[int, str]) -> PeakMoment | None:
    import numpy as np

    if not replay.events:
        return _peak_from_counters(recording)
    totals, freed, count = replay.totals, replay.freed, len(replay.events)
    at = int(np.argmax(totals))
    start = recording.allocated_start or 0
    if totals[at] <= start:
        return _peak_from_counters(recording)
    held: dict[str, int] = {}
    temporaries: dict[str, list[int]] = {}  # "temporary on line N" -> its allocations live at the peak
    live_then = np.flatnonzero(freed[:at + 1] > at)  # made by then (only allocs have a free), not yet freed
    for index in live_then.tolist():
        _, address, size, _ = replay.events[index]
        made = label(replay.where_made(index))
        if freed[index] < count:
            what = f"temporary on {made}"
            temporaries.setdefault(what, []).append(index)
        else:
            what = names.get(address) or f"no name, from {made}"
        held[what] = held.get(what, 0) + size
    if start:
        held[BEFORE_THE_CELL] = start
    # The line whose temporaries held the most then, all of them: one line, one size.
    largest = max(temporaries, key=held.__getitem__, default=None)
    without = None
    if largest is not None:
        indices = np.asarray(temporaries[largest])
        change = np.zeros(count + 1, dtype=np.int64)
        sizes = np.fromiter((replay.events[i][2] for i in temporaries[largest]), dtype=np.int64, count=len(indices))
        np.subtract.at(change, indices, sizes)
        np.add.at(change, freed[indices], sizes)
        without = max(0, int((totals + np.cumsum(change[:count])).max()))
    lines_then = replay.events[_reached(totals, at)][3]
    return PeakMoment(
        allocated=int(totals[at]), line=label(lines_then[0] if lines_then else None),
        held=tuple(sorted(held.items(), key=lambda h: -h[1])),
        largest_temporary=(largest, held[largest]) if largest else None, without_largest_temporary=without,
    )


#: A peak is said to be reached where the total first came this close to it (a part of it) and
#: stayed: a tensor of a few bytes made after the jump (a sum's result) does not take the peak
#: from the line that made the jump.
PEAK_TOLERANCE = 1 / 1000


def _reached(totals: Any, at: int) -> int:
    """The event where the total climbed to the peak at ``at`` (within :data:`PEAK_TOLERANCE`)."""
    import numpy as np

    peak = int(totals[at])
    below = np.flatnonzero(totals[:at] < peak - int(peak * PEAK_TOLERANCE))
    return int(below[-1]) + 1 if len(below) else 0


def _peak_from_counters(recording: Recording) -> PeakMoment | None:
    """Without events: the highest total read where a line ended, and nothing about who held it."""
    measured = [(t.allocated_after, key) for key, t in recording.lines.items() if t.allocated_after is not None]
    if not measured:
        return None
    allocated, key = max(measured, key=lambda m: m[0])
    return PeakMoment(allocated=allocated, line=label(key), held=())
