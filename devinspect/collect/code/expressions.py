"""Small readings of an expression's syntax tree, shared by the readers of the user's code."""

from __future__ import annotations

import ast


def expression_root(node: ast.AST) -> str:
    """The name an expression starts from (``model`` for ``model.encoder(x).mean()``), or ""."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""
