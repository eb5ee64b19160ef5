"""The gradients a backward pass starts from, checked as PyTorch's engine checks them on CUDA.

``y.backward(g)``, ``torch.autograd.backward(ys, gs)`` and ``torch.autograd.grad(ys, xs, gs)``
hand each ``g`` to the autograd engine, which requires it on its output's device: a 0-dim
gradient elsewhere is moved there, any other raises "invalid gradient at index 0 - expected
device cuda:0 but got cpu". The engine leaves that check out when the output is a tensor
subclass, as the simulated device's tensors are, and a host gradient then reaches the device's
backward kernels (and has aborted the interpreter). So the simulated device makes the check
itself, where these calls reach its ``__torch_function__``.
"""

from __future__ import annotations

from typing import Any

import torch

# Where each entry point takes its outputs and their gradients: (outputs' position, gradients'
# position, gradients' keyword).
_ENTRY_POINTS = {
    torch.Tensor.backward: (0, 1, "gradient"),
    torch.autograd.backward: (0, 1, "grad_tensors"),
    torch.autograd.grad: (0, 2, "grad_outputs"),
}


def _as_tuple(value: Any, count: int) -> tuple:
    if value is None:
        return (None,) * count
    if isinstance(value, torch.Tensor):
        return (value,)
    return tuple(value)


def checked(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``(args, kwargs)`` of a backward entry point with each 0-dim gradient moved to its output's
    device; raises as the engine does for a larger gradient on another device. Any other call is
    returned as it is."""
    where = _ENTRY_POINTS.get(func)
    if where is None or kwargs.get("is_grads_batched"):
        return args, kwargs
    outputs_at, grads_at, keyword = where
    if len(args) <= outputs_at:
        return args, kwargs
    outputs = _as_tuple(args[outputs_at], 1)
    positional = len(args) > grads_at
    given = args[grads_at] if positional else kwargs.get(keyword)
    grads = list(_as_tuple(given, len(outputs)))
    changed = False
    for i, (output, grad) in enumerate(zip(outputs, grads)):
        if not (isinstance(output, torch.Tensor) and isinstance(grad, torch.Tensor)):
            continue
        if grad.device == output.device or grad.shape != output.shape:
            continue  # a wrong shape is PyTorch's own error to raise
        if grad.dim() != 0:
            raise RuntimeError(f"invalid gradient at index {i} - expected device {output.device} but got {grad.device}")
        grads[i] = grad.to(output.device)
        changed = True
    if not changed:
        return args, kwargs
    new = grads[0] if isinstance(given, torch.Tensor) else type(given)(grads) if isinstance(given, (list, tuple)) \
        else tuple(grads)
    if positional:
        return args[:grads_at] + (new,) + args[grads_at + 1:], kwargs
    return args, {**kwargs, keyword: new}
