"""Fused fast paths that a torch-function mode would switch off, kept on under ``%%devcheck``.

``nn.TransformerEncoder``, ``nn.TransformerEncoderLayer`` and ``nn.MultiheadAttention`` take
a fused kernel only when ``torch.overrides.has_torch_function`` is False for their inputs,
which any active torch-function mode makes True. The slow path is not only slower: with a
padding mask, TransformerEncoder's fast path gives zeros at padded positions and the slow
path real values. So while a check runs, the check's mode is lifted for the length of such a
module's forward (when it is the only mode, as it is in a plain cell), and put back after:
the cell computes what a plain cell computes. What runs inside those modules is not
counted (their kernels do not copy between devices); a device mismatch there is still
explained, from the error.
"""

from __future__ import annotations

import contextvars
from typing import Any

import torch
from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

from ..collect.static import mro, plain_class_dict

#: Modules whose ``forward`` tests ``has_torch_function`` before its fast path.
FAST_PATH_MODULES = (torch.nn.TransformerEncoder, torch.nn.TransformerEncoderLayer, torch.nn.MultiheadAttention)


def _has_fast_path(module: Any) -> bool:
    """A fast-path module, or a subclass that keeps its ``forward`` (read from the class dicts)."""
    for klass in mro(type(module)):
        if any(klass is fast for fast in FAST_PATH_MODULES):  # by identity: a metaclass's __eq__ never runs
            return True
        if "forward" in plain_class_dict(klass):
            return False  # a subclass with its own forward: whatever it does, it is the user's
    return False


class FastPathGap:
    """Lifts ``mode`` off the torch-function stack around fast-path modules' forwards."""

    def __init__(self, mode: Any):
        self.mode = mode
        # One entry per fast-path forward running, whether it lifted the mode: kept per thread (and
        # task), since the hooks are global and another thread's forward must not touch this stack.
        self._lifted: contextvars.ContextVar[tuple[bool, ...]] = contextvars.ContextVar("lifted", default=())
        self.names: set[str] = set()  # the module classes that ran with the mode lifted
        self._handles: list[Any] = []

    @property
    def lifted(self) -> tuple[bool, ...]:
        return self._lifted.get()

    def install(self) -> None:
        self._handles = [register_module_forward_pre_hook(self._before),
                         register_module_forward_hook(self._after, always_call=True)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if any(self.lifted):  # a forward that never came back (an interrupt): the mode is put back once
            torch._C._push_on_torch_function_stack(self.mode)
        self._lifted.set(())

    def _before(self, module: Any, args: Any) -> None:
        if torch.compiler.is_compiling() or not _has_fast_path(module):
            return
        alone = torch._C._len_torch_function_stack() == 1 and not any(self.lifted)
        if alone:
            top = torch._C._pop_torch_function_stack()
            if top is not self.mode:  # not ours after all: leave the stack as it was
                torch._C._push_on_torch_function_stack(top)
                alone = False
            else:
                self.names.add(type(module).__name__)
        self._lifted.set((*self.lifted, alone))

    def _after(self, module: Any, args: Any, output: Any) -> None:
        lifted = self.lifted
        if torch.compiler.is_compiling() or not _has_fast_path(module) or not lifted:
            return
        self._lifted.set(lifted[:-1])
        if lifted[-1]:
            torch._C._push_on_torch_function_stack(self.mode)
