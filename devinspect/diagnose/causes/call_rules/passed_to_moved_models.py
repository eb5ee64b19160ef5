"""Tensors the user's lines pass to a model that the fix leaves wholly on the target: they would
fail next, at its first layer."""

from __future__ import annotations

import ast

from ....collect import root_of
from ....model import Cause
from ..context import CauseContext
from .passed_tensors import passed_tensors


def cause(context: CauseContext) -> Cause | None:
    moved = context.covered.whole_moves
    if not moved:
        return None
    return passed_tensors(context, lambda node: root_of(ast.unparse(node.func)) in moved)
