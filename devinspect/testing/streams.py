"""Streams, events and the device context of the simulated device, named as ``torch.cuda``'s.

Work on the simulated device is finished when its call returns, so every stream is idle,
waiting costs nothing and an event records the host's clock. What code written for
``torch.cuda.Stream`` needs is that these calls exist and keep their contracts: a stream
is a ``torch.Stream`` (``tensor.record_stream`` takes it), ``with torch.sim.stream(s):``
makes ``s`` current for the block, and ``Event.elapsed_time`` gives milliseconds.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from .identity import DEVICE_TYPE, is_simulated


def _resolve(device: Any) -> int:
    """A device index: ``None`` is the current simulated device."""
    if device is None:
        return torch.get_device_module(DEVICE_TYPE).current_device()
    if isinstance(device, int):
        return device
    d = torch.device(device)
    return d.index if d.index is not None else torch.get_device_module(DEVICE_TYPE).current_device()


class DeviceContext:
    """``with torch.sim.device(1):``, as ``torch.cuda.device``."""

    def __init__(self, module: Any, index: int) -> None:
        self.module, self.index, self.before = module, index, None

    def __enter__(self) -> None:
        self.before = self.module.current_device()
        self.module.set_device(self.index)

    def __exit__(self, *exc: Any) -> None:
        self.module.set_device(self.before)


class SimStream(torch.Stream):
    """A stream on a simulated device (``torch.sim.Stream``): always idle."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> SimStream:
        return super().__new__(cls, device=torch.device(DEVICE_TYPE, _resolve(device)), priority=priority)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def wait_stream(self, stream: torch.Stream) -> None:
        pass

    def wait_event(self, event: SimEvent) -> None:
        pass

    def record_event(self, event: SimEvent | None = None) -> SimEvent:
        event = event or SimEvent()
        event.record(self)
        return event

    def __enter__(self) -> SimStream:
        self._context = StreamContext(self)
        self._context.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._context.__exit__(*exc)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<torch.sim.Stream device={self.device} at {id(self):#x}>"


class SimEvent:
    """An event on a simulated device (``torch.sim.Event``): it records the host's clock."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        self.enable_timing = enable_timing
        self._at: float | None = None

    def record(self, stream: torch.Stream | None = None) -> None:
        self._at = time.perf_counter()

    def wait(self, stream: torch.Stream | None = None) -> None:
        pass

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass

    def elapsed_time(self, end_event: SimEvent) -> float:
        """Milliseconds from this event to ``end_event``, as ``torch.cuda.Event.elapsed_time``."""
        if not (self.enable_timing and end_event.enable_timing):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if self._at is None or end_event._at is None:
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return (end_event._at - self._at) * 1000.0


class Streams:
    """Each simulated device's default and current stream."""

    def __init__(self) -> None:
        self._defaults: dict[int, SimStream] = {}
        self._current: dict[int, SimStream] = {}

    def default(self, index: int) -> SimStream:
        if index not in self._defaults:
            self._defaults[index] = SimStream(index)
        return self._defaults[index]

    def current(self, index: int) -> SimStream:
        return self._current.get(index) or self.default(index)

    def set(self, stream: torch.Stream) -> None:
        self._current[stream.device.index] = stream


streams = Streams()


class StreamContext:
    """``with torch.sim.stream(s):`` makes ``s`` its device's current stream for the block."""

    def __init__(self, stream: torch.Stream | None) -> None:
        self.stream, self.before = stream, None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is not None:
            self.before = streams.current(self.stream.device.index)
            streams.set(self.stream)
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        if self.stream is not None:
            streams.set(self.before)


_installed = False


def install() -> None:
    """``torch.accelerator.synchronize()`` for the simulated device (once per process).

    PyTorch asks the device guard, which a backend written in Python cannot implement, and
    raised "Backend doesn't support synchronizing all streams on device". Every kernel has
    finished when it returns, so there is nothing to wait for; any other device is PyTorch's.
    """
    global _installed
    if _installed:
        return
    original = torch.accelerator.synchronize

    def synchronize(device: Any = None) -> None:
        if _targets_simulated(device):
            return None
        return original(device)

    synchronize.__doc__ = original.__doc__
    torch.accelerator.synchronize = synchronize
    _installed = True


def _targets_simulated(device: Any) -> bool:
    if device is None or isinstance(device, int):
        current = torch.accelerator.current_accelerator()
        return current is not None and current.type == DEVICE_TYPE
    return is_simulated(device)
