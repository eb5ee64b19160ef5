"""Where ``%%gpumem``'s allocated and reserved bytes come from, by kind of device.

A source gives the line recorder ``now() -> (allocated, reserved)``, ``start()`` and
``stop()`` around the run, and ``listener``: what hears the line tracer while the cell
runs (None: the recorder itself, live).

* :class:`ToldEvents`: a backend that tells its allocator's events as they happen (the
  simulated device). Each event is counted as it comes, on the lines running then; the
  counters follow from the events, so no line reads the device.
* :class:`TaggedCudaHistory`: CUDA. Its memory history records every allocator event. While
  the cell runs, each line event is one append to a list, and the list's length is set as
  the thread's memory metadata (``torch.cuda.memory._set_memory_metadata``), which the
  allocator stamps on every event it records from then on. At the end the history is read
  once, and the line events and the allocator's are replayed together in the order they
  happened: no line reads the allocator, and each event is placed exactly, however many
  times a loop runs the same line. Events of other threads (autograd's backward, on CUDA)
  carry no tag: they are placed by their time (CUDA records each event's, in µs of the
  system clock) among the line events between the tagged events around them.
* :class:`CudaHistoryWithCounters`: CUDA where the history is the user's own (recording
  before the cell, or carrying metadata the user set): their recording is read, never
  written into, so the counters are read at each line (a ``memory_stats()`` dictionary
  each, which costs far more than the line) and the events once at the end.
* :class:`Counters`: any other accelerator, through ``torch.accelerator``: the counters at
  each line, and no events (so no peak inside a line and no names).

Nothing here allocates on the device, empties its cache, synchronises it or resets its
peak counters.
"""

from __future__ import annotations

import inspect
import operator
import sys
from itertools import repeat as _repeat
from time import time_ns
from typing import Any, Callable

import torch

from ..collect import accelerator_call
from ..model import MemoryEvent
from .line_tracers import running_lines

#: Events kept per run (about 100 bytes each); a longer run keeps counting lines and totals.
MAX_EVENTS = 2_000_000

#: CUDA history actions as the recorder counts them: a free counts when it is requested (the
#: allocator's counter drops then); expandable segments map and unmap instead of allocating.
CUDA_ACTIONS = {"alloc": "alloc", "free_requested": "free", "free": "free", "segment_alloc": "segment_alloc",
                "segment_free": "segment_free", "segment_map": "segment_alloc", "segment_unmap": "segment_free"}
#: CUDA's caching allocator hands out blocks in multiples of this many bytes (kMinBlockSize).
CUDA_BLOCK_BYTES = 512


def cuda_block_bytes(requested: int) -> int:
    """The bytes CUDA's allocated counter grows by for a request of ``requested`` bytes.

    Its history records the size asked for (an H100 and an H200 wrote 64 for
    ``torch.empty(16)``), its counters the block handed out: the request rounded up to
    512 bytes. (A large-pool block too small to split can be larger still, and a
    ``roundup_power2_divisions`` setting rounds further: the cell's own totals come from the
    counters, so only a line's share can be that much short.)"""
    return -(-max(requested, 1) // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES


def event_source(device: torch.device, recorder: Any) -> Any:
    """The source for ``device``: told events, CUDA's history (tagged, or the user's own), or counters."""
    if device.type == "cuda":
        if TaggedCudaHistory.usable():
            return TaggedCudaHistory(device, recorder)
        return CudaHistoryWithCounters(device, recorder)
    observers = device_module_call(device.type, "memory_observers", device)
    if type(observers) is list:
        return ToldEvents(device, observers, recorder)
    return Counters(device, recorder.recording, f"{device.type} exposes no allocation events through "
                                                 "torch.accelerator: no peak inside a line and no names")


class Counters:
    """Counters read from the device's API at each line (no events to follow them by)."""

    listener = None

    def __init__(self, device: torch.device, recording: Any, why: str = ""):
        index = device.index if device.index is not None else 0
        if why:
            recording.events_source = why
        if device.type == "cuda":
            self._read = lambda: (torch.cuda.memory_allocated(index), torch.cuda.memory_reserved(index))
        else:
            kind = device.type
            self._read = lambda: (accelerator_call(kind, "memory_allocated", index),
                                  accelerator_call(kind, "memory_reserved", index))

    def now(self) -> tuple[int | None, int | None]:
        try:
            allocated, reserved = self._read()
            return int(allocated), int(reserved)
        except Exception:  # a backend that cannot say: the column is empty
            return None, None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _EventCounts:
    """Counters kept from the allocator's events, and the events themselves, each on the lines
    running when it happened."""

    listener = None

    def __init__(self, recorder: Any):
        self.recorder = recorder
        self.allocated = self.reserved = 0

    def now(self) -> tuple[int, int]:
        return self.allocated, self.reserved

    def count(self, action: str, address: int, size: int, lines: tuple) -> None:
        # Called for every allocation a loop makes: kept short.
        if action == "alloc":
            allocated = self.allocated = self.allocated + size
            for entry in self.recorder.open_lines:  # the peak of every running line
                if entry[4] is not None and allocated > entry[4]:
                    entry[4] = allocated
        elif action == "free":
            self.allocated -= size
        elif action == "segment_alloc":
            self.reserved += size
        else:
            self.reserved -= size
        recording = self.recorder.recording
        if len(recording.events) < MAX_EVENTS:
            recording.events.append((action, address, size, lines))
        else:
            recording.events_dropped += 1


class ToldEvents(_EventCounts):
    """A backend that tells its allocator's events as they happen: its device module offers
    ``memory_observers(device)``, a list to append ``observer(action, address, size)`` to
    (the simulated device does). The counters follow from the events, so no line reads
    the device."""

    def __init__(self, device: torch.device, observers: list, recorder: Any):
        super().__init__(recorder)
        self.observers = observers
        self.counters = Counters(device, recorder.recording)
        recorder.recording.events_source = f"{device.type}'s allocator events"
        recorder.recording.has_events = True

    def _observe(self, action: str, address: int, size: int) -> None:
        # Heard from any thread, as the device's counters are: counted on the line running then.
        recorder = self.recorder
        stack_read = recorder.stack_read
        lines = running_lines(stack_read, recorder.lines_now, sys._getframe(1)) if stack_read else recorder.lines_now
        self.count(action, address, size, lines)

    def start(self) -> None:
        allocated, reserved = self.counters.now()
        self.allocated, self.reserved = allocated or 0, reserved or 0
        self.observers.append(self._observe)

    def stop(self) -> None:
        if self._observe in self.observers:
            self.observers.remove(self._observe)


def cuda_counters(index: int) -> tuple[int | None, int | None]:
    """CUDA's allocated and reserved bytes on device ``index``, read from the allocator's nested
    statistics (``memory_stats()`` flattens all of them, a few hundred keys, in Python)."""
    stats = torch.cuda.memory.memory_stats_as_nested_dict(index)

    def current(name: str) -> int | None:
        value = stats.get(name, {}).get("all", {}).get("current")
        return value if type(value) is int else None

    return current("allocated_bytes"), current("reserved_bytes")


def _history_on() -> bool:
    is_on = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    return bool(is_on()) if is_on is not None else False


class TaggedCudaHistory(_EventCounts):
    """CUDA's memory history, each event tagged with the number of line events before it, read
    and replayed once at the end (see the module's docstring)."""

    @staticmethod
    def usable() -> bool:
        """Whether the tags can be set and the history is free: not recording already (the
        user's recording is never written into) and no metadata of the user's set."""
        get = getattr(torch._C, "_cuda_getMemoryMetadata", None)
        if get is None or getattr(torch._C, "_cuda_setMemoryMetadata", None) is None:
            return False
        try:
            return not _history_on() and get() == ""
        except Exception:  # an allocator that cannot tag: the counters path
            return False

    def __init__(self, device: torch.device, recorder: Any):
        super().__init__(recorder)
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        #: The line events in order: (0 enter, 1 line or 2 leave, the code, its line number,
        #: time.time_ns()); the allocator tags each event with how many came before it.
        self.log: list[tuple[int, Any, int, int]] = []
        self.tag = torch._C._cuda_setMemoryMetadata
        #: A marked cell's functions are not followed line by line: their lines come from the
        #: Python stack CUDA records with each event (so it records one).
        self.with_stacks = bool(recorder.stack_read)
        self.listener = self

    # -- the line tracer's listener while the cell runs: one append and one tag ----------

    def enter(self, code: Any, offset: int = 0) -> None:
        # No new tag: what happens before the function's first line is its caller's line's.
        self.log.append((0, code, 0, time_ns()))

    def line(self, code: Any, number: int) -> None:
        log = self.log
        log.append((1, code, number, time_ns()))
        self.tag(str(len(log)))

    def leave(self, code: Any, offset: int = 0, value: Any = None) -> None:
        log = self.log
        log.append((2, code, 0, time_ns()))
        self.tag(str(len(log)))

    # -- around the run ----------------------------------------------------------------------

    def start(self) -> None:
        rec = self.recorder.recording
        allocated, reserved = cuda_counters(self.index)
        self.allocated, self.reserved = allocated or 0, reserved or 0
        options: dict[str, Any] = {"enabled": "all", "context": "all" if self.with_stacks else None,
                                   "stacks": "python"}
        if "skip_actions" in inspect.signature(torch.cuda.memory._record_memory_history).parameters:
            options["skip_actions"] = ["free_completed"]  # counted when requested: half the entries
        try:
            self.tag("0")
            torch.cuda.memory._record_memory_history(**options)
            rec.events_source, rec.has_events = "CUDA's memory history", True
        except Exception as exc:  # no history: counters only, said plainly
            self.tag("")
            rec.events_source = f"CUDA's memory history is not available ({type(exc).__name__}: {exc})"
            self.listener = None  # the recorder follows the lines itself, reading the counters
            self.now = Counters(torch.device("cuda", self.index), rec).now  # type: ignore[method-assign]

    def stop(self) -> None:
        if self.listener is None:
            return
        self.tag("")
        try:
            entries = device_trace(self.index)
        finally:
            torch.cuda.memory._record_memory_history(enabled=None)
        try:
            self._replay(entries)
        except Exception as exc:  # a history in a form not known: the lines so far, said so
            rec = self.recorder.recording
            rec.events_source, rec.has_events = f"CUDA's memory history could not be read ({type(exc).__name__}: {exc})", False
        allocated, reserved = cuda_counters(self.index)  # the end as the allocator counts it
        self.allocated, self.reserved = allocated or self.allocated, reserved or self.reserved

    def _replay(self, entries: list[dict]) -> None:
        """The line events and the allocator's, in the order they happened, through the recorder.

        A loop of small allocations makes millions of entries: each is read once, in passes
        that run in C (its fields, its tag), the counters are added up as arrays, and Python
        steps only through the line events (:meth:`LineMemoryRecorder.replay_log`)."""
        import numpy as np

        recorder, log = self.recorder, self.log
        logged = len(log)
        actions = list(map(CUDA_ACTIONS.get, map(_ACTION, entries)))
        kept_entries = entries
        if None in actions:  # entries %%gpumem does not count (free_completed where it could not be skipped)
            kept_entries = [entry for entry, action in zip(entries, actions) if action is not None]
            actions = [action for action in actions if action is not None]
        addresses = list(map(_ADDRESS, kept_entries))
        written = list(map(dict.get, kept_entries, _repeat("user_metadata")))
        tags = _tags_of(written, kept_entries, log, logged)
        codes = np.fromiter(map(_ACTION_CODES.__getitem__, actions), dtype=np.int8, count=len(actions))
        sizes = np.fromiter(map(_SIZE, kept_entries), dtype=np.int64, count=len(actions))
        counted = codes <= 1  # alloc and free: the block handed out, not the bytes asked for
        sizes[counted] = np.maximum(-(-sizes[counted] // CUDA_BLOCK_BYTES), 1) * CUDA_BLOCK_BYTES
        signs = np.where((codes == 0) | (codes == 2), 1, -1)
        allocated = np.cumsum(np.where(counted, signs * sizes, 0)) + self.allocated
        reserved = np.cumsum(np.where(counted, 0, signs * sizes)) + self.reserved
        tag_array = np.maximum.accumulate(np.asarray(tags, dtype=np.int64)) if tags else np.zeros(0, np.int64)
        # The counters when each line event was heard: after every entry tagged up to it.
        at = np.searchsorted(tag_array, np.arange(logged), side="right")
        allocated_at = np.concatenate(([self.allocated], allocated))[at].tolist()
        reserved_at = np.concatenate(([self.reserved], reserved))[at].tolist()
        # The highest allocation between two line events (-1: none).
        highest = np.full(logged + 1, -1, dtype=np.int64)
        made = codes == 0
        np.maximum.at(highest, tag_array[made], allocated[made])
        running = recorder.replay_log(log, allocated_at, reserved_at, highest.tolist())
        final = (int(allocated[-1]), int(reserved[-1])) if len(allocated) else (self.allocated, self.reserved)
        self.allocated, self.reserved = final
        recording = recorder.recording
        room = max(MAX_EVENTS - len(recording.events), 0)
        lines = list(map(running.__getitem__, tag_array.tolist()))
        if self.with_stacks:
            traced = recorder.traced
            lines = [stack_lines(frames, traced) + here if (frames := entry.get("frames")) else here
                     for entry, here in zip(kept_entries, lines)]
        events = list(zip(actions, addresses, sizes.tolist(), lines))
        recording.events.extend(events[:room])
        recording.events_dropped += max(len(events) - room, 0)


_ACTION_CODES = {"alloc": 0, "free": 1, "segment_alloc": 2, "segment_free": 3}
_ACTION, _ADDRESS, _SIZE = operator.itemgetter("action"), operator.itemgetter("addr"), operator.itemgetter("size")


def _tags_of(written: list, entries: list[dict], log: list, logged: int) -> list[int]:
    """Each entry's place among the line events: the tag its thread wrote (the number of line
    events before it), or, for another thread's untagged entry, its time among the line events
    between the tagged entries around it."""
    try:
        tags = list(map(int, written))  # every entry tagged: the usual case, one pass in C
        return [min(tag, logged) for tag in tags] if tags and max(tags) > logged else tags
    except (TypeError, ValueError):
        pass
    tags = [min(int(text), logged) if type(text) is str and text.isdigit() else None for text in written]
    tag = 0
    ahead_at, ahead_tag = -1, logged
    for at, (found, entry) in enumerate(zip(tags, entries)):
        if found is not None:
            tag = found
        elif type(entry.get("time_us")) is int:  # another thread's: placed by its time
            if ahead_at <= at:
                ahead_at, ahead_tag = _next_tagged(tags, at + 1, logged)
            until = (entry["time_us"] + 1) * 1000  # a line event in the same µs counts as before it
            while tag < ahead_tag and log[tag][3] < until:
                tag += 1
        tags[at] = tag
    return tags


def _next_tagged(tags: list[int | None], start: int, logged: int) -> tuple[int, int]:
    """(position, tag) of the first tagged entry from ``start``; past the end, the whole log."""
    for at in range(start, len(tags)):
        if tags[at] is not None:
            return at, tags[at]
    return len(tags), logged


def stack_lines(frames: Any, traced: set[tuple[str, str]]) -> tuple:
    """The lines of the chosen functions (not the cell's own) in a recorded stack, innermost first."""
    return tuple((f.get("filename", ""), f.get("name", ""), int(f.get("line", 0))) for f in frames
                 if (f.get("filename", ""), f.get("name", "")) in traced and f.get("name") != "<module>")


def device_trace(index: int) -> list[dict]:
    """CUDA's recorded history of device ``index`` (one ``_snapshot()``)."""
    traces = torch.cuda.memory._snapshot().get("device_traces") or []
    return list(traces[index]) if index < len(traces) else []


class CudaHistoryWithCounters(Counters):
    """CUDA's memory history as the user left it: on for the run (unless it was on already),
    read once at the end; the counters are read at each line."""

    def __init__(self, device: torch.device, recorder: Any):
        super().__init__(device, recorder.recording)
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.recorder = recorder
        self.was_on = False
        self.before = 0

    def start(self) -> None:
        rec = self.recorder.recording
        try:
            before = device_trace(self.index)
            self.was_on, self.before = bool(before) or _history_on(), len(before)
            if not self.was_on:
                torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
            rec.events_source, rec.has_events = "CUDA's memory history", True
        except Exception as exc:  # no history: counters only, said plainly
            rec.events_source = f"CUDA's memory history is not available ({type(exc).__name__}: {exc})"

    def stop(self) -> None:
        rec = self.recorder.recording
        if not rec.has_events:
            return
        try:
            entries = device_trace(self.index)[self.before:]
        finally:
            if not self.was_on:
                torch.cuda.memory._record_memory_history(enabled=None)
        traced = self.recorder.traced
        rec.events.extend(cuda_events(entries, lambda filename, name: (filename, name) in traced))


def cuda_events(entries: list[dict], traced: Callable[[str, str], bool]) -> list[MemoryEvent]:
    """CUDA history entries as events, each on the traced frames of its stack."""
    out = []
    for entry in entries:
        action = CUDA_ACTIONS.get(entry.get("action", ""))
        if action is None:
            continue
        lines = tuple((f.get("filename", ""), f.get("name", ""), int(f.get("line", 0)))
                      for f in entry.get("frames") or () if traced(f.get("filename", ""), f.get("name", "")))
        size = int(entry.get("size", 0))
        out.append((action, int(entry.get("addr", 0)), cuda_block_bytes(size) if action in ("alloc", "free") else size,
                    lines))
    return out


def device_module_call(kind: str, name: str, *args: Any) -> Any:
    """``torch.<kind>.<name>(*args)``, or None where the device module has no such function."""
    function = getattr(getattr(torch, kind, None), name, None)
    if not callable(function):
        return None
    try:
        return function(*args)
    except Exception:  # a backend that cannot answer: no events, no names
        return None
