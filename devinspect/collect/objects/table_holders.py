"""Objects of the user's own classes, not modules, that hold tensors: a diffusion sampler's or a
scheduler's tables of coefficients, a cache. ``.to()`` of a model never reaches them; what their
class's source says about each table (moved or made again as it runs, or made once, and where the
other tables get their device) is read statically, from source text and instance dicts only."""

from __future__ import annotations

import types
from typing import Any, Iterable

import torch

from ...model import TableHolder
from ..code import locations
from .class_source import assigned_while_running, library_of, made_with_device, moves_itself
from .static_getters import FUNCTION_CODE, instance_dict, mro, plain_class_dict, type_name

#: Kinds of objects that are never a plain holder of tables (walked and judged by their own rules).
_NOT_HOLDERS = (torch.nn.Module, torch.Tensor, torch.optim.Optimizer, type, types.ModuleType, types.FunctionType,
                types.MethodType, list, tuple, dict, set, frozenset, str, bytes)


def table_holders(items: Iterable[tuple[str, Any]]) -> list[TableHolder]:
    """The holders among the namespace's ``(name, value)`` items, each with what its class says."""
    out = []
    for name, value in items:
        cls = type(value)
        if issubclass(cls, _NOT_HOLDERS) or not _users_class(cls):
            continue
        attrs = [a for a, v in dict.items(instance_dict(value)) if issubclass(type(v), torch.Tensor)]
        if not attrs:
            continue
        try:
            placed = tuple(a for a in attrs if assigned_while_running(cls, a) or moves_itself(cls, a))
            made = tuple((a, *m) for a in attrs if (m := made_with_device(cls, a)) is not None)
        except Exception:  # a source we cannot read says nothing
            continue
        out.append(TableHolder(name, type_name(cls), placed, made))
    return out


def _users_class(cls: type) -> bool:
    """A class of the user's own code: its methods are in a cell or a file of theirs."""
    if library_of(cls):
        return False
    for klass in mro(cls):
        if klass is object:
            break
        if any(type(v) is types.FunctionType and locations.is_user_code(FUNCTION_CODE(v))
               for v in dict.values(plain_class_dict(klass))):
            return True
    return False
