"""Walks over the same objects as the scan that answer one question at a fraction of its cost.

Explaining a failed cell asks two questions of the names a failing call does not use:
could one of them name this operand, and which of them hold an autograd graph or an
optimizer's state (what moving a model must release or carry along)? Neither needs a
record for each plain tensor, and a large namespace is mostly plain tensors in lists
and dicts. Both walks follow every edge the scan follows, in its order, and take a
list, tuple or dict whose items are all plain tensors that need no gradient in one
step: the container is kept, and asked about an operand only when one is looked for.
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import torch

from ...runtime import tensor_getters
from ..objects import dict_values, sequence_items
from .walk import ScanOptions, Walker

_Tensor = torch.Tensor
_Parameter = torch.nn.Parameter


class _WholeContainerWalker(Walker):
    records_runs = False

    def __init__(self, options: ScanOptions):
        super().__init__(options)
        #: The items of each container taken in whole, kept to be asked later (asking once
        #: per operand costs less than noting a hundred thousand ids).
        self._whole_items: list[Any] = []

    def took(self, t: Any) -> bool:
        """Whether ``t`` itself is an item of a container taken in whole."""
        return any(any(map(operator.is_, items, itertools.repeat(t))) for items in self._whole_items)

    def takes_whole(self, o: Any, vt: type, name: str, owner: str | None) -> bool:
        # A list's or dict's items are copied: a thread may change it while the walk goes on.
        if vt is tuple:
            items = o
        elif vt is list:
            items = sequence_items(o, list)
        elif vt is dict:
            if any(map(operator.is_, map(type, dict.keys(o)), itertools.repeat(_Tensor))):
                return False  # a tensor key is named by its position: the full step names it
            items = dict_values(o)
        else:
            return False
        if len(items) == 0 or len(items) > self.options.max_items:
            return False
        # Only exact tensors (a subclass may wrap others, and a Parameter in a list is a record of
        # its own kind), compared by identity: hashing a class would run its metaclass's __hash__.
        if any(map(operator.is_not, map(type, items), itertools.repeat(_Tensor))) or any(map(tensor_getters.requires_grad, items)):
            return False  # another object, or a tensor with a gradient to follow: item by item
        self._whole_items.append(items)
        return True


class ReachWalker(_WholeContainerWalker):
    """Notes which tensors the scan would meet: no facts read, no records made.

    It follows every edge the full walk follows (the same dispatch; a tensor's gradient
    too), from a fresh start, so a tensor it does not meet, and whose memory no other
    tensor shares, is one the full walk would not name either: the answer to "could any
    of these roots name this tensor?" at a fraction of the cost of naming.
    """

    def _tensor(self, t: Any, name: str, root: str, kind: str = "tensor", owner: str | None = None,
                param: str | None = None, note: str | None = None, facts: tuple | None = None) -> None:
        tid = id(t)
        if tid in self._tensor_first:
            return
        self._tensor_first[tid] = name
        if tensor_getters.requires_grad(t) and kind != "gradient" and (tensor_getters.is_leaf(t) or tensor_getters.retains_grad(t)):
            grad = tensor_getters.grad(t)
            if grad is not None:
                self._tensor(grad, f"{name}.grad", root, "gradient", owner, param=name)

    def may_name(self, t: Any) -> bool:
        """Whether the full walk over the same roots could name ``t``: it met ``t`` itself, or
        ``t``'s memory has another owner (a view, a ``.detach()``, a wrapper's inner tensor,
        which the full walk names ``t`` after). Unusual tensors are left to the full walk."""
        if id(t) in self._tensor_first or self.took(t):
            return True
        cls = type(t)
        if not ((cls is _Tensor or cls is _Parameter) and tensor_getters.layout(t) is torch.strided and not tensor_getters.is_nested(t)):
            return True
        if tensor_getters.is_meta(t):
            return False  # no memory: only the tensor itself is named
        # Owners of the memory: t, the storage object made to ask, and anything else.
        return torch._C._storage_Use_Count(tensor_getters.storage(t)._cdata) > 2


class HolderWalker(_WholeContainerWalker):
    """The scan less its plain tensors: modules with every parameter, buffer, gradient and
    attribute, optimizers with their state, and each tensor that needs a gradient (a graph's holder),
    under the names the scan gives them. A plain tensor (no gradient, of the base class)
    outside modules and optimizers is only noted, so the records answer "what must a move
    release or carry along" and not "what is on which device"."""

    def takes_whole(self, o: Any, vt: type, name: str, owner: str | None) -> bool:
        # A module's attributes make its summary: each is recorded.
        return owner is None and super().takes_whole(o, vt, name, owner)

    def _tensor(self, t: Any, name: str, root: str, kind: str = "tensor", owner: str | None = None,
                param: str | None = None, note: str | None = None, facts: tuple | None = None) -> None:
        if kind == "tensor" and type(t) is _Tensor and not tensor_getters.requires_grad(t):
            self._tensor_first.setdefault(id(t), name)
            return
        super()._tensor(t, name, root, kind, owner, param, note, facts)
