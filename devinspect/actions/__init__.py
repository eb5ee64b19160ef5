"""The only code in devinspect that changes user state.

Every action resolves its target by name in the namespace, checks what it can
beforehand, does its work on the side, and changes the user's objects only in a
last step that is undone if any part of it fails: an action completes, or leaves
everything exactly as it was. Each returns an :class:`ActionResult` saying what it
did, in bytes, or why it did nothing; none raises but a KeyboardInterrupt, which is held
while a change is made or undone, undoes what was done when it comes between two changes,
and is raised again with a note saying what it left (:mod:`.interrupts`).
"""

from __future__ import annotations

from ..lazy_exports import lazy_surface
from .apply import apply_after_release, apply_fix, move_optimizer_state, rebuild_optimizer, register_buffer
from .binding import MadeFor, made_for
from .memory_release import (
    collect_garbage,
    empty_cache,
    error_holders,
    release_history,
    release_traceback,
    reset_peak_stats,
)
from .move import graph_holders, move, release_graphs
from .reach import unreached
from .result import ActionResult

__all__ = ["ActionResult", "MadeFor", "apply_after_release", "apply_fix", "collect_garbage", "empty_cache", "error_holders", "graph_holders", "made_for", "move",
           "move_optimizer_state", "rebuild_optimizer", "register_buffer", "release_graphs", "release_history",
           "release_traceback", "reset_peak_stats", "unreached"]

_SURFACE = {
    "NamePath": "result",
    "PendingEdit": "cells",
    "UNKNOWN": "result",
}
__getattr__ = lazy_surface(__name__, _SURFACE)
