"""Fused fast paths that a torch-function mode would switch off, kept on under ``%%devcheck``.

``nn.TransformerEncoder``, ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` take
a fused kernel only when ``torch.overrides.has_torch_function`` is False for their inputs,
which any active torch-function mode makes True. The slow path is not only slower: with a
padding mask, TransformerEncoder's fast path gives zeros at padded positions and the slow
path real values. So while a check runs, ``torch.overrides.has_torch_function`` (which those
modules, and PyTorch's other run-time callers, look up as they run) answers as it would
without the check's mode when that mode is the only one on this thread's stack: the cell
takes the paths a plain cell takes and computes what it computes. Nothing else is changed:
no module hook, no frame in the user's tracebacks, and another thread (whose mode stack is
its own) gets PyTorch's answer.
"""

from __future__ import annotations

from typing import Any

import torch

#: PyTorch's own, put back when the last check ends.
_HAS_TORCH_FUNCTION = torch.overrides.has_torch_function

#: The modes of the checks running (nested, or on several threads).
_checks: list[Any] = []


def _has_torch_function(relevant_args: Any) -> bool:
    """PyTorch's answer, as if a check's mode that is alone on this thread's stack were not there."""
    if torch.compiler.is_compiling() or torch._C._len_torch_function_stack() != 1 or \
            not any(torch._C._get_function_stack_at(0) is mode for mode in _checks):
        return _HAS_TORCH_FUNCTION(relevant_args)
    top = torch._C._pop_torch_function_stack()
    try:
        return _HAS_TORCH_FUNCTION(relevant_args)
    finally:
        torch._C._push_on_torch_function_stack(top)


class FastPaths:
    """Keeps the fused fast paths on while ``mode`` (a check's) is the only mode."""

    def __init__(self, mode: Any):
        self.mode = mode

    def install(self) -> None:
        _checks.append(self.mode)
        torch.overrides.has_torch_function = _has_torch_function

    def remove(self) -> None:
        for i, mode in enumerate(_checks):
            if mode is self.mode:
                del _checks[i]
                break
        if not _checks and torch.overrides.has_torch_function is _has_torch_function:
            torch.overrides.has_torch_function = _HAS_TORCH_FUNCTION
