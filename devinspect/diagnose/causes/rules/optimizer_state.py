"""An optimizer's state off its parameters' device: each state tensor moves to its own
parameter's device (never all to one)."""

from __future__ import annotations

import dataclasses

from ....model import Cause
from ... import fix_builders
from ..context import CauseContext


def cause(context: CauseContext) -> Cause | None:
    operand = context.operand.operand
    if operand.source != "optimizer_state" or not operand.name:
        return None
    return Cause(fix=dataclasses.replace(fix_builders.optimizer_state(operand.name.split(".state[", 1)[0]), rerun=True))
