"""An operand made inside library code from what the user passed in: the tensors the user's lines
pass are the cause, each fixed where it is made."""

from __future__ import annotations

from ....model import Cause
from ..context import CauseContext
from .passed_tensors import passed_tensors


def cause(context: CauseContext) -> Cause | None:
    if not any(n.operand.source == "unknown" for n in context.call.misplaced):
        return None
    return passed_tensors(context, lambda node: True)
