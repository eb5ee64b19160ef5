"""Composite kernels that take one path for plain tensors and another for tensor subclasses,
given the plain tensors' path on the simulated device.

The simulated device's tensors are a tensor subclass, while a GPU's are plain tensors. Where a
composite kernel branches on that (``at::areAnyTensorSubclassLike``) and the two branches
accept different devices, the simulated device would answer as CUDA answers a subclass, not as
it answers a user's tensors. This is a fact of each such composite's source, not of its
declaration, so it is stated per op, with the reason:

* ``ctc_loss`` with length tensors: for plain tensors it reads the lengths to the host first
  (``input_lengths.to(kCPU, kLong)``) and goes on with integer lists, so the lengths may be on
  any device (host lengths beside device log-probabilities are the usual call); for a subclass
  it passes the length tensors on to ``_ctc_loss.Tensor``, whose entry point checks that they
  are on the log-probabilities' device.

A call that involves another subclass (a fake tensor while ``torch.compile`` traces) takes the
subclass path, as it would on CUDA.
"""

from __future__ import annotations

from typing import Any

import torch

_installed = False


def _plain(tensors: tuple, device_tensor: type) -> bool:
    """Whether every tensor is one a GPU would hold as a plain tensor: a plain tensor or the
    simulated device's own."""
    return all(type(t) in (torch.Tensor, device_tensor) for t in tensors)


def _ctc_loss(device_tensor: type) -> Any:
    composite = torch.ops.aten.ctc_loss.Tensor

    def ctc_loss(log_probs, targets, input_lengths, target_lengths, blank=0, reduction=1, zero_infinity=False):
        if not _plain((log_probs, targets, input_lengths, target_lengths), device_tensor):
            return composite.decompose(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                                       zero_infinity)
        for name, lengths in (("input_lengths", input_lengths), ("target_lengths", target_lengths)):
            if lengths.is_floating_point() or lengths.is_complex() or lengths.dtype == torch.bool:
                raise RuntimeError(f"{name} must be integral")
        return torch.ops.aten.ctc_loss.IntList(log_probs, targets, input_lengths.to("cpu", torch.long).tolist(),
                                               target_lengths.to("cpu", torch.long).tolist(), blank, reduction,
                                               zero_infinity)

    return ctc_loss


def install(device_tensor: type) -> None:
    """Give the simulated device's tensors the plain tensors' path (once per process)."""
    global _installed
    if _installed:
        return
    torch.library.impl("aten::ctc_loss.Tensor", "AutogradPrivateUse1")(_ctc_loss(device_tensor))
    _installed = True
