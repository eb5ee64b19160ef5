"""Small readings of an expression's syntax tree, shared by the readers of the user's code."""

from __future__ import annotations

import ast


def expression_root(node: ast.AST) -> str:
    """The name an expression starts from (``model`` for ``model.encoder(x).mean()``), or ""."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def called_model(node: ast.AST, modules: set[str], module_methods: frozenset[str]) -> str | None:
    """The model of ``modules`` that ``node`` calls to run it (``model(x)``, ``model.generate(ids)``), or
    None: not one of its own ``nn.Module`` methods (``model.eval()``), not a call on what a call returned
    (``model(x).cpu()``)."""
    if not isinstance(node, ast.Call):
        return None
    func = node.func
    root = expression_root(func)
    if root not in modules or (isinstance(func, ast.Attribute) and func.attr in module_methods) \
            or any(isinstance(n, ast.Call) for n in ast.walk(func)):
        return None
    return root
