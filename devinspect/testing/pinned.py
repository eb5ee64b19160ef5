"""Pinned host memory for the simulated device: ``tensor.pin_memory()`` and ``is_pinned()``.

PyTorch asks a backend's C++ hooks for a pinned-memory allocator, which a backend written
in Python cannot give, so ``pin_memory()`` (and ``DataLoader(pin_memory=True)``) raised.
As on CUDA, pinning copies the tensor into a new host allocation that ``is_pinned()``
then recognises; copies from it with ``non_blocking=True`` work as any copy does.

The simulated device is then the process's only accelerator (``enable()`` refuses to share a
process with a GPU), so the host's pinning is its pinning.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

_pinned: dict[int, int] = {}  # data address of a pinned allocation -> its bytes
_library: Any = None


def install() -> None:
    """Answer ``_pin_memory`` and ``is_pinned`` for host tensors (once per process)."""
    global _library
    if _library is not None:
        return
    library = torch.library.Library("aten", "IMPL")
    library.impl("_pin_memory", _pin_memory, "CPU")
    library.impl("is_pinned", _is_pinned, "CPU")
    _library = library


def _pin_memory(tensor: torch.Tensor, device: Any = None) -> torch.Tensor:
    with torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
        pinned = torch.empty_strided(tensor.size(), tensor.stride(), dtype=tensor.dtype)
        pinned.copy_(tensor)
    storage = pinned.untyped_storage()
    address = storage.data_ptr()
    _pinned[address] = storage.nbytes()
    # The allocation is unpinned when the tensor that owns it goes; its views keep the data
    # but, as a simplification, not the pinned mark.
    weakref.finalize(pinned, _pinned.pop, address, None)
    return pinned


def _is_pinned(tensor: torch.Tensor, device: Any = None) -> bool:
    if tensor.layout is not torch.strided:
        return False
    storage = tensor.untyped_storage()
    return _pinned.get(storage.data_ptr()) == storage.nbytes()
