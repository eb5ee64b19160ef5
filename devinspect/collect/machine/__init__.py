"""The machine, read without initialising an accelerator: which devices exist and what a
typed device name means, what a bug report says about the environment, and memory: the
allocator's and the driver's readings, a snapshot reconciled with the tensors by name, and
per-cell tracking.

Public surface: :func:`parse` and :func:`present` (devices), :func:`gather` (environment),
:func:`snapshot` (memory), :class:`MemoryTracker`.
"""

from ...lazy_exports import lazy_surface

_SURFACE = {
    "parse": "devices", "present": "devices", "DeviceNameError": "devices",
    "gather": "environment",
    "snapshot": "memory_snapshot",
    "MemoryTracker": "memory_tracker",
}
__all__ = sorted(_SURFACE)
__getattr__ = lazy_surface(__name__, _SURFACE)
