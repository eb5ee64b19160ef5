"""A tensor the check saw being made by a factory (a temporary, or made in library code from the
user's line): the line that made it gets the device; where the factory followed another tensor's
device (``device=anchors.device``), that tensor is the cause."""

from __future__ import annotations

import dataclasses

from ....model import Cause
from .. import value_flow
from ..context import CauseContext, NamedOperand
from ..fix_writing import line_fix
from .local_of_user_function import local_cause


def cause(context: CauseContext) -> Cause | None:
    n, call = context.operand, context.call
    if n.created is None:
        return None
    # device=device, with device = anchors.device: the tensor it reads the device of is the cause
    read = value_flow.device_read_from(n.created.where, list(call.frames), n.device) if n.created.device_given else None
    if read:
        named = NamedOperand(dataclasses.replace(n.operand, name=read[0]), None, frame=read[1], local=read[0])
        found = local_cause(context.about(named))
        if found.fix is not None:
            return found
    return Cause(fix=line_fix(call, n.created.where, n.frame))
