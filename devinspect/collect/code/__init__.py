"""The user's code, read as text and from frames, never run: the call that raised and its
operands (:mod:`.failing_call`, :mod:`.compiled_call`), the call stack and the expressions
the failing line names tensors by, the session's cells and functions (:mod:`.user_code`),
the user's lines versus library code (:mod:`.locations`), finished errors' frames, the
factories and functions of the user's that make tensors, and moves whose result is dropped.

Public surface: :func:`failing_call`, :func:`first_line`, :func:`compiled_call`,
:func:`finished_errors`, :func:`is_own_file`.
"""

from ...lazy_exports import lazy_surface

_SURFACE = {
    "failing_call": "failing_call", "first_line": "failing_call", "traceback_entries": "failing_call",
    "compiled_call": "compiled_call",
    "finished_errors": "error_frames", "error_locals": "error_frames",
    "is_own_file": "locations", "frame_locals": "locations",
}
__all__ = sorted(_SURFACE)
__getattr__ = lazy_surface(__name__, _SURFACE)
