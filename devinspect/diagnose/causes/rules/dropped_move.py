"""An operand whose move was dropped: ``x.to(dev)`` as a statement, its copy thrown away. That
line is the cause (``x = x.to(dev)``)."""

from __future__ import annotations

from ....model import Cause
from ..context import CauseContext
from ..dropped_moves import dropped_move_fix


def cause(context: CauseContext) -> Cause | None:
    n, call = context.operand, context.call
    name = n.record.name if n.record is not None and n.operand.source == "namespace" else None
    fix = dropped_move_fix(call.namespace, n.value, name, n.device, call.target, list(call.frames), call.cell,
                           lambda f: call.source(f).line)
    return Cause(fix=fix) if fix is not None else None
