"""An item of a namespace list or tuple that a comprehension on the failing line walks (or of
one the line itself makes): the container moves, keeping its type, or that line is edited. The
last rule: what no other rule recognised."""

from __future__ import annotations

from ....model import Cause
from ..containers import comprehension_fix
from ..context import CauseContext


def cause(context: CauseContext) -> Cause | None:
    return Cause(fix=comprehension_fix(context.call, context.operand))
