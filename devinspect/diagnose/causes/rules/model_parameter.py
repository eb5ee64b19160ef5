"""A parameter, buffer or gradient of a model off the target: the model (or the parts of it off
the target) moves, and the line that made the part or the model gets ``.to()`` so it does not come
back; a model dispatched over devices on purpose is dispatched again instead."""

from __future__ import annotations

import dataclasses
from typing import Any

from ....collect import object_at, root_of, type_name, user_code
from ....model import Cause, Fix
from ... import fix_builders
from .. import creation_sites, device_names, made_in_code
from ..context import CauseContext, FailedCall, NamedOperand
from ..fix_writing import model_of, movable


def cause(context: CauseContext) -> Cause | None:
    if context.operand.operand.source not in ("parameter", "buffer", "gradient"):
        return None
    return model_parts(context.call, context.operand) or Cause()


def model_parts(call: FailedCall, n: NamedOperand) -> Cause | None:
    """The model ``n`` belongs to, or its parts off the target, moved (with the lines that made them)."""
    model = model_of(call, n)
    if model is None:
        return None
    target = call.target
    if model.deliberate_split and model.off_map:
        # Not a whole move: its inputs stay where its first part is (the hooks move them).
        return Cause(fix=dataclasses.replace(fix_builders.redispatch(model.name, model.off_map, offloaded=model.offloaded > 0),
                                             rerun=True))
    parts = fix_builders.parts_off(model, target)
    # Modules it keeps in a plain list or dict attribute are not registered: its .to() leaves them.
    held = made_in_code.held_modules(call.index.result_under(model.name).modules, model, target)
    if held:
        parts = list(dict.fromkeys([*(parts or ([model.name] if model.parameters or model.buffers else [])),
                                    *(m.name for m in held)]))
    whole = () if model.deliberate_split else (model.name,)  # wholly on the target once this is done
    fix = _move(call, model, parts)
    # The line that made the part (model.head = nn.Linear(...)) or the model gets .to(): it does
    # not come back when those cells run again.
    edits = [origin.edit for origin in (_module_origin(call, p) for p in (parts or [model.name]))
             if origin is not None and origin.edit is not None and not held]
    edits += made_in_code.held_module_edits(object_at(call.namespace, model.name), model.name, held,
                                            call.namespace, target)
    if held and edits and _made_in_failed_cell(call, model.name):
        # The cell makes the model again before it fails: only its class's edited lines help.
        return Cause(fix=Fix(summary=f"make {', '.join(m.name for m in held)} on {target} where {model.name}'s class "
                                     "makes them", edits=tuple(dict.fromkeys(edits)),
                             note=made_in_code.rerun_note(tuple(edits), call.cell_file)), whole_moves=whole)
    return Cause(fix=dataclasses.replace(fix, edits=tuple(dict.fromkeys(edits)), rerun=True), whole_moves=whole)


def _made_in_failed_cell(call: FailedCall, name: str) -> bool:
    """Whether the failed cell binds ``name`` before its failing line (running it again makes it anew)."""
    current = user_code.current_cell(call.cell_file) if call.cell_file else None
    statement = user_code.assignment_in_session(name, current, call.failing_line) if current else None
    return statement is not None and statement.cell == current.number


def _module_origin(call: FailedCall, path: str) -> Cause | None:
    device_expr = device_names.device_expression(call.namespace, call.target)
    for name in (path, root_of(path)):
        if not movable(call, name):
            continue  # models[2]'s list: .to() on the line that made the list would raise
        made = type_name(type(object_at(call.namespace, name)))
        origin = creation_sites.assigned_in_session(name, call.cell, call.failing_line, [], device_expr, wrap=True,
                                                 made=made)
        if origin is not None:
            return origin
    return None


def _move(call: FailedCall, model: Any, parts: list[str] | None = None) -> Fix:
    """Move a model (or its ``parts``). Where the move swaps tensors (a Python device backend,
    DTensor, the swap flag), the failed call's frames still hold some of its parameters:
    they become the traceback, which the fix releases first, with any graph that saved them."""
    from ...findings import graph_holder_names, move_fix, optimizers_with_state_under

    target = call.target
    holders = call.index.holders
    swap_flag = bool(holders.options.get("swap_flag"))
    names = parts or [model.name]
    optimizers = tuple(dict.fromkeys(o for p in names for o in optimizers_with_state_under(holders, p)))
    part_of = model.name if parts else None
    swapped = [r for r in holders.records if r.kind == "parameter"
               and r.name.startswith(tuple(f"{n}{sep}" for n in names for sep in ".["))]
    # Buffers are reassigned, never swapped: a module with no parameters is never refused
    # (one with any is: every parameter is swapped, those already on the target too).
    if not swapped or all(fix_builders.moves_in_place(d, target, swap_flag) for d in model.devices if d != target):
        if parts is None:
            return move_fix(holders, model, target)
        return fix_builders.move_module(names, target, optimizers=optimizers, part_of=part_of)
    return fix_builders.move_module(names, target, release=graph_holder_names(holders), release_traceback=True,
                             optimizers=optimizers, part_of=part_of)
