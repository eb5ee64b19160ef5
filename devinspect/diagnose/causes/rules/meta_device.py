"""An operand on the ``meta`` device: it holds no data to move. A model on meta gets its storage
made and initialised; a variable on meta is made again on the target, on the line that makes it."""

from __future__ import annotations

import dataclasses

from ....collect import root_of
from ....model import Cause, Fix
from ... import fix_builders
from .. import creation_sites, device_names
from ..context import CauseContext, FailedCall, NamedOperand
from ..fix_writing import edit_fix, model_of


def cause(context: CauseContext) -> Cause | None:
    n = context.operand
    if n.device != "meta":
        return None
    found = _model_on_meta(context.call, n)
    if found is None and n.operand.source == "namespace" and n.record is not None:
        return Cause(fix=variable_fix(context.call, n))
    return found or Cause()


def _model_on_meta(call: FailedCall, n: NamedOperand) -> Cause | None:
    from ...findings import graph_holder_names, unsaved_meta_buffers

    model = model_of(call, n)
    if model is None:
        return None
    target = call.target
    whole = all(d == "meta" for d in model.devices)
    fix = fix_builders.materialise(model.name, target if whole else None, max(1, model.unmaterialised),
                            initialiser=model.initialiser,
                            release=graph_holder_names(call.index.holders), release_traceback=True,
                            unsaved=unsaved_meta_buffers(call.index.result_under(model.name), model.name),
                            real_device=target)
    return Cause(fix=dataclasses.replace(fix, rerun=fix.code is not None), whole_moves=(model.name,) if whole else ())


def variable_fix(call: FailedCall, n: NamedOperand) -> Fix:
    """A variable on the meta device holds no data to move: it is made again on the target, by an
    edit of the line that makes it when that line is known."""
    target = call.target
    root = root_of(n.record.name)
    device_expr = device_names.device_expression(call.namespace, target)
    origin = creation_sites.assigned_in_session(root, call.cell, call.failing_line, [], device_expr)
    if origin is not None and origin.edit is not None:
        return edit_fix(call, origin, f"make {root} on {target} where it is made (on meta it holds no data to move)")
    return Fix(summary=f"make {root} again on {target}",
               note=f"{root} is on the meta device and holds no data to move: create it on {target}")
