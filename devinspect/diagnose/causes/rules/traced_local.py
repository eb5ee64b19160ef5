"""A local of a function torch.compile traced: the line that made it, read from the source."""

from __future__ import annotations

from ....model import Cause
from .. import creation_sites, device_names
from ..context import CauseContext
from ..fix_writing import edit_fix


def cause(context: CauseContext) -> Cause | None:
    n, call = context.operand, context.call
    if n.operand.source != "traced":
        return None
    traced = n.value
    if not traced.name.isidentifier():
        return Cause()
    anchor = next((o.local for o in call.operands if o.operand.source == "traced" and o.device == call.target
                   and o.local and o.local.isidentifier()), None)
    device_expr = f"{anchor}.device" if anchor else device_names.device_expression(call.namespace, call.target)
    origin = creation_sites.local_origin_at(traced.filename, traced.function, traced.lineno, traced.name, device_expr)
    if origin is None or origin.edit is None:
        return Cause()
    return Cause(fix=edit_fix(call, origin, f"create {traced.name} on the device of the other inputs, in "
                                            f"{origin.edit.context or 'your code'}"))
