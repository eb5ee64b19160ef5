"""The only code in devinspect that changes user state.

Every action resolves its target by name in the namespace, checks what it can
beforehand, does its work on the side, and changes the user's objects only in a
last step that is undone if any part of it fails: an action completes, or leaves
everything exactly as it was. Each returns an :class:`ActionResult` saying what it
did, in bytes, or why it did nothing; none raises.
"""

from __future__ import annotations

from .apply import apply_fix, move_optimizer_state, rebuild_optimizer, register_buffer
from .memory_release import (
    collect_garbage,
    empty_cache,
    error_holders,
    release_history,
    release_traceback,
    reset_peak_stats,
)
from .move import graph_holders, move, release_graphs
from .result import ActionResult

__all__ = ["ActionResult", "apply_fix", "collect_garbage", "empty_cache", "error_holders", "graph_holders", "move",
           "move_optimizer_state", "rebuild_optimizer", "register_buffer", "release_graphs", "release_history",
           "release_traceback", "reset_peak_stats"]
