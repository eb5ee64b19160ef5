"""No operand has a cause of its own: tensors library code makes with a factory that has no
``device=`` follow the default device, so the user's line that calls it runs with the target as
the default (an edit of that line; the library is never the place of a fix). Else the fix says
that the library made it, from what."""

from __future__ import annotations

import dataclasses

from ....model import Cause
from ... import fix_builders
from .. import creation_sites, device_names
from ..context import CauseContext
from ..fix_writing import edit_fix, library


def cause(context: CauseContext) -> Cause | None:
    call, target = context.call, context.target
    misplaced = call.misplaced
    made = [n.created for n in misplaced]
    frame = call.inner
    package = library(call) or "library code"
    if frame is None or not made or any(c is None or c.device_given for c in made):
        return Cause(fix=fix_builders.made_inside_library(package, misplaced[0].device, target))
    where = call.source(frame)
    in_cell = where.file == call.cell_file
    device_expr = device_names.device_expression(call.namespace, target, None if in_cell else frame, line=where.line)
    edit = creation_sites.default_device_edit(where, device_expr)
    if edit is None:
        return Cause(fix=fix_builders.made_inside_library(package, misplaced[0].device, target))
    factories = ", ".join(sorted({f"torch.{c.factory}" for c in made}))
    fix = edit_fix(call, Cause(where, "factory", edit, in_cell), f"run {where.label} with {target} as the default device")
    note = (f"{package} makes a tensor by {factories} without device=, so on the default device: under "
            f"`with torch.device(...)` it is made on {target}")
    return Cause(where, "factory", edit, in_cell, fix=dataclasses.replace(fix, note=" ".join(filter(None, [note, fix.note]))))
