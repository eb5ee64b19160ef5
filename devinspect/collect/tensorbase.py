"""A tensor's facts read through ``torch._C.TensorBase``'s own C getters and methods.

Called directly, they never reach a tensor subclass's Python property of the same name
(``shape``, ``device``, ``nbytes`` …) or its ``__getattribute__``; with torch-function
dispatch disabled around them, no ``__torch_function__`` or mode sees the read either.
"""

from __future__ import annotations

import torch

_TB = torch._C.TensorBase

device = _TB.__dict__["device"].__get__
dtype = _TB.__dict__["dtype"].__get__
shape = _TB.__dict__["shape"].__get__
layout = _TB.__dict__["layout"].__get__
nbytes = _TB.__dict__["nbytes"].__get__
is_meta = _TB.__dict__["is_meta"].__get__
is_cpu = _TB.__dict__["is_cpu"].__get__
is_nested = _TB.__dict__["is_nested"].__get__
is_quantized = _TB.__dict__["is_quantized"].__get__
requires_grad = _TB.__dict__["requires_grad"].__get__
is_leaf = _TB.__dict__["is_leaf"].__get__
retains_grad = _TB.__dict__["retains_grad"].__get__
grad = _TB.__dict__["_grad"].__get__
grad_fn = _TB.__dict__["grad_fn"].__get__
base = _TB.__dict__["_base"].__get__
dim = _TB.dim
storage = _TB.untyped_storage
use_count = _TB._use_count
is_pinned = _TB.is_pinned


def is_tensor(value: object) -> bool:
    """Whether ``value`` is a tensor by its real type (a weak proxy or a lying ``__class__``
    answers ``isinstance`` for its referent or its claim; its type does not)."""
    return issubclass(type(value), _TB)
