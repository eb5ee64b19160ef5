"""Whether a real accelerator shares the process, which keeps the simulated device out of it.

Once a PrivateUse1 backend is registered, PyTorch takes it for the process's accelerator
(``at::accelerator::getAccelerator()`` answers PrivateUse1 before CUDA, for good). The autograd
engine asks that accelerator which stream each backward node runs on; a CUDA node then has
none, and every CUDA backward fails its ``opt_ready_stream && opt_parent_stream`` assertion.
``torch.accelerator`` would answer for the simulated device, not the GPU. Nothing undoes a
registration, so :func:`devinspect.testing.enable` refuses before it registers anything.

A GPU machine can still use the simulated device, in a process that hides its GPUs
(``CUDA_VISIBLE_DEVICES=""``).
"""

from __future__ import annotations

import torch

from .identity import DEVICE_TYPE

#: How to hide each kind of accelerator from a process, where an environment variable is known
#: to (an Apple GPU has none; for another kind the message says what is needed, not how).
_HIDE = {"cuda": 'CUDA_VISIBLE_DEVICES=""'}


def real_accelerator() -> torch.device | None:
    """The real accelerator this process can use, or None. Asked without initialising it (no CUDA
    context is made): a torch built for CUDA on a machine without a visible GPU answers None."""
    found = torch.accelerator.current_accelerator(check_available=True)
    if found is None or found.type in (DEVICE_TYPE, "privateuseone"):
        return None
    return found


def refusal(found: torch.device) -> str:
    """The one line :func:`devinspect.testing.enable` refuses with when ``found`` is present."""
    hide = _HIDE.get(found.type)
    where = (f"run it in a process that hides the {found.type} devices ({hide} python …)" if hide
             else f"run it in a process where torch sees no {found.type} device")
    return (f"the simulated device cannot share a process with a real accelerator ({found.type}): PyTorch would take "
            f"it for the accelerator, and {found.type}'s backward passes, streams and torch.accelerator answers would "
            f"break for the rest of the process; {where}")
