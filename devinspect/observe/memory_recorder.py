"""Accelerator memory line by line while a cell runs (``%%gpumem``).

A line tracer on the cell's own code and the functions named with ``-f`` only
(:mod:`.line_tracers`) marks where each line starts and ends; allocated and reserved
bytes there, and the allocations themselves with the lines of the cell (and of the named
functions) running when each happened, come from the device's source
(:mod:`.memory_sources`): the simulated device tells its allocator's events as they
happen; CUDA's memory history is read once at the end and replayed with the line events;
any other accelerator gives its counters at each line.

Nothing here allocates on the device, empties its cache, synchronises it or resets its
peak counters.
"""

from __future__ import annotations

import operator
from types import CodeType
from typing import Any, Callable, Collection

import torch

from ..model import LineKey, LineTotals, Recording
from ..runtime import tensor_getters
from .line_tracers import line_tracer
from .memory_sources import MAX_EVENTS, cuda_events, device_module_call, event_source

_KIND, _CODE, _NUMBER = operator.itemgetter(0), operator.itemgetter(1), operator.itemgetter(2)

__all__ = ["LineMemoryRecorder", "LineKey", "MAX_EVENTS", "allocated_on_others", "cuda_events", "named_allocations"]


class LineMemoryRecorder:
    """Records the lines of ``codes`` while it is entered, and the device's allocation events.

    Use as a context manager around running the cell; afterwards ``recording`` holds each
    line's totals and the events. A line ends where the next line of the same frame starts
    or where the frame leaves: the counters read there are the one's after and the other's
    before (so one reading per line run). With CUDA the lines are heard by the history's
    log while the cell runs and replayed into this recorder at the end.
    """

    def __init__(self, device: torch.device, codes: frozenset[CodeType], marked: bool = False):
        self.device = device
        self.codes, self.marked = codes, marked
        self.recording = Recording(str(device))
        #: Per running chosen code (innermost last): [code, open line's key or None, its totals,
        #: allocated when the line started, the most allocated since].
        self.open_lines: list[list[Any]] = []
        #: The lines running now, innermost first (kept for the allocation events).
        self.lines_now: tuple[LineKey, ...] = ()
        #: A marked cell's codes: its functions' lines are read from the stack at each event,
        #: up to the cell's own frame.
        self.stack_read = codes if marked and any(c.co_name != "<module>" for c in codes) else frozenset()
        #: (file name, function name) of each chosen code: a CUDA stack's frames are matched against them.
        self.traced = {(c.co_filename, c.co_name) for c in codes}
        self._events = event_source(device, self)
        self._tracer: Any = None
        #: code -> line number -> (its key, its totals): found without building the key again.
        self._lines_of: dict[CodeType, dict[int, tuple[LineKey, LineTotals]]] = {}

    def now(self) -> tuple[int | None, int | None]:
        return self._events.now()

    # -- entering and leaving -----------------------------------------------------------

    def __enter__(self) -> LineMemoryRecorder:
        rec = self.recording
        rec.others_start = allocated_on_others(self.device)
        self._events.start()
        self.now = self._events.now  # type: ignore[method-assign]
        rec.allocated_start, rec.reserved_start = self.now()
        #: What hears the line tracer: this recorder, or CUDA's history log (replayed here at the end).
        self.listener = self._events.listener or self
        self._tracer = line_tracer(self.codes, self.listener, self.marked)
        self._tracer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self._tracer.stop()
        finally:
            self._events.stop()  # CUDA's history replays its lines into this recorder here
        while self.open_lines:  # frames an exception or interrupt left without a leave event
            self._close(self.open_lines.pop())
        rec = self.recording
        rec.allocated_end, rec.reserved_end = self.now()
        rec.others_end = allocated_on_others(self.device)

    # -- what the tracer tells ----------------------------------------------------------

    def enter(self, code: CodeType, offset: int = 0) -> None:
        self.open_lines.append([code, None, None, None, None])

    def line(self, code: CodeType, number: int) -> None:
        # Once per line run (a replayed CUDA history calls it for every line a loop ran): kept short.
        open_ = self.open_lines
        if not open_:
            return
        top = open_[-1]
        if top[0] is not code:
            return
        allocated, reserved = self.now()
        running = self.lines_now
        if top[1] is not None:
            self._end(top, allocated, reserved)
            running = running[1:]
        by_number = self._lines_of.get(code)
        if by_number is None:
            by_number = self._lines_of[code] = {}
        known = by_number.get(number)
        if known is None:
            key = (code.co_filename, code.co_name, number)
            totals = self.recording.lines.get(key)
            if totals is None:
                totals = self.recording.lines[key] = LineTotals(allocated_before=allocated, reserved_before=reserved,
                                                                caller=running[0] if running else None)
            known = by_number[number] = (key, totals)
        top[1], top[2] = known
        top[3] = top[4] = allocated
        self.lines_now = (known[0], *running)

    def leave(self, code: CodeType, offset: int = 0, value: Any = None) -> None:
        if self.open_lines and self.open_lines[-1][0] is code:
            self._close(self.open_lines.pop())

    def replay_log(self, log: list[tuple[int, Any, int, int]], allocated_at: list[int], reserved_at: list[int],
                   highest: list[int]) -> list[tuple[LineKey, ...]]:
        """Line events heard earlier, replayed as :meth:`enter`, :meth:`line` and :meth:`leave`
        would have taken them live: each ``(kind, code, number, time)`` of ``log`` (kind 0 enter,
        1 line, 2 leave) with the counters when it was heard, and ``highest[i]`` the highest
        allocated bytes between the events ``i - 1`` and ``i`` (-1: nothing allocated there).
        Returns the lines running after each number of events (0 to all of them).

        One step per line event, whatever was allocated in between (the allocations are added
        up before, as arrays); where no function's line ran inside another line (the cell's own
        statements, one frame at a time), no step at all: :meth:`_replay_flat`."""
        if not self.open_lines and not self.recording.lines and not self.lines_now:
            flat = self._replay_flat(log, allocated_at, reserved_at, highest)
            if flat is not None:
                return flat
        open_ = self.open_lines
        lines_of, recorded = self._lines_of, self.recording.lines
        running = self.lines_now
        after = [running]
        stacks: dict[tuple[LineKey, ...], tuple[LineKey, ...]] = {}
        with_peaks = self.recording.has_events
        for index, (kind, code, number, _) in enumerate(log):
            if kind == 1:
                if open_ and open_[-1][0] is code:
                    top = open_[-1]
                    allocated = allocated_at[index]
                    if top[1] is not None:  # the frame's line before ends here (as _end, inline: run per line)
                        since = top[5] + 1
                        made = highest[index] if since == index else max(highest[since:index + 1])
                        if allocated > made:  # per line event: a comparison, not a call
                            made = allocated
                        if made < top[4]:
                            made = top[4]
                        totals = top[2]
                        totals.runs += 1
                        totals.allocated_after = allocated
                        totals.reserved_after = reserved_at[index]
                        totals.change = (totals.change or 0) + allocated - top[3]
                        if with_peaks and (totals.peak is None or made > totals.peak):
                            totals.peak = made
                        running = running[1:]
                    by_number = lines_of.get(code)
                    if by_number is None:
                        by_number = lines_of[code] = {}
                    known = by_number.get(number)
                    if known is None:
                        key = (code.co_filename, code.co_name, number)
                        totals = recorded.get(key)
                        if totals is None:
                            totals = recorded[key] = LineTotals(allocated_before=allocated,
                                                                reserved_before=reserved_at[index],
                                                                caller=running[0] if running else None)
                        known = by_number[number] = (key, totals)
                    top[1], top[2] = known
                    top[3] = top[4] = allocated
                    top[5] = index
                    running = (known[0], *running)
            elif kind == 0:
                open_.append([code, None, None, None, None, index])
            elif open_ and open_[-1][0] is code:
                top = open_.pop()
                if top[1] is not None:
                    top[4] = max(top[4], *highest[top[5] + 1:index + 1])
                    self._end(top, allocated_at[index], reserved_at[index])
                    running = running[1:]
            after.append(stacks.setdefault(running, running))  # one tuple per stack of lines
        for entry in open_:  # still running at the end: what was allocated after their start
            if entry[1] is not None:
                entry[4] = max(entry[4], *highest[entry[5] + 1:])
        self.lines_now = running
        return after

    def _replay_flat(self, log: list[tuple[int, Any, int, int]], allocated_at: list[int], reserved_at: list[int],
                     highest: list[int]) -> list[tuple[LineKey, ...]] | None:
        """:meth:`replay_log` as arrays, for a log where each chosen code ran alone (entered from
        no other chosen line, each line its frame's, left before the next): each line run ends at
        the next event, so the runs add up by line without a step per run. None for another log."""
        import numpy as np

        count = len(log)
        if not count:
            return None
        kinds = np.fromiter(map(_KIND, log), dtype=np.int8, count=count)
        codes = list(map(_CODE, log))
        code_ids = np.fromiter(map(id, codes), dtype=np.int64, count=count)
        depth = np.cumsum((kinds == 0).astype(np.int64) - (kinds == 2))
        # One frame at a time: entered at depth 0, its lines and its leave at depth 1, left at the end.
        if depth[-1] != 0 or depth.min() < 0 or depth.max() > 1 or np.any((kinds == 1) & (depth != 1)):
            return None
        entered = np.maximum.accumulate(np.where(kinds == 0, np.arange(count), 0))
        if kinds[0] != 0 or np.any(code_ids != code_ids[entered]):
            return None
        runs_at = np.flatnonzero(kinds == 1)
        numbers = np.fromiter(map(_NUMBER, log), dtype=np.int64, count=count)[runs_at]
        _, code_index = np.unique(code_ids[runs_at], return_inverse=True)
        pair = code_index.astype(np.int64) * (1 << 32) + numbers
        pairs, first, which = np.unique(pair, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")  # lines as they first ran
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        which = rank[which]
        allocated, made = np.asarray(allocated_at), np.asarray(highest)
        started, ended = allocated[runs_at], allocated[runs_at + 1]
        peaks = np.maximum(np.maximum(started, ended), made[runs_at + 1])
        keys_count = len(pairs)
        runs = np.bincount(which, minlength=keys_count)
        change = np.zeros(keys_count, dtype=np.int64)
        np.add.at(change, which, ended - started)
        peak = np.full(keys_count, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(peak, which, peaks)
        last = np.zeros(keys_count, dtype=np.int64)
        np.maximum.at(last, which, runs_at)
        first_at = runs_at[first[order]]
        with_peaks = self.recording.has_events
        stacks = np.empty(keys_count + 1, dtype=object)
        stacks[keys_count] = ()
        lines_of, recorded = self._lines_of, self.recording.lines
        for k, (at, end) in enumerate(zip(first_at.tolist(), last.tolist())):
            code, number = codes[at], log[at][2]
            key = (code.co_filename, code.co_name, number)
            recorded[key] = totals = LineTotals(
                runs=int(runs[k]), allocated_before=allocated_at[at], reserved_before=reserved_at[at],
                allocated_after=allocated_at[end + 1], reserved_after=reserved_at[end + 1], change=int(change[k]),
                peak=int(peak[k]) if with_peaks else None)
            lines_of.setdefault(code, {})[number] = (key, totals)
            stacks[k] = (key,)
        line_of_event = np.full(count, keys_count, dtype=np.int64)
        line_of_event[runs_at] = which
        line_of_event[kinds != 1] = keys_count
        return [(), *stacks[line_of_event].tolist()]

    def _close(self, entry: list[Any]) -> None:
        if entry[1] is not None:
            self._end(entry, *self.now())
            self.lines_now = self.lines_now[1:]

    def _end(self, entry: list[Any], allocated: int | None, reserved: int | None) -> None:
        totals, started, highest = entry[2], entry[3], entry[4]
        totals.runs += 1
        totals.allocated_after = allocated
        totals.reserved_after = reserved
        if allocated is not None and started is not None:
            totals.change = (totals.change or 0) + allocated - started
        if highest is not None and self.recording.has_events:
            if allocated is not None and allocated > highest:
                highest = allocated
            if totals.peak is None or highest > totals.peak:
                totals.peak = highest


def named_allocations(namespace: Any, device: torch.device, exclude: Any = (),
                      wanted: Collection[int] | None = None) -> dict[int, str]:
    """The address of each allocation on ``device`` that a user's name reaches, to that
    name (the scan's name: the first that reaches the memory; views and aliases add none).

    With ``wanted`` (the addresses to name), a tensor the namespace holds by a plain name
    (``loss``, ``t``) names its memory at once, and the whole namespace is scanned only where
    one of them is held deeper: the scan walks every module and optimizer state (about 6 ms
    for a small GPT-2 and its AdamW, a third of a training step's own time on a GPU)."""
    from ..collect import object_at, scan

    if wanted is not None:
        names = _named_at_the_top(namespace, device, exclude, wanted)
        if set(wanted) <= names.keys():
            return names
    names = {}
    for record in scan(namespace, exclude=exclude).records:
        if record.device != _device_name(device) or record.alias_of is not None or record.storage_id is None:
            continue
        try:
            addresses = _addresses(lambda: object_at(namespace, record.name), device, record.storage_id)
        except Exception:  # a name that no longer reads: left unnamed
            continue
        for address in addresses:
            names.setdefault(address, record.name)
    return names


def _named_at_the_top(namespace: Any, device: torch.device, exclude: Any, wanted: Collection[int]) -> dict[int, str]:
    """The wanted addresses held by a tensor under a name of its own, to that name (read as the
    scan reads a tensor: its metadata only)."""
    from ..collect import tensor_facts

    names: dict[int, str] = {}
    for name, value in list(namespace.items()):
        if type(name) is not str or name.startswith("_") or name in exclude or not tensor_getters.is_tensor(value):
            continue
        try:
            with torch._C.DisableTorchFunction():
                facts = tensor_facts(value)
            if facts[0] != _device_name(device) or facts[5] is None:
                continue
            addresses = _addresses(lambda: value, device, facts[5])
        except Exception:  # a tensor that cannot be read so: left to the scan
            continue
        for address in addresses:
            if address in wanted:
                names.setdefault(address, name)
    return names


def _device_name(device: torch.device) -> str:
    """``device`` as the scan writes a tensor's (``cuda:0`` for ``cuda``)."""
    return str(device if device.index is not None else torch.device(device.type, 0))


def _addresses(tensor: Callable[[], Any], device: torch.device, storage_key: int) -> tuple[int, ...]:
    """The allocator addresses of a tensor's memory: on CUDA its storage's data pointer (the
    tensor is read only there), elsewhere what the device module maps the scan's storage key to."""
    if device.type == "cuda":
        with torch._C.DisableTorchFunction():  # TensorBase's own method: no subclass code runs
            return (tensor_getters.storage(tensor()).data_ptr(),)
    return device_module_call(device.type, "storage_addresses", storage_key) or ()


def allocated_on_others(device: torch.device) -> dict[str, int]:
    """Allocated bytes of each other device of ``device``'s kind (sim:1 while sim:0 is profiled),
    read from the device module's counters: a cell that changes them is told it was not profiled there."""
    count = device_module_call(device.type, "device_count")
    out = {}
    for index in range(count if type(count) is int else 0):
        if index != (device.index or 0):
            allocated = device_module_call(device.type, "memory_allocated", index)
            if type(allocated) is int:
                out[f"{device.type}:{index}"] = allocated
    return out
