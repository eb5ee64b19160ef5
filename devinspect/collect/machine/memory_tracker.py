"""Per-cell memory (``%gpumem --track``): allocator counters and resident memory around
each cell, with the peak in between."""

from __future__ import annotations

import os
import time

import torch

from ...model import CellDevice, CellMemory, MemoryHistory
from .memory_readings import accelerator_call, kib, other_accelerators, read_process, reset_process_peak, stat


class MemoryTracker:
    """Per-cell memory: call :meth:`before` and :meth:`after` around each cell.

    Reads the allocator's counters of every initialised CUDA device and this
    process's resident memory. The peak during a cell comes from the allocator's
    peak counters, reset before each cell (``torch.cuda.reset_peak_memory_stats``)
    and, on Linux, from the kernel's resident-memory high-water mark, reset through
    ``/proc/self/clear_refs``; no thread polls anything. Resetting the peaks is the
    one side effect, and the reason tracking is opt-in.
    """

    def __init__(self) -> None:
        self.cells: list[CellMemory] = []
        self._pending: tuple[int | None, str, float, dict[str, tuple[int | None, ...]]] | None = None
        self._can_reset_rss_peak = os.access("/proc/self/clear_refs", os.W_OK)

    def before(self, cell: int | None, source: str) -> None:
        self._reset_peaks()
        self._pending = (cell, source, time.perf_counter(), _counters())

    def after(self, failed: bool = False, cell: int | None = None) -> CellMemory | None:
        """Record the cell begun by :meth:`before`; None when none was begun.

        ``cell`` is the execution count the cell ran as, when known only afterwards
        (IPython numbers a cell before or after its pre-run hooks, by version).
        """
        if self._pending is None:
            return None
        began, source, start, before = self._pending
        cell = cell if cell is not None else began
        self._pending = None
        wall = time.perf_counter() - start
        after = _counters()
        devices = []
        for device in list(before) + [d for d in after if d not in before]:
            b = before.get(device, (None, None, None, None))
            a = after.get(device, (None, None, None, None))
            if device != "cpu" and not any(b) and not any(a):
                continue  # a device nothing has used: no row
            peak_reserved = a[3] if device != "cpu" else None
            peak_allocated = a[2] if device != "cpu" or self._can_reset_rss_peak else None
            devices.append(CellDevice(device, b[0], a[0], b[1], a[1], peak_allocated, peak_reserved))
        record = CellMemory(cell, source, wall, tuple(devices), failed)
        self.cells.append(record)
        return record

    def history(self) -> MemoryHistory:
        return MemoryHistory(tuple(self.cells))

    def _reset_peaks(self) -> None:
        if torch.cuda._is_compiled() and torch.cuda.is_initialized():
            for i in range(torch.cuda.device_count()):
                torch.cuda.reset_peak_memory_stats(i)
        for kind, i in other_accelerators():
            try:
                accelerator_call(kind, "reset_peak_memory_stats", i)
            except Exception:  # a device without peak counters records no peak
                pass
        if self._can_reset_rss_peak:
            self._can_reset_rss_peak = reset_process_peak()


def _counters() -> dict[str, tuple[int | None, ...]]:
    """(allocated, reserved, peak allocated, peak reserved) per initialised accelerator device; RSS for the CPU."""
    out: dict[str, tuple[int | None, ...]] = {}
    if torch.cuda._is_compiled() and torch.cuda.is_initialized():
        for i in range(torch.cuda.device_count()):
            s = torch.cuda.memory_stats(i)
            out[f"cuda:{i}"] = (
                stat(s, "allocated_bytes.all.current"), stat(s, "reserved_bytes.all.current"),
                stat(s, "allocated_bytes.all.peak"), stat(s, "reserved_bytes.all.peak"),
            )
    for kind, i in other_accelerators():
        try:
            s = accelerator_call(kind, "memory_stats", i)
        except Exception:  # no allocator figures: the device is left out
            continue
        out[f"{kind}:{i}"] = (
            stat(s, "allocated_bytes.all.current"), stat(s, "reserved_bytes.all.current"),
            stat(s, "allocated_bytes.all.peak"), stat(s, "reserved_bytes.all.peak"),
        )
    try:
        with open("/proc/self/status") as f:
            status = f.read()
        out["cpu"] = (kib(status, "VmRSS"), None, kib(status, "VmHWM"), None)
    except OSError:
        out["cpu"] = (read_process().get("rss"), None, None, None)
    return out
