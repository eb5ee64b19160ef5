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

#: PyTorch's own, put back when the check ends.
_HAS_TORCH_FUNCTION = torch.overrides.has_torch_function


class FastPathGap:
    """Answers ``has_torch_function`` as if ``mode`` were not there, while it is the only mode."""

    def __init__(self, mode: Any):
        self.mode = mode
        self._installed = False

    def install(self) -> None:
        if torch.overrides.has_torch_function is _HAS_TORCH_FUNCTION:
            torch.overrides.has_torch_function = self._has_torch_function
            self._installed = True

    def remove(self) -> None:
        if self._installed and torch.overrides.has_torch_function is self._has_torch_function:
            torch.overrides.has_torch_function = _HAS_TORCH_FUNCTION
        self._installed = False

    def _has_torch_function(self, relevant_args: Any) -> bool:
        if torch.compiler.is_compiling() or torch._C._len_torch_function_stack() != 1:
            return _HAS_TORCH_FUNCTION(relevant_args)
        top = torch._C._pop_torch_function_stack()
        try:
            return _HAS_TORCH_FUNCTION(relevant_args) if top is self.mode else True
        finally:
            torch._C._push_on_torch_function_stack(top)
