"""Fixes of tensors held in lists, tuples, dicts and namedtuples, for the failed-call diagnosis.

A container moves whole, keeping its type (a comprehension of its own, ``_replace`` for a
namedtuple), with the optimizer state of the tensors it holds; a loop over batches moves what it
binds on its first line; the line that made the container is edited where that can be written.
:class:`ContainerFixes` is a part of the diagnosis (``failed_call``), which provides ``failure``,
``index``, ``cell``, ``cell_file``, ``failing_line`` and the edit and line fixes it calls.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import torch

from ...collect.namespace.names import container_of, root_of
from ...collect.namespace.path_lookup import object_at
from ...collect.objects.static_getters import type_is_one_of, type_name
from ...model.fixes import Fix
from ...model.scan_result import is_under
from ...runtime import tensor_getters
from .. import fixes
from ..causes import creation_sites, device_names, made_in_code
from ..causes.value_flow import holds_device

_T = torch.Tensor
_Module = torch.nn.Module
#: Tensors one fix moves line by line (more: each is named, the fix is the line that made them).
MOVED_AT_MOST = 64


class ContainerFixes:
    """The container fixes of a diagnosis (mixed into it)."""

    def _namedtuple_fix(self, root: str, holder: Any, target: str) -> Fix:
        """A namedtuple batch, made again with ``_replace`` (on the loop's first line when a loop binds it)."""
        device_expr = device_names.device_expression(self.failure.namespace, target)
        loop = creation_sites.loop_line(root, self.cell_file, self.failing_line, self.failure.namespace,
                                 lambda n, v: creation_sites.moved_expression(n, v, target, device_expr))
        origin = made_in_code.namespace_origin(root, self.cell, self.failing_line, [root] if loop else [],
                                               device_expr, self.failure.namespace, target, moved=loop)
        if origin is not None and origin.in_failed_cell and origin.edit is not None:
            return self._edit_fix(origin, f"make the loop's batches on {target} where this cell makes them")
        code = fixes.assignment(root, creation_sites.moved_expression(root, holder, target, device_expr) or root)
        return Fix(f"move the tensors of {root} to {target}, keeping the {type_name(type(holder))}", code, rerun=True)

    def _comprehension_fix(self, n: Any, target: str) -> Fix | None:  # n: a named operand of the failed call
        """An item of a namespace list or tuple that a comprehension on the failing line walks:
        the container moves, keeping its type."""
        if self.cell is None:
            return None
        try:
            tree = ast.parse(self.failure.source(self.cell).text)
        except SyntaxError:
            return None
        for node in ast.walk(tree):
            if isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp)):
                for generator in node.generators:
                    if isinstance(generator.iter, (ast.List, ast.Tuple)) and creation_sites.factory_calls(generator.iter):
                        # It walks tensors the line itself makes ([torch.ones(2)]): that line is the fix.
                        return self._line_fix(self.failure.source(self.cell), target, self.cell)
                    name = ast.unparse(generator.iter)
                    container = object_at(self.failure.namespace, name)
                    items = list(container) if type_is_one_of(container, (list, tuple)) else []
                    if any(item is n.value for item in items):
                        return self._container_fix(name, container, target)
        return None

    def _container_fix(self, name: str, container: Any, target: str) -> Fix:
        """A list, tuple or dict of tensors: moved whole, keeping its type, and the line making it edited."""
        device_expr = device_names.device_expression(self.failure.namespace, target)
        values = list(dict.values(container)) if type(container) is dict else list(container)
        kind, all_tensors = type_name(type(container)), all(issubclass(type(v), _T) for v in values)
        # A loop over batches that binds the container (for batch in loader) moves what it binds on its
        # first line: every target holding a tensor off the device (for inputs, targets in loader).
        root = root_of(name)
        loop = creation_sites.loop_line(root, self.cell_file, self.failing_line, self.failure.namespace,
                                 lambda n, v: creation_sites.moved_expression(n, v, target, device_expr)) or (
            fixes.assignment(name, fixes.container_moved(name, device_expr, kind, all_tensors)) if name != root
            else None)  # batch.data of a BatchEncoding: the dict it keeps, in place
        origin = made_in_code.namespace_origin(root, self.cell, self.failing_line, [root] if loop else [],
                                               device_expr, self.failure.namespace, target, moved=loop)
        if origin is not None and origin.kind not in ("loop", "inside", "factory") and not self._movable(root):
            origin = None  # `.to(dev)` on the line that made a list or dict would raise (device= inside it would not)
        leaves = all_tensors and bool(values) and all(type(v) is _T and tensor_getters.requires_grad(v) and tensor_getters.is_leaf(v)
                                                     for v in values)
        of_dicts = bool(values) and kind != "dict" and all(type(v) is dict for v in values)
        moved = fixes.move_container(name, target, kind, all_tensors=all_tensors, leaves=leaves, of_dicts=of_dicts)
        if leaves:  # an optimizer's state of those tensors follows them, as the next step needs it
            firsts = {found[0].name for found in map(self.index.lookup, values) if found is not None}
            states = self.index.result.of_kind("optimizer_state")
            holders = sorted({root_of(r.name) for r in states if r.param in firsts and r.device != target})
            moved = fixes.combine([moved, *map(fixes.optimizer_state, holders)])
        # batch["inputs"] of a nested batch: every tensor under batch (device= on its line lasts; these now)
        if name != root and (origin is None or origin.kind == "factory"):
            held = [r.name for r in self._plain_tensors_under(root) if r.device != target]
            if 1 < len(held) <= MOVED_AT_MOST:
                moved = fixes.move_tensors(root, held, target) or moved
        if origin is not None and origin.in_failed_cell and origin.edit is not None:
            what = "the loop's batches" if origin.kind == "loop" else root
            return self._edit_fix(origin, f"make {what} on {target} where this cell makes {'them' if loop else 'it'}")
        edits = origin.edits if origin is not None else ()
        return dataclasses.replace(moved, edits=edits, rerun=moved.action is not None)

    def _passed_container(self, arguments: list, off: str, target: str) -> Fix | None:
        """The fix for a list, tuple or dict of the namespace that a cell passed (``arguments``: the
        names it passed) holding a tensor on ``off``: a detector's targets, read deep in a model."""
        for name in filter(None, arguments):
            held = object_at(self.failure.namespace, name)
            if type(held) in (list, tuple, dict) and holds_device(held, off):
                return self._container_fix(name, held, target)
        return None

    def _list_of_dicts_around(self, name: str, container: Any) -> tuple[str, Any]:
        """``targets`` for ``targets[1]``, a dict in a list or tuple of dicts (a detector's targets):
        its siblings were made the same way, so the whole list moves; else ``name`` itself."""
        outer_name = container_of(name) if type(container) is dict else None
        outer = object_at(self.failure.namespace, outer_name) if outer_name else None
        if type(outer) in (list, tuple) and all(type(v) is dict for v in outer):
            return outer_name, outer
        return name, container

    def _movable(self, name: str) -> bool:
        """Whether ``name`` is a tensor or a module: what ``.to()`` on the line that made it moves."""
        return issubclass(type(object_at(self.failure.namespace, name)), (_T, _Module))

    def _plain_tensors_under(self, root: str) -> list[Any]:
        """The records of the plain tensors below ``root`` (each memory once, none that needs a
        gradient): what one fix moves line by line when ``root`` is a cache, a config or a batch.
        None inside a tuple: ``pair[0] = …`` cannot be written (its tuple moves whole instead)."""
        return [r for r in self.index.result_under(root).records if is_under(r.name, root) and r.kind == "tensor"
                and r.alias_of is None and not r.requires_grad and not self._in_a_tuple(r.name)]

    def _in_a_tuple(self, name: str) -> bool:
        try:
            node = ast.parse(name, mode="eval").body
        except SyntaxError:
            return False
        while isinstance(node, (ast.Subscript, ast.Attribute)):
            node = node.value
            if type_is_one_of(object_at(self.failure.namespace, ast.unparse(node)), (tuple,)):
                return True
        return False
