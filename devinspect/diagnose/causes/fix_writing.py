"""What the cause rules share to write a fix: an edit of the user's line as a fix (made by Apply
fix when it is in the failed cell), the edit of a line that makes a tensor, the package a failed
call ran in, the model an operand belongs to, and the plain tensors under a name."""

from __future__ import annotations

import ast
from typing import Any

import torch

from ...collect import locations, object_at, type_is_one_of
from ...model import Cause, EditCell, Fix, SourceLine, is_under
from . import creation_sites, device_names, made_in_code
from .context import FailedCall, NamedOperand

_T = torch.Tensor
_Module = torch.nn.Module


def edit_fix(call: FailedCall, origin: Cause, summary: str) -> Fix:
    """A fix that is an edit of the user's line: made by Apply fix when it is in the failed cell."""
    edits = origin.edits
    in_cell = len(edits) == 1 and edits[0].where.cell is not None and edits[0].where.file == call.cell_file
    action = EditCell(edits[0]) if in_cell else None
    return Fix(summary=summary, edits=edits, action=action, rerun=in_cell,
               note=None if in_cell else made_in_code.rerun_note(edits, call.cell_file))


def line_fix(call: FailedCall, where: SourceLine, frame: Any) -> Fix | None:
    """The line ``where`` makes the tensor: its factory gets the device."""
    in_cell = where.file == call.cell_file
    here = frame is not None and where.file == frame.f_code.co_filename
    # A file's line sees its module's names, not the notebook's: no device variable of the namespace.
    namespace = call.namespace if where.cell is not None else {}
    device_expr = device_names.device_expression(namespace, call.target, None if in_cell else frame,
                                                 prefer=call.operand_locals(frame), line=where.line if here else None)
    origin = creation_sites.line_origin(where, device_expr, in_cell)
    if origin is None:
        return None
    return edit_fix(call, origin, f"make the tensor of {where.label} on {call.target}")


def library(call: FailedCall) -> str:
    """The package the user's innermost line called into, whose code then failed (``transformers``
    for a ``generate`` that ended in ``F.conv1d``), or ``""``."""
    from ...collect import call_stack

    package = ""
    for f in call_stack.frames_from(call.failure.stack):
        if locations.is_user_code(f.f_code):
            return package
        package = package if locations.is_own_file(f.f_code.co_filename) else (
            locations.package_of(f.f_code.co_filename) or package)
    return package


def model_of(call: FailedCall, n: NamedOperand) -> Any:
    """The summary of the model whose parameter, buffer, gradient or attribute ``n`` is."""
    from ..findings import enclosing_module, root_module

    if n.operand.name is None or n.operand.source not in ("parameter", "buffer", "gradient", "attribute"):
        return None
    under = call.index.result_under(n.operand.name)
    return enclosing_module(under, root_module(under, n.operand.name))


def movable(call: FailedCall, name: str) -> bool:
    """Whether ``name`` is a tensor or a module: what ``.to()`` on the line that made it moves."""
    return issubclass(type(object_at(call.namespace, name)), (_T, _Module))


def plain_tensors_under(call: FailedCall, root: str) -> list[Any]:
    """The records of the plain tensors below ``root`` (each memory once, none that needs a
    gradient): what one fix moves line by line when ``root`` is a cache, a config or a batch.
    None inside a tuple: ``pair[0] = …`` cannot be written (its tuple moves whole instead)."""
    return [r for r in call.index.result_under(root).records if is_under(r.name, root) and r.kind == "tensor"
            and r.alias_of is None and not r.requires_grad and not _in_a_tuple(call, r.name)]


def _in_a_tuple(call: FailedCall, name: str) -> bool:
    try:
        node = ast.parse(name, mode="eval").body
    except SyntaxError:
        return False
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        node = node.value
        if type_is_one_of(object_at(call.namespace, ast.unparse(node)), (tuple,)):
            return True
    return False
