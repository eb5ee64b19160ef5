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
    "dropped_records": "move_statements",
    "error_locals": "error_frames",
    "finished_errors": "error_frames",
    "first_line": "failing_call",
    "frame_locals": "locations",
    "function_calls": "user_code",
    "is_own_file": "locations",
    "model_calls": "user_code",
    "moved_in_cells": "user_code",
    "traceback_entries": "failing_call",
    "traceback_locals": "call_stack",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
__all__ = sorted(_SURFACE)
