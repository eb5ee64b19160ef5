"""Pinned host memory for the simulated device: ``tensor.pin_memory()`` and ``is_pinned()``.

PyTorch asks a backend's C++ hooks for a pinned-memory allocator, which a backend written
in Python cannot give, so ``pin_memory()`` (and ``DataLoader(pin_memory=True)``) raised.
As on CUDA, pinning copies the tensor into a new host allocation that ``is_pinned()``
then recognises; copies from it with ``non_blocking=True`` work as any copy does.

The simulated device is then the process's only accelerator (``enable()`` refuses to share a
process with a GPU), so the host's pinning is its pinning.

Only host memory can be pinned: pinning a tensor on the device (a DataLoader with
``pin_memory=True`` over a dataset that holds device tensors) raises CUDA's error, with the
device's tensor type: "cannot pin 'torch.sim.FloatTensor' only dense CPU tensors can be pinned".
"""

from __future__ import annotations

import weakref
from typing import Any

import torch

from .identity import DEVICE_TYPE

#: The ops that pin a tensor: on a tensor of the device they raise, as CUDA's do.
PINNING = frozenset({"pin_memory", "_pin_memory"})
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


def refusal(tensor: torch.Tensor) -> RuntimeError:
    """The error pinning a tensor of the device raises (CUDA's, with this device's tensor type)."""
    with torch._C.DisableTorchFunctionSubclass():
        host_type = tensor._data.type() if hasattr(tensor, "_data") else tensor.type()
    return RuntimeError(f"cannot pin '{host_type.replace('torch.', f'torch.{DEVICE_TYPE}.', 1)}' "
                        "only dense CPU tensors can be pinned")
