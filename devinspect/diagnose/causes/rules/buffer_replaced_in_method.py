"""A buffer that a method other than ``__init__`` replaces (``self.scale = torch.ones(8)`` in
``forward``): it gets its device there on every call, so that line is the fix."""

from __future__ import annotations

import dataclasses

from ....collect import MISSING, locations, object_at
from ....model import Cause
from .. import creation_sites, device_names, maker_calls
from ..context import CauseContext
from ..fix_writing import edit_fix


def cause(context: CauseContext) -> Cause | None:
    n, call = context.operand, context.call
    if n.operand.source != "buffer":
        return None
    name, owner = n.operand.name or "", n.record.owner if n.record is not None else None
    if owner is None:
        return None
    module = object_at(call.namespace, owner) if owner else MISSING
    if module is MISSING:
        return None
    attr = name.rsplit(".", 1)[-1]
    statements = creation_sites.assignments_in_methods(type(module), attr)
    if not statements:
        return None
    statement = statements[0]
    frame = next((f for f in call.frames if f.f_code.co_filename == statement.filename
                  and f.f_code.co_name == statement.function), None)
    device_expr = device_names.device_expression(call.namespace, call.target, frame, prefer=call.operand_locals(frame),
                                                 line=statement.line)
    edit = maker_calls.replacing_edit(statement, frame, device_expr)
    if edit is None:
        return None
    where = locations.source_line(statement.filename, statement.line, statement.function)
    fix = edit_fix(call, Cause(where, "factory", edit),
                   f"make {attr} on {call.target} where {statement.function} replaces it")
    note = (f"{statement.function} replaces the buffer {name} with a new tensor on every call, so "
            f"moving it would not last")
    return Cause(where, "factory", edit, fix=dataclasses.replace(fix, note="; ".join(filter(None, [note, fix.note]))),
                 replaced=(name,))
