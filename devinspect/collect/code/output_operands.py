"""Where a cell's arithmetic meets a model's output (``f - flow_truth`` for ``f`` in
``flows = model(a, b)``): the other operand meets it on the model's device.

Read from the cell's text only. A value is the model's output when it is the model's call, a
name the cell bound to one (``out = model(x)``, ``logits, h = model(x)``), an item, attribute or
method result of it that keeps its device (``out[-1]``, ``out.logits``, ``out.softmax(-1)``), a
comprehension's variable over it, or arithmetic on it. ``.cpu()``, ``.to(…)``, ``.item()`` and the
like take it off the device: what meets those meets no output.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .expressions import called_model, expression_root

#: Methods whose result is not on the output's device, or is no tensor: a line using it meets no output.
_LEAVES_DEVICE = frozenset({"cpu", "to", "cuda", "numpy", "tolist", "item", "detach_", "type"})


def output_operands(tree: ast.Module, modules: set[str], module_methods: frozenset[str]
                    ) -> Iterator[tuple[str, ast.expr, ast.BinOp]]:
    """``(model, operand, expression)`` for each arithmetic expression of the cell (outside its
    ``def``s) one side of which is ``model``'s output and the other a plain name, attribute or
    item (``flow_truth``, ``batch.labels``): the operand the notebook gave it."""
    outputs: dict[str, str] = {}

    def model_of(node: ast.AST) -> str | None:
        if isinstance(node, ast.Call):
            called = called_model(node, modules, module_methods)
            if called is not None or not isinstance(node.func, ast.Attribute) or node.func.attr in _LEAVES_DEVICE:
                return called
            return model_of(node.func.value)
        if isinstance(node, ast.Name):
            return outputs.get(node.id)
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Starred)):
            return model_of(node.value)
        if isinstance(node, ast.BinOp):
            return model_of(node.left) or model_of(node.right)
        if isinstance(node, ast.UnaryOp):
            return model_of(node.operand)
        if isinstance(node, (ast.List, ast.Tuple)):  # outs = [model(a), model(b)]: each item is an output
            return next(filter(None, map(model_of, node.elts)), None)
        return None

    nodes = list(_outside_functions(tree))
    for node in sorted((n for n in nodes if isinstance(n, (ast.Assign, ast.comprehension))),
                       key=lambda n: (getattr(n, "lineno", 0) or getattr(n.target, "lineno", 0))):
        value = node.value if isinstance(node, ast.Assign) else node.iter
        model = model_of(value)
        if model is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            for name in ast.walk(target):
                if isinstance(name, ast.Name):
                    outputs[name.id] = model
    bound = {n.id for c in nodes if isinstance(c, ast.comprehension) for n in ast.walk(c.target)
             if isinstance(n, ast.Name)}
    for node in nodes:
        if not isinstance(node, ast.BinOp):
            continue
        sides = (node.left, node.right)
        models = [model_of(s) for s in sides]
        for side, other in ((0, 1), (1, 0)):
            operand = sides[other]
            if models[side] is not None and models[other] is None and isinstance(
                    operand, (ast.Name, ast.Attribute, ast.Subscript)) and expression_root(operand) not in bound:
                yield models[side], operand, node


def _outside_functions(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of the cell but those inside a ``def``, ``lambda`` or class (their names are locals)."""
    for child in ast.iter_child_nodes(tree):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        yield child
        yield from _outside_functions(child)
