"""Accelerator memory line by line while a cell runs (``%%gpumem``).

A line tracer on the cell's own code and the functions named with ``-f`` only
(:mod:`.line_tracers`) marks where each line starts and ends; allocated and reserved
bytes there come from the allocator. The allocations themselves come from the
allocator's own record of events, each with the lines of the cell (and of the named
functions) running when it happened:

* a backend that tells its events (the simulated device): each as it happens, and the
  counters follow from them, so no line reads the device;
* CUDA: ``torch.cuda.memory._record_memory_history`` records each event with its Python
  stack, read back once at the end (``_snapshot``) and switched off again, unless it was
  on before; the counters are read at each line;
* any other accelerator: the counters through ``torch.accelerator``; no events, so no
  peak inside a line and no names (the profile says so).

Nothing here allocates on the device, empties its cache, synchronises it or resets its
peak counters.
"""

from __future__ import annotations

import sys
from types import CodeType
from typing import Any, Callable

import torch

from ..collect import tensorbase as tb
from ..collect.memory_readings import accelerator_call
from ..model.line_memory import LineKey, LineTotals, MemoryEvent, Recording
from .line_tracers import line_tracer, running_lines

#: Events kept per run (about 100 bytes each); a longer run keeps counting lines and totals.
MAX_EVENTS = 2_000_000


class LineMemoryRecorder:
    """Records the lines of ``codes`` while it is entered, and the device's allocation events.

    Use as a context manager around running the cell; afterwards ``recording`` holds each
    line's totals and the events. A line ends where the next line of the same frame starts
    or where the frame leaves: the counters read there are the one's after and the other's
    before (so one reading per line run).
    """

    def __init__(self, device: torch.device, codes: frozenset[CodeType], marked: bool = False):
        self.device = device
        self.recording = Recording(str(device))
        #: Per running chosen code (innermost last): [code, open line's key or None, its totals,
        #: allocated when the line started, the most allocated since].
        self.open_lines: list[list[Any]] = []
        #: The lines running now, innermost first (kept for the allocation events).
        self.lines_now: tuple[LineKey, ...] = ()
        self._events = _event_source(device, self)
        self.now = self._events.now  # () -> (allocated, reserved)
        self._tracer = line_tracer(codes, self, marked)
        #: A marked cell's codes: its functions' lines are read from the stack at each event,
        #: up to the cell's own frame.
        self.stack_read = codes if marked and any(c.co_name != "<module>" for c in codes) else frozenset()
        #: (file name, function name) of each chosen code: a CUDA stack's frames are matched against them.
        self.traced = {(c.co_filename, c.co_name) for c in codes}

    # -- entering and leaving -----------------------------------------------------------

    def __enter__(self) -> LineMemoryRecorder:
        rec = self.recording
        rec.others_start = allocated_on_others(self.device)
        self._events.start()
        rec.allocated_start, rec.reserved_start = self.now()
        self._tracer.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._tracer.stop()
        while self.open_lines:  # frames an exception or interrupt left without a leave event
            self._close(self.open_lines.pop())
        rec = self.recording
        rec.allocated_end, rec.reserved_end = self.now()
        self._events.stop()
        rec.others_end = allocated_on_others(self.device)

    # -- what the tracer tells ----------------------------------------------------------

    def enter(self, code: CodeType) -> None:
        self.open_lines.append([code, None, None, None, None])

    def line(self, code: CodeType, number: int) -> None:
        open_ = self.open_lines
        if not open_ or open_[-1][0] is not code:
            return
        top = open_[-1]
        allocated, reserved = self.now()
        if top[1] is not None:
            self._end(top, allocated, reserved)
        key = (code.co_filename, code.co_name, number)
        totals = self.recording.lines.get(key)
        if totals is None:
            totals = self.recording.lines[key] = LineTotals(allocated_before=allocated, reserved_before=reserved)
        top[1], top[2], top[3], top[4] = key, totals, allocated, allocated
        self._lines_changed()

    def leave(self, code: CodeType) -> None:
        if self.open_lines and self.open_lines[-1][0] is code:
            self._close(self.open_lines.pop())
            self._lines_changed()

    def _lines_changed(self) -> None:
        self.lines_now = tuple(entry[1] for entry in reversed(self.open_lines) if entry[1] is not None)

    def _close(self, entry: list[Any]) -> None:
        if entry[1] is not None:
            self._end(entry, *self.now())

    def _end(self, entry: list[Any], allocated: int | None, reserved: int | None) -> None:
        totals, started, highest = entry[2], entry[3], entry[4]
        totals.runs += 1
        totals.allocated_after, totals.reserved_after = allocated, reserved
        if allocated is not None and started is not None:
            totals.change = (totals.change or 0) + allocated - started
        if self.recording.has_events and highest is not None:
            highest = max(highest, allocated) if allocated is not None else highest
            totals.peak = highest if totals.peak is None else max(totals.peak, highest)


class _Counters:
    """Counters read from the device's API at each line (no events to follow them by)."""

    def __init__(self, device: torch.device, recording: Recording, why: str = ""):
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
        except Exception:  # noqa: BLE001 - a backend that cannot say: the column is empty
            return None, None

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass


class _ToldEvents:
    """A backend that tells its allocator's events as they happen: its device module offers
    ``memory_observers(device)``, a list to append ``observer(action, address, size)`` to
    (the simulated device does). The counters follow from the events, so no line reads
    the device."""

    def __init__(self, device: torch.device, observers: list, recorder: LineMemoryRecorder):
        self.observers = observers
        self.recorder = recorder
        self.counters = _Counters(device, recorder.recording)
        self.allocated = self.reserved = 0
        recorder.recording.events_source = f"{device.type}'s allocator events"
        recorder.recording.has_events = True

    def now(self) -> tuple[int, int]:
        return self.allocated, self.reserved

    def _observe(self, action: str, address: int, size: int) -> None:
        # Heard from any thread, as the device's counters are: counted on the line running then.
        # Called for every allocation a loop makes: the recorder's steps are inlined.
        recorder = self.recorder
        if action == "alloc":
            allocated = self.allocated = self.allocated + size
            for entry in recorder.open_lines:  # the peak of every running line
                if entry[4] is not None and allocated > entry[4]:
                    entry[4] = allocated
        elif action == "free":
            self.allocated -= size
        elif action == "segment_alloc":
            self.reserved += size
        else:
            self.reserved -= size
        events = recorder.recording.events
        if len(events) < MAX_EVENTS:
            stack_read = recorder.stack_read
            lines = running_lines(stack_read, recorder.lines_now, sys._getframe(1)) if stack_read else recorder.lines_now
            events.append((action, address, size, lines))
        else:
            recorder.recording.events_dropped += 1

    def start(self) -> None:
        allocated, reserved = self.counters.now()
        self.allocated, self.reserved = allocated or 0, reserved or 0
        self.observers.append(self._observe)

    def stop(self) -> None:
        if self._observe in self.observers:
            self.observers.remove(self._observe)


class _CudaHistoryEvents(_Counters):
    """CUDA's memory history: on for the run (unless it was on already), read once at the end;
    the counters are read at each line."""

    def __init__(self, device: torch.device, recorder: LineMemoryRecorder):
        super().__init__(device, recorder.recording)
        self.index = device.index if device.index is not None else torch.cuda.current_device()
        self.recorder = recorder
        self.was_on = False
        self.before = 0

    def _trace(self) -> list[dict]:
        traces = torch.cuda.memory._snapshot().get("device_traces") or []
        return list(traces[self.index]) if self.index < len(traces) else []

    def start(self) -> None:
        rec = self.recorder.recording
        try:
            before = self._trace()
            self.was_on, self.before = bool(before), len(before)
            if not self.was_on:
                torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python")
            rec.events_source, rec.has_events = "CUDA's memory history", True
        except Exception as exc:  # noqa: BLE001 - no history: counters only, said plainly
            rec.events_source = f"CUDA's memory history is not available ({type(exc).__name__}: {exc})"

    def stop(self) -> None:
        rec = self.recorder.recording
        if not rec.has_events:
            return
        try:
            entries = self._trace()[self.before:]
        finally:
            if not self.was_on:
                torch.cuda.memory._record_memory_history(enabled=None)
        traced = self.recorder.traced
        rec.events.extend(cuda_events(entries, lambda filename, name: (filename, name) in traced))


def cuda_events(entries: list[dict], traced: Callable[[str, str], bool]) -> list[MemoryEvent]:
    """CUDA history entries as events: frees are counted when requested (the allocator's
    counter drops then), and each event's lines are the traced frames of its stack."""
    actions = {"alloc": "alloc", "free_requested": "free", "free": "free",
               "segment_alloc": "segment_alloc", "segment_free": "segment_free"}
    out = []
    for entry in entries:
        action = actions.get(entry.get("action", ""))
        if action is None:
            continue
        lines = tuple((f.get("filename", ""), f.get("name", ""), int(f.get("line", 0)))
                      for f in entry.get("frames") or () if traced(f.get("filename", ""), f.get("name", "")))
        out.append((action, int(entry.get("addr", 0)), int(entry.get("size", 0)), lines))
    return out


def _event_source(device: torch.device, recorder: LineMemoryRecorder) -> Any:
    if device.type == "cuda":
        return _CudaHistoryEvents(device, recorder)
    observers = _device_module_call(device.type, "memory_observers", device)
    if type(observers) is list:
        return _ToldEvents(device, observers, recorder)
    return _Counters(device, recorder.recording, f"{device.type} exposes no allocation events through "
                                                  "torch.accelerator: no peak inside a line and no names")


def named_allocations(namespace: Any, device: torch.device, exclude: Any = ()) -> dict[int, str]:
    """The address of each allocation on ``device`` that a user's name reaches, to that
    name (the scan's name: the first that reaches the memory; views and aliases add none)."""
    from ..collect.scan import scan
    from ..collect.values import object_at

    wanted = str(device if device.index is not None else torch.device(device.type, 0))
    names: dict[int, str] = {}
    for record in scan(namespace, exclude=exclude).records:
        if record.device != wanted or record.alias_of is not None or record.storage_id is None:
            continue
        if device.type == "cuda":
            try:
                with torch._C.DisableTorchFunction():  # TensorBase's own method: no subclass code runs
                    addresses: tuple[int, ...] = (tb.storage(object_at(namespace, record.name)).data_ptr(),)
            except Exception:  # noqa: BLE001 - a name that no longer reads: left unnamed
                continue
        else:
            addresses = _device_module_call(device.type, "storage_addresses", record.storage_id) or ()
        for address in addresses:
            names.setdefault(address, record.name)
    return names


def allocated_on_others(device: torch.device) -> dict[str, int]:
    """Allocated bytes of each other device of ``device``'s kind (sim:1 while sim:0 is profiled),
    read from the device module's counters: a cell that changes them is told it was not profiled there."""
    count = _device_module_call(device.type, "device_count")
    out = {}
    for index in range(count if type(count) is int else 0):
        if index != (device.index or 0):
            allocated = _device_module_call(device.type, "memory_allocated", index)
            if type(allocated) is int:
                out[f"{device.type}:{index}"] = allocated
    return out


def _device_module_call(kind: str, name: str, *args: Any) -> Any:
    """``torch.<kind>.<name>(*args)``, or None where the device module has no such function."""
    function = getattr(getattr(torch, kind, None), name, None)
    if not callable(function):
        return None
    try:
        return function(*args)
    except Exception:  # noqa: BLE001 - a backend that cannot answer: no events, no names
        return None
