"""A stand-in for CUDA's memory API over the simulated device's allocator, for what %%gpumem
reads from CUDA, checked on a machine without a GPU.

It answers as CUDA's caching allocator does (torch 2.10+): ``_record_memory_history``
switches a trace on and off (off clears it), each allocator event is recorded while it is on,
with the calling thread's memory metadata (``_cuda_setMemoryMetadata`` sets it per thread)
and, when the context asks for it, the Python stack, innermost frame first;
``_snapshot()`` returns ``device_traces``; ``memory_stats()`` (and ``memory_stats_as_nested_dict()``) the counters. An allocation's
entry carries the bytes asked for, as CUDA's do (an H200 recorded 64 for ``torch.empty(16)``),
while the counters count the whole 512-byte block. A free is
recorded as ``free_requested`` then ``free_completed`` unless skipped, as CUDA records it.
Every call is counted in ``calls``, so a test can say how often %%gpumem asked.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from typing import Any

import torch

from devinspect.testing.device import requested_bytes

FREE_ACTIONS = {"free": "free_requested"}


class CudaMemoryStandIn:
    def __init__(self, index: int = 0):
        self.index = index
        self.calls: collections.Counter[str] = collections.Counter()
        self.local = threading.local()
        self.recording = False
        self.context: str | None = None
        self.skip: set[str] = set()
        self.trace: list[dict[str, Any]] = []
        self.history_seen: list[dict[str, Any]] = []

    # -- torch._C -------------------------------------------------------------------------

    def set_metadata(self, text: str) -> None:
        self.calls["_cuda_setMemoryMetadata"] += 1
        self.local.metadata = text

    def get_metadata(self) -> str:
        self.calls["_cuda_getMemoryMetadata"] += 1
        return getattr(self.local, "metadata", "")

    def history_enabled(self) -> bool:
        self.calls["_cuda_isHistoryEnabled"] += 1
        return self.recording

    # -- torch.cuda.memory ------------------------------------------------------------------

    def record_memory_history(self, enabled: str | None = "all", context: str | None = "all", stacks: str = "all",
                              max_entries: int = sys.maxsize, device: Any = None, clear_history: bool = False,
                              compile_context: bool = False, global_record_annotations: bool = False,
                              skip_actions: list[str] | None = None) -> None:
        self.calls["_record_memory_history"] += 1
        if enabled is None:
            self.recording, self.trace = False, []
            return
        self.recording, self.context, self.skip = True, context, set(skip_actions or ())

    def snapshot(self, device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
        self.calls["_snapshot"] += 1
        traces: list[list[dict[str, Any]]] = [[] for _ in range(self.index + 1)]
        traces[self.index] = [dict(e) for e in self.trace]
        self.history_seen = traces[self.index]  # the last history read, for a test to look at
        return {"segments": [], "device_traces": traces}

    def memory_stats(self, device: Any = None) -> dict[str, int]:
        self.calls["memory_stats"] += 1
        return {"allocated_bytes.all.current": torch.sim.memory_allocated(0),
                "reserved_bytes.all.current": torch.sim.memory_reserved(0)}

    def memory_stats_as_nested_dict(self, device: Any = None) -> dict[str, Any]:
        self.calls["memory_stats_as_nested_dict"] += 1
        return {"allocated_bytes": {"all": {"current": torch.sim.memory_allocated(0)}},
                "reserved_bytes": {"all": {"current": torch.sim.memory_reserved(0)}}}

    def memory_allocated(self, device: Any = None) -> int:
        self.calls["memory_allocated"] += 1
        return torch.sim.memory_allocated(0)

    def memory_reserved(self, device: Any = None) -> int:
        self.calls["memory_reserved"] += 1
        return torch.sim.memory_reserved(0)

    # -- the allocator ------------------------------------------------------------------------

    def observe(self, action: str, address: int, size: int) -> None:
        """The simulated allocator's event, recorded as CUDA records its own."""
        if not self.recording:
            return
        recorded = FREE_ACTIONS.get(action, action)
        if action in ("alloc", "free"):  # CUDA records the bytes asked for, its counters the block's
            size = requested_bytes(address, torch.device("sim", self.index)) or size
        self._record(recorded, address, size, sys._getframe(1))
        if recorded == "free_requested":
            self._record("free_completed", address, size, None)

    def _record(self, action: str, address: int, size: int, frame: Any) -> None:
        if action in self.skip:
            return
        entry: dict[str, Any] = {"action": action, "addr": address, "size": size, "stream": 0,
                                 "time_us": time.time_ns() // 1000}
        metadata = getattr(self.local, "metadata", "")
        if metadata:
            entry["user_metadata"] = metadata
        wanted = self.context == "all" or (self.context in ("alloc", "state") and action == "alloc")
        if wanted and frame is not None:
            frames = []
            while frame is not None:
                code = frame.f_code
                frames.append({"filename": code.co_filename, "name": code.co_name, "line": frame.f_lineno})
                frame = frame.f_back
            entry["frames"] = frames
        self.trace.append(entry)

    def install(self, monkeypatch: Any) -> CudaMemoryStandIn:
        """Put the stand-in in place of CUDA's functions, its allocator the simulated device's
        (undone with ``monkeypatch`` and :meth:`remove`)."""
        self.install_functions(monkeypatch)
        observers = torch.sim.memory_observers(torch.device("sim", 0))
        observers.append(self.observe)
        self._observers = observers
        return self

    def install_functions(self, monkeypatch: Any) -> None:
        """CUDA's memory functions answered by the stand-in (undone with ``monkeypatch``)."""
        monkeypatch.setattr(torch._C, "_cuda_setMemoryMetadata", self.set_metadata, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_getMemoryMetadata", self.get_metadata, raising=False)
        monkeypatch.setattr(torch._C, "_cuda_isHistoryEnabled", self.history_enabled, raising=False)
        monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", self.record_memory_history)
        monkeypatch.setattr(torch.cuda.memory, "_snapshot", self.snapshot)
        for name in ("memory_stats", "memory_allocated", "memory_reserved"):
            monkeypatch.setattr(torch.cuda, name, getattr(self, name))
        monkeypatch.setattr(torch.cuda.memory, "memory_stats_as_nested_dict", self.memory_stats_as_nested_dict)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: self.index)

    def remove(self) -> None:
        observers = getattr(self, "_observers", [])
        if self.observe in observers:
            observers.remove(self.observe)
