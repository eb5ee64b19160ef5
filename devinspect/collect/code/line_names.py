"""What the user's failing line calls a tensor: the expression it reads it by (``batch["ids"]``),
where the walk named it first by another name (``ids``, the variable the batch was made from).

Read statically: the line is parsed, its expressions are read through the namespace without
calling anything (a BatchEncoding's items through its ``data`` dict, never ``__getitem__``).
"""

from __future__ import annotations

import ast
from typing import Any, Mapping

from ...model import TensorRecord
from ...runtime import tensor_getters
from ..namespace import MISSING, object_at, root_of
from .expressions import called_model

#: Methods that give the same tensor in another dtype or layout, on its device: ``x.float()`` on a
#: line passes ``x`` as far as where it lives goes.
_CONVERSIONS = frozenset({"float", "double", "half", "bfloat16", "long", "int", "bool", "contiguous", "detach",
                          "clone"})


def converted_from(node: ast.AST) -> ast.AST:
    """The expression a chain of conversions starts from: ``x`` for ``x.float().contiguous()``."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _CONVERSIONS \
            and not node.args and not node.keywords:
        node = node.func.value
    return node


def call_arguments(call: ast.Call) -> set[str]:
    """A call's arguments as written."""
    return {ast.unparse(a) for a in [*call.args, *(k.value for k in call.keywords)]}


def object_on_line(namespace: Mapping[str, Any], node: ast.AST) -> Any:
    """What an expression of the user's line reads (statically), or MISSING."""
    if not isinstance(node, (ast.Subscript, ast.Attribute)):
        return MISSING
    found = object_at(namespace, ast.unparse(node))
    if found is MISSING and isinstance(node, ast.Subscript):
        found = object_at(namespace, f"{ast.unparse(node.value)}.data[{ast.unparse(node.slice)}]")
    return found


def name_on_line(namespace: Mapping[str, Any], line: str, value: Any, first: str) -> str | None:
    """The expression by which ``line`` reaches ``value``, where its first name ``first`` is not on it."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return None
    if root_of(first) in {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}:
        return None
    return next((ast.unparse(n) for n in ast.walk(tree) if object_on_line(namespace, n) is value), None)


def renamed(record: TensorRecord, name: str) -> TensorRecord:
    """``record`` under the name the user's line gives it."""
    return record._replace(name=name, root=root_of(name), alias_of=None)


def record_on_line(namespace: Mapping[str, Any], index: Any, node: ast.AST) -> tuple[TensorRecord, Any] | None:
    """(the record of the tensor an expression of the line reads, under that expression's name; the tensor)."""
    value = object_on_line(namespace, node)
    found = index.lookup(value) if tensor_getters.is_tensor(value) else None
    if found is None or found[1]:
        return None
    return renamed(found[0], ast.unparse(node)), value


def model_output_on_line(namespace: Mapping[str, Any], line: str, modules: set[str],
                         module_methods: frozenset[str]) -> str | None:
    """``model(x)`` when ``line`` calls exactly one model of ``modules`` and hands its output on (an
    argument of another call, or a side of arithmetic): how the user wrote a tensor that model
    made. None when the line calls no model, or several."""
    try:
        tree = ast.parse(line.strip())
    except SyntaxError:
        return None
    handed_on = [arg for node in ast.walk(tree) if isinstance(node, ast.Call)
                 for arg in [*node.args, *(k.value for k in node.keywords)]]
    handed_on += [side for node in ast.walk(tree) if isinstance(node, ast.BinOp) for side in (node.left, node.right)]
    calls = {ast.unparse(node) for node in handed_on if called_model(node, modules, module_methods) is not None}
    every = {ast.unparse(node) for node in ast.walk(tree) if called_model(node, modules, module_methods) is not None}
    return next(iter(calls)) if len(calls) == 1 and len(every) == 1 else None
