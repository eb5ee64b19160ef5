"""How to make an optimizer or a learning-rate scheduler again: its constructor's arguments
that differ from the class's defaults, as Python literals or expressions, read statically."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ..model.records import OptimizerSummary
from .names import literal_value
from .static import str_items, type_module, type_name

#: Where PyTorch's learning-rate schedulers live.
SCHEDULER_MODULES = ("torch.optim.lr_scheduler", "torch.optim.swa_utils")

#: Constructor arguments that a rebuilt scheduler never takes over.
_FRESH = frozenset({"self", "optimizer", "last_epoch", "verbose"})


def _signature(cls: type) -> inspect.Signature | None:
    """The constructor's signature of a torch class (reading it runs no user code), or None."""
    try:
        return inspect.signature(cls.__init__)
    except (TypeError, ValueError):
        return None


def scheduler_kwargs(name: str, cls: type, d: dict) -> tuple[tuple[str, str], ...] | None:
    """Constructor arguments to make a PyTorch scheduler of ``cls`` again for another optimizer:
    literals where its instance dict holds one, else the expression reading it from the old
    scheduler (``sched.lr_lambdas[0]``); None when a required argument cannot be found."""
    if not type_module(cls).startswith(SCHEDULER_MODULES):
        return None
    signature = _signature(cls)
    if signature is None:
        return None
    out = []
    for pname, parameter in signature.parameters.items():
        if pname in _FRESH or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        stored = pname if pname in d else f"{pname}s" if f"{pname}s" in d else None
        if stored is None:
            if parameter.default is inspect.Parameter.empty:
                return None
            continue
        value = d[stored]
        text = literal_value(value)
        if text is not None and parameter.default is not inspect.Parameter.empty and \
                _same_literal(value, parameter.default):
            continue
        if text is None:
            # lr_lambda is kept as lr_lambdas, one per parameter group
            one = stored != pname and type(value) is list and list.__len__(value) == 1
            text = f"{name}.{stored}[0]" if one else f"{name}.{stored}"
        out.append((pname, text))
    return tuple(out)


def optimizer_summary(opt: Any, name: str, d: dict[str, Any], groups: int, parameters: int, orphans: int,
                       orphan_shapes: list) -> OptimizerSummary:
    cls = type(opt)
    tname = type_name(cls)
    class_path = f"torch.optim.{tname}" if getattr(torch.optim, tname, None) is cls else None
    return OptimizerSummary(
        name=name, type_name=tname, class_path=class_path, parameters=parameters, groups=groups, orphans=orphans,
        orphan_shapes=tuple(tuple(s) for s in orphan_shapes),
        rebuild_kwargs=_rebuild_kwargs(cls, d.get("defaults")) if class_path else None,
    )


def _rebuild_kwargs(cls: type, defaults: Any) -> tuple[tuple[str, str], ...] | None:
    """Constructor arguments (as literals) whose values differ from a torch optimizer's defaults.

    None when one cannot be written as a literal (a tensor learning rate, say).
    """
    if not issubclass(type(defaults), dict):
        return None
    signature = _signature(cls)
    if signature is None:
        return None
    out = []
    values = dict(str_items(defaults))
    for pname, parameter in signature.parameters.items():
        if pname in ("self", "params") or pname not in values:
            continue
        value = values[pname]
        if parameter.default is not inspect.Parameter.empty and _same_literal(value, parameter.default):
            continue
        text = literal_value(value)
        if text is None:
            return None
        out.append((pname, text))
    return tuple(out)


def _same_literal(a: Any, b: Any) -> bool:
    return type(a) is type(b) and literal_value(a) == literal_value(b) and literal_value(a) is not None
