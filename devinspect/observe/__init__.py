"""Code observed while it runs: the device check behind ``%%devcheck`` and
:func:`devinspect.check` (copies, host syncs and device mismatches, per line of the
user's code), and tracebacks drawn without devinspect's own frames.

The user's code runs exactly once, as it would without devinspect; what is observed
is kept beside it, never attached to the user's tensors.
"""

from ..lazy_exports import lazy_surface

_SURFACE = {
    "DeviceCheckError": "checked_block",
    "DeviceCheckMode": "mode",
    "LineKey": "memory_recorder",
    "LineMemoryRecorder": "memory_recorder",
    "mark_statements": "line_tracers",
    "named_allocations": "memory_recorder",
    "uses_markers": "line_tracers",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
