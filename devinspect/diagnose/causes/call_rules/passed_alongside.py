"""The other inputs of a call that passed a tensor the fix moves (labels after ids): they would
fail next, so each is fixed where it is made too."""

from __future__ import annotations

from ....collect import line_names
from ....model import Cause
from ..context import CauseContext
from .passed_tensors import passed_tensors


def cause(context: CauseContext) -> Cause | None:
    call = context.call
    moved = {n.operand.name for n in call.misplaced if n.operand.source == "namespace" and n.operand.name} \
        | context.covered.passed
    if not moved:
        return None
    return passed_tensors(context, lambda node: bool(moved & line_names.call_arguments(node)))
