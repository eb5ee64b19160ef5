"""Storages made directly on the simulated device fail with a message, not a crash.

``torch.UntypedStorage(n, device="sim")`` (and ``TypedStorage``, a storage's ``clone()``
or ``to(device="sim")``, which make one) asks PrivateUse1's allocator for memory. A
backend written in Python has no allocator to register, and PyTorch then dereferences a
null one: the interpreter, and a notebook's kernel with everything in it, dies. Tensors
carry their memory in the simulated device's own way and are unaffected; a storage made
directly is refused in one line before PyTorch is asked.
"""

from __future__ import annotations

from typing import Any

import torch

from .identity import is_simulated

_installed = False


def install() -> None:
    """Guard ``UntypedStorage`` construction (once per process)."""
    global _installed
    if _installed:
        return
    storage_type = torch.UntypedStorage
    made_by = storage_type.__new__

    def new(cls: type, *args: Any, **kwargs: Any) -> Any:
        device = kwargs.get("device")
        if device is not None and is_simulated(device):
            raise RuntimeError(
                f"{torch.device(device)} holds no storage of its own (a device written in Python has no allocator "
                f"for PyTorch to call): make a tensor instead, e.g. torch.empty(n, dtype=torch.uint8, "
                f"device={str(torch.device(device))!r})")
        return made_by(cls, *args, **kwargs)

    storage_type.__new__ = new
    _installed = True
