"""Fixes of tensors held in lists, tuples, dicts and namedtuples, for the cause rules.

A container moves whole, keeping its type (a comprehension of its own, ``_replace`` for a
namedtuple), with the optimizer state of the tensors it holds; a loop over batches moves what it
binds on its first line; the line that made the container is edited where that can be written.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import torch

from ...collect import container_of, object_at, root_of, type_is_one_of, type_name
from ...model import Fix
from ...runtime import tensor_getters
from .. import fix_builders
from . import creation_sites, device_names, made_in_code
from .context import FailedCall, NamedOperand
from .fix_writing import edit_fix, line_fix, movable, plain_tensors_under
from .value_flow import holds_device

_T = torch.Tensor
#: Tensors one fix moves line by line (more: each is named, the fix is the line that made them).
MOVED_AT_MOST = 64


def namedtuple_fix(call: FailedCall, root: str, holder: Any) -> Fix:
    """A namedtuple batch, made again with ``_replace`` (on the loop's first line when a loop binds it)."""
    target = call.target
    device_expr = device_names.device_expression(call.namespace, target)
    loop = creation_sites.loop_line(root, call.cell_file, call.failing_line, call.namespace,
                             lambda n, v: creation_sites.moved_expression(n, v, target, device_expr))
    origin = made_in_code.made_in_session(root, call.cell, call.failing_line, [root] if loop else [],
                                           device_expr, call.namespace, target, moved=loop)
    if origin is not None and origin.in_failed_cell and origin.edit is not None:
        return edit_fix(call, origin, f"make the loop's batches on {target} where this cell makes them")
    code = fix_builders.assignment(root, creation_sites.moved_expression(root, holder, target, device_expr) or root)
    return Fix(f"move the tensors of {root} to {target}, keeping the {type_name(type(holder))}", code, rerun=True)

def comprehension_fix(call: FailedCall, n: NamedOperand) -> Fix | None:
    """An item of a namespace list or tuple that a comprehension on the failing line walks:
    the container moves, keeping its type."""
    if call.cell is None:
        return None
    try:
        tree = ast.parse(call.source(call.cell).text)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
            for generator in node.generators:
                if isinstance(generator.iter, (ast.List, ast.Tuple)) and creation_sites.factory_calls(generator.iter):
                    # It walks tensors the line itself makes ([torch.ones(2)]): that line is the fix.
                    return line_fix(call, call.source(call.cell), call.cell)
                name = ast.unparse(generator.iter)
                container = object_at(call.namespace, name)
                items = list(container) if type_is_one_of(container, (list, tuple)) else []
                if any(item is n.value for item in items):
                    return container_fix(call, name, container)
    return None

def container_fix(call: FailedCall, name: str, container: Any) -> Fix:
    """A list, tuple or dict of tensors: moved whole, keeping its type, and the line making it edited."""
    target = call.target
    device_expr = device_names.device_expression(call.namespace, target)
    values = list(dict.values(container)) if type(container) is dict else list(container)
    kind, all_tensors = type_name(type(container)), all(issubclass(type(v), _T) for v in values)
    # A loop over batches that binds the container (for batch in loader) moves what it binds on its
    # first line: every target holding a tensor off the device (for inputs, targets in loader).
    root = root_of(name)
    loop = creation_sites.loop_line(root, call.cell_file, call.failing_line, call.namespace,
                             lambda n, v: creation_sites.moved_expression(n, v, target, device_expr)) or (
        fix_builders.assignment(name, fix_builders.container_moved(name, device_expr, kind, all_tensors)) if name != root
        else None)  # batch.data of a BatchEncoding: the dict it keeps, in place
    origin = made_in_code.made_in_session(root, call.cell, call.failing_line, [root] if loop else [],
                                           device_expr, call.namespace, target, moved=loop)
    if origin is not None and origin.made_by not in ("loop", "inside", "factory") and not movable(call, root):
        origin = None  # `.to(dev)` on the line that made a list or dict would raise (device= inside it would not)
    leaves = all_tensors and bool(values) and all(type(v) is _T and tensor_getters.requires_grad(v) and tensor_getters.is_leaf(v)
                                                 for v in values)
    of_dicts = bool(values) and kind != "dict" and all(type(v) is dict for v in values)
    moved = fix_builders.move_container(name, target, kind, all_tensors=all_tensors, leaves=leaves, of_dicts=of_dicts)
    if leaves:  # an optimizer's state of those tensors follows them, as the next step needs it
        firsts = {found[0].name for found in map(call.index.lookup, values) if found is not None}
        states = call.index.result.of_kind("optimizer_state")
        holders = sorted({root_of(r.name) for r in states if r.param in firsts and r.device != target})
        moved = fix_builders.combine([moved, *map(fix_builders.optimizer_state, holders)])
    # batch["inputs"] of a nested batch: every tensor under batch (device= on its line lasts; these now)
    if name != root and (origin is None or origin.made_by == "factory"):
        held = [r.name for r in plain_tensors_under(call, root) if r.device != target]
        if 1 < len(held) <= MOVED_AT_MOST:
            moved = fix_builders.move_tensors(root, held, target) or moved
    if origin is not None and origin.in_failed_cell and origin.edit is not None:
        what = "the loop's batches" if origin.made_by == "loop" else root
        return edit_fix(call, origin, f"make {what} on {target} where this cell makes {'them' if loop else 'it'}")
    edits = origin.edits if origin is not None else ()
    return dataclasses.replace(moved, edits=edits, rerun=moved.action is not None)

def passed_container(call: FailedCall, arguments: list, off: str) -> Fix | None:
    """The fix for a list, tuple or dict of the namespace that a cell passed (``arguments``: the
    names it passed) holding a tensor on ``off``: a detector's targets, read deep in a model."""
    for name in filter(None, arguments):
        held = object_at(call.namespace, name)
        if type(held) in (list, tuple, dict) and holds_device(held, off):
            return container_fix(call, name, held)
    return None

def list_of_dicts_around(call: FailedCall, name: str, container: Any) -> tuple[str, Any]:
    """``targets`` for ``targets[1]``, a dict in a list or tuple of dicts (a detector's targets):
    its siblings were made the same way, so the whole list moves; else ``name`` itself."""
    outer_name = container_of(name) if type(container) is dict else None
    outer = object_at(call.namespace, outer_name) if outer_name else None
    if type(outer) in (list, tuple) and all(type(v) is dict for v in outer):
        return outer_name, outer
    return name, container
