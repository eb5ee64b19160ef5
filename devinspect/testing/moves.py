"""``Module.to`` keeps its Parameter objects on the simulated device, as on CUDA.

On CUDA, ``Module._apply`` replaces each parameter's data in place (``param.data = new``),
so the optimizer keeps its parameters and a graph or traceback that still holds them does
not matter. PyTorch allows that only between its own dense backends; for a tensor
subclass such as the simulated device's it swaps the Python objects' contents instead
(``torch.utils.swap_tensors``), and refuses the swap while anything else holds the
parameter: the graph of a CPU forward whose output is still alive, weight_norm's
computed weight, a weak reference.

Here the simulated device takes the CUDA path's contract with the swap's mechanism:
- moving onto the device, a parameter is swapped even while a graph holds it (the graph
  keeps the old CPU data, as it would keep the old storage on CUDA);
- moving off the device, ``Module._apply`` is told the types are compatible, and the
  ``param.data = new`` it then does is answered by the same swap.
Everything else goes to PyTorch's own functions untouched.
"""

from __future__ import annotations

from typing import Any

import torch

_installed = False


def install(device_tensor: type) -> None:
    """Route ``Module._apply``'s moves of ``device_tensor`` parameters through :func:`swap_contents`."""
    global _installed
    if _installed:
        return
    # torch.compile keeps a stand-in for the original function, keyed by it when it loads:
    # load it first, so that the stand-in stays bound to PyTorch's own function.
    import torch._dynamo

    original_swap = torch.utils.swap_tensors
    original_compatible = torch._has_compatible_shallow_copy_type

    def swap_tensors(t1: Any, t2: Any) -> None:
        if type(t2) is device_tensor and type(t1) is not device_tensor:
            swap_contents(t1, t2)
        else:
            original_swap(t1, t2)

    def has_compatible_shallow_copy_type(tensor: Any, other: Any) -> bool:
        # Only a device tensor answers `.data = ...` itself (see is_data_setter); for any
        # other pair PyTorch's own answer stands.
        if type(tensor) is device_tensor and type(other) is not device_tensor:
            return True
        return original_compatible(tensor, other)

    torch.utils.swap_tensors = swap_tensors
    torch._has_compatible_shallow_copy_type = has_compatible_shallow_copy_type
    _installed = True


def is_data_setter(func: Any) -> bool:
    """Whether ``func`` is ``Tensor.data``'s setter (as a torch function sees it)."""
    return getattr(func, "__name__", "") == "__set__" and getattr(func, "__self__", None) is torch._C.TensorBase.data


def set_data(param: torch.Tensor, data: torch.Tensor) -> None:
    """``param.data = data`` for a parameter on the simulated device: ``param`` takes ``data``'s
    contents and stays the same object (the same Parameter class, flags and attributes)."""
    grad = param.grad  # kept by the autograd data the swap exchanges: carried across, the same object
    if grad is not None:
        param.grad = None
        set_data(grad, grad.detach().to(data.device))
    if isinstance(param, torch.nn.Parameter) or getattr(param, "_is_param", False):
        data = torch.nn.Parameter(data, requires_grad=param.requires_grad)
    else:
        data = data.detach().requires_grad_(param.requires_grad)
    swap_contents(param, data)
    if grad is not None:
        param.grad = grad


def swap_contents(t1: torch.Tensor, t2: torch.Tensor) -> None:
    """What ``torch.utils.swap_tensors`` does, without refusing a tensor that a live graph or a
    weak reference holds: the graph keeps the old data, a weak reference the same object."""
    t1.__class__, t2.__class__ = t2.__class__, t1.__class__
    t1.__dict__, t2.__dict__ = t2.__dict__, t1.__dict__
    torch._C._swap_tensor_impl(t1, t2)
