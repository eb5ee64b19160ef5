"""How to make an optimizer or a learning-rate scheduler again: its constructor's arguments
that differ from the class's defaults, as Python literals or expressions, read statically."""

from __future__ import annotations

import inspect
from typing import Any

import torch

from ...model import OptimizerSummary
from ..namespace import literal_value
from .static_getters import instance_dict, str_items, type_module, type_name

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
    # One scheduler by name, because no rule exists: OneCycleLR alone keeps none of its arguments,
    # only the phases and rates it computed from them, which the recipe below reads back.
    if type_name(cls) == "OneCycleLR":
        return _one_cycle_kwargs(d)
    signature = _signature(cls)
    if signature is None:
        return None
    out = []
    for pname, parameter in signature.parameters.items():
        if pname in _FRESH or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        stored = pname if pname in d else f"{pname}s" if f"{pname}s" in d else None
        if stored is None:
            # Not kept as given (CyclicLR's step sizes): left out, the default would change the schedule.
            return None
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


#: OneCycleLR's defaults, for the arguments it keeps only in the phases and groups it computes.
_ONE_CYCLE_DEFAULTS = {"pct_start": 0.3, "anneal_strategy": "cos", "div_factor": 25.0, "final_div_factor": 1e4,
                       "three_phase": False, "cycle_momentum": True, "base_momentum": 0.85, "max_momentum": 0.95}


def _one_cycle_kwargs(d: dict) -> tuple[tuple[str, str], ...] | None:
    """OneCycleLR keeps its arguments only as what it computed from them (phase ends, each
    group's initial, peak and final rate): each is recovered as the shortest decimal that gives
    back exactly what was computed, or None when one cannot be."""
    total, phases, groups = d.get("total_steps"), d.get("_schedule_phases"), _groups(d.get("optimizer"))
    if type(total) is not int or type(phases) is not list or not phases or not groups:
        return None
    first = phases[0] if type(phases[0]) is dict else {}
    end, peak = dict.get(first, "end_step"), [g.get("max_lr") for g in groups]
    start, low = [g.get("initial_lr") for g in groups], [g.get("min_lr") for g in groups]
    if type(end) is not float or not all(type(v) is float for v in (*peak, *start, *low)) or 0.0 in start + low:
        return None
    given = {
        "pct_start": _decimal_giving(lambda p: float(p * total) - 1 == end, (end + 1) / total),
        "anneal_strategy": d.get("_anneal_func_type"),
        "div_factor": _decimal_giving(lambda v: all(m / v == i for m, i in zip(peak, start)), peak[0] / start[0]),
        "final_div_factor": _decimal_giving(lambda v: all(i / v == lo for i, lo in zip(start, low)), start[0] / low[0]),
        "three_phase": list.__len__(phases) == 3,
        "cycle_momentum": d.get("cycle_momentum"),
    }
    if d.get("cycle_momentum") is True:
        given["base_momentum"] = _one_value([g.get("base_momentum") for g in groups])
        given["max_momentum"] = _one_value([g.get("max_momentum") for g in groups])
    if any(v is None for v in given.values()) or given["anneal_strategy"] not in ("cos", "linear"):
        return None
    out = [("max_lr", literal_value(peak[0]) if len(set(peak)) == 1 else literal_value(peak)), ("total_steps", str(total))]
    out += [(k, literal_value(v)) for k, v in given.items() if not _same_literal(v, _ONE_CYCLE_DEFAULTS[k])]
    return tuple(out) if all(text is not None for _, text in out) else None


def _groups(optimizer: Any) -> list[dict]:
    groups = instance_dict(optimizer).get("param_groups") if optimizer is not None else None
    if type(groups) is not list:
        return []
    return [dict(str_items(g)) for g in groups if type(g) is dict]


def _one_value(values: list) -> Any:
    """The value every group holds (a literal), else None."""
    return values[0] if values and all(type(v) is float and v == values[0] for v in values) else None


def _decimal_giving(gives: Any, near: float) -> float | None:
    """The shortest decimal close to ``near`` for which ``gives`` holds (0.3, not 0.30000000000000004)."""
    for digits in range(1, 18):
        candidate = round(near, digits)
        if gives(candidate):
            return candidate
    return None


def optimizer_summary(opt: Any, name: str, d: dict[str, Any], groups: int, parameters: int, orphans: int,
                       orphan_shapes: list, held: list) -> OptimizerSummary:
    cls = type(opt)
    tname = type_name(cls)
    class_path = f"torch.optim.{tname}" if getattr(torch.optim, tname, None) is cls else None
    return OptimizerSummary(
        name=name, type_name=tname, class_path=class_path, parameters=parameters, groups=groups, orphans=orphans,
        orphan_shapes=tuple(tuple(s) for s in orphan_shapes), held=tuple(held),
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
