"""devinspect's own work runs beneath every torch mode the user left entered.

A ``TorchFunctionMode`` or ``TorchDispatchMode`` a user entered (``mode.__enter__()`` in a cell,
a ``with`` block still open in a paused generator) stays on torch's mode stacks between cells.
Anything devinspect computes while it is there (a device read, a shape, a ``torch.device``) would
be seen by it: counted, logged, or answered differently. :func:`beneath_user_modes` takes every
mode off both stacks for the duration of our own work and puts them back in the same order, so
the user's modes see none of it, and see the user's own calls afterwards exactly as before.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

# torch is imported when first used: loading the extension imports only what the magics need.


@contextlib.contextmanager
def _function_modes_off() -> Iterator[list]:
    """Every torch-function mode popped, top first; pushed back bottom first on the way out."""
    import torch

    popped = []
    try:
        while torch._C._len_torch_function_stack() > 0:
            popped.append(torch._C._pop_torch_function_stack())
        yield popped
    finally:
        for mode in reversed(popped):
            torch._C._push_on_torch_function_stack(mode)


@contextlib.contextmanager
def beneath_user_modes() -> Iterator[None]:
    """No torch-function mode and no dispatch mode is active inside; both stacks are restored
    exactly (same objects, same order) on the way out, an error or an interrupt included.

    A tensor subclass's own ``__torch_function__``/``__torch_dispatch__`` is not a mode: readers
    that must not run it read through :func:`devinspect.runtime.tensor_getters.reading`, which
    uses this too. Torch's own ``_disable_current_modes`` takes the dispatch modes (user modes and
    the fake/proxy/functional infrastructure modes alike) and gives them back in order.
    """
    import torch
    from torch.utils._python_dispatch import _disable_current_modes

    if torch._C._len_torch_function_stack() == 0 and torch._C._len_torch_dispatch_stack() == 0:
        yield  # the usual case: nothing to take off, nothing to put back
        return
    with _function_modes_off(), _disable_current_modes():
        yield

