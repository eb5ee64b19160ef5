"""A plain tensor attribute of a module (not a buffer: the module's ``.to()`` leaves it), or a
tensor in a list or dict attribute: registered as a buffer, or the container moved."""

from __future__ import annotations

import dataclasses

from ....collect import object_at, type_is_one_of, type_name
from ....model import Cause
from ... import fix_builders
from ..context import CauseContext


def cause(context: CauseContext) -> Cause | None:
    n, call = context.operand, context.call
    if n.operand.source != "attribute":
        return None
    name = n.operand.name or ""
    for module in call.index.holders.modules:
        for u in module.unregistered:
            if name == u.name:
                return Cause(fix=dataclasses.replace(fix_builders.register_buffers(u, module.unregistered, call.target),
                                                     rerun=True))
            if name.startswith((u.name + "[", u.name + ".")):
                container = object_at(call.namespace, u.name)
                kind = type_name(type(container)) if type_is_one_of(container, (list, tuple, dict)) else "list"
                return Cause(fix=dataclasses.replace(fix_builders.move_container(u.name, call.target, kind, attribute_of=u),
                                                     rerun=True))
    return Cause()
