"""A tensor on the wrong device because a move of it was dropped: ``x.to(dev)`` as a statement.

``Tensor.to`` returns a moved copy and leaves the tensor where it was (``Module.to`` moves a
module in place, which is why the tensor form is written so). When an operand of a failed call
(or a tensor ``%devices`` lists) is on another device than a statement of the user's code moved
it to, that statement is the cause: its line is named and edited to keep the copy
(``x = x.to(dev)``). The statement is looked for where the tensor is known by name: in the
functions on the failing stack (a local bound to the operand), then in the session's cells (a
namespace variable), each time after the last line that binds the name.
"""

from __future__ import annotations

import ast
import types
from typing import Any, Iterator

import torch

from ...collect import (
    Dropped,
    device_of,
    dropped_before,
    dropped_in_session,
    line_of,
    locations,
    object_at,
    user_code,
    value_in_frame,
)
from ...model import EditCell, Finding, Fix, SourceEdit
from . import line_edits

_WHY = "Tensor.to returns a moved copy and leaves the tensor where it is (Module.to moves a module in place)"


def kept_edit(dropped: Dropped) -> Any:
    """The edit that keeps the moved copy: ``x.to(dev)`` → ``x = x.to(dev)``."""
    statement = dropped.statement
    written = line_edits.statement_at(statement.filename, statement.line, statement.function,
                                      statement.node.end_lineno)
    if written is None or not isinstance(written.node, ast.Expr):
        return None
    edits = line_edits.Changes(written).prepend(written.node, f"{dropped.target} = ").edits()
    return edits[0] if edits and len(edits) == 1 else None


def _at_top(dropped: Dropped) -> bool:
    """Whether the move is a statement of its cell's own (not in a loop, a branch, a function)."""
    tree = user_code.parse(dropped.statement.filename)
    return dropped.statement.function in ("", "<module>") and tree is not None and any(
        node.lineno == dropped.statement.line and isinstance(node, ast.Expr) for node in tree.body)


def _fix(dropped: Dropped, device: str, target: str, cell_file: str | None, namespace_code: bool) -> Fix | None:
    edit = kept_edit(dropped)
    if edit is None:
        return None
    where = line_of(dropped)
    in_cell = where.cell is not None and where.file == cell_file
    code = f"{dropped.target} = {dropped.written}" if namespace_code and not in_cell else None
    again = None if in_cell or where.cell is None else f"Then run Cell In[{where.cell}] again, and the cells after it."
    summary = (f"{dropped.written} at {where.where} returns a moved copy, which is dropped: {dropped.target} "
               f"stays on {device}; keep the copy, {dropped.target} = {dropped.written}")
    return Fix(summary=summary, code=code, edits=(edit,), action=EditCell(edit) if in_cell else None,
               note=" ".join(filter(None, [_WHY + ".", again])), rerun=in_cell or code is not None)


def _locals_bound_to(frame: types.FrameType, value: Any) -> Iterator[str]:
    for name, held in dict.items(locations.frame_locals(frame)):
        if held is value and type(name) is str and name.isidentifier():
            yield name


def dropped_move_fix(namespace: Any, value: Any, name: str | None, device: str, target: str,
                     frames: list[types.FrameType], cell: types.FrameType | None, line_of_frame: Any) -> Fix | None:
    """The fix for an operand (``value``, the namespace variable ``name`` when it is one) on
    ``device`` while the call needed ``target``, when a dropped move to ``target`` put it there."""
    cell_file = cell.f_code.co_filename if cell is not None else None
    for frame in frames if issubclass(type(value), torch.Tensor) else ():
        if frame is cell:
            break
        node = user_code.function_node(frame.f_code)
        if node is None:
            continue
        code = frame.f_code
        for local in _locals_bound_to(frame, value):
            dropped = dropped_before(local, code.co_filename, node.body, line_of_frame(frame),
                                     locations.cell_number(code.co_filename), code.co_name)
            moved_to = device_of(dropped.call, lambda n, f=frame: value_in_frame(n, f)) if dropped else None
            if dropped is not None and moved_to == target:
                return _fix(dropped, device, target, cell_file, False)
    if name is None or not name.isidentifier():
        return None
    current = user_code.current_cell(cell_file) if cell_file is not None else None
    dropped = dropped_in_session(name, current, line_of_frame(cell) if cell is not None else 1 << 30)
    if dropped is None or device_of(dropped.call, lambda n: object_at(namespace, ast.unparse(n))) != target:
        return None
    return _fix(dropped, device, target, cell_file, _at_top(dropped))


def _standing(result: Any) -> Iterator[tuple[Any, Any]]:
    """(move, record) for each dropped move of the latest cells whose tensor is on another device."""
    if not result.dropped_moves:
        return
    by_name = {r.name: r for r in result.of_kind("tensor") if r.alias_of is None}
    for move in result.dropped_moves:
        record = by_name.get(move.target)
        if record is not None and record.device != move.device:
            yield move, record


def standing_targets(result: Any) -> set[str]:
    """The tensors a standing dropped move leaves on another device."""
    return {move.target for move, _ in _standing(result)}


def dropped_moves_standing(result: Any) -> Iterator[Finding]:
    """``%devices``: a move in the latest cells whose result is dropped, while its tensor is still on
    another device than the move's (it fails as soon as it meets what is on that device)."""
    for move, record in _standing(result):
        where = move.where
        single = where.text == move.statement
        edit = SourceEdit(where, where.text, f"{move.target} = {where.text}", where.function) if single else None
        fix = Fix(summary=f"keep the moved copy: {move.target} = {move.statement}",
                  code=f"{move.target} = {move.statement}" if single else None, edits=(edit,) if edit else (),
                  note=_WHY + ".")
        yield Finding(code="dropped-move", severity="warning", subject=move.target,
                      message=(f"{where.where}: {move.statement} returns a moved copy, which is dropped: "
                               f"{move.target} is still on {record.device}"),
                      fix=fix, names=(move.target,))
