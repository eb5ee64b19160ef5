"""The user's own function behind a callable, and the tensor it returns, read statically.

A helper may sit behind a wrapper (``functools.lru_cache``, a decorator made with
``functools.wraps``: both keep it in ``__wrapped__``), or be a bound method or a class whose
``__init__`` runs. Nothing here calls anything: types are compared exactly, attributes are read
from instance and class dicts, and the function's source is parsed.
"""

from __future__ import annotations

import ast
import types
from dataclasses import dataclass
from typing import Any

from ..namespace import MISSING
from ..objects import FUNCTION_CODE, instance_dict, static_class_attr
from . import locations, user_code
from .factories import FACTORIES, LIKE_FACTORIES

_METHOD_FUNC = types.MethodType.__dict__["__func__"].__get__
_METHOD_SELF = types.MethodType.__dict__["__self__"].__get__


@dataclass(frozen=True)
class Function:
    """The user's function a callable runs, the object it is a method of (or ``MISSING``), and the
    class a call makes an object of (for a class, whose ``__init__`` is ``code`` when it has one)."""

    code: types.CodeType | None
    instance: Any = MISSING
    makes: type | None = None


def user_function(value: Any, instance: Any = MISSING, depth: int = 0) -> Function | None:
    """The user's own function ``value`` runs when called, or None (library code, or unknown)."""
    if value is None or value is MISSING or depth > 4:
        return None
    vt = type(value)
    if vt is types.MethodType:
        return user_function(_METHOD_FUNC(value), _METHOD_SELF(value), depth + 1)
    if vt is staticmethod or vt is classmethod:
        return user_function(value.__func__, MISSING if vt is staticmethod else instance, depth + 1)
    wrapped = dict.get(instance_dict(value), "__wrapped__", MISSING) if not issubclass(vt, type) else MISSING
    if wrapped is not MISSING:
        return user_function(wrapped, instance, depth + 1)
    if vt is types.FunctionType:
        code = FUNCTION_CODE(value)
        return Function(code, instance) if locations.is_user_code(code) else None
    if issubclass(vt, type):
        init = static_class_attr(value, "__init__")
        made = user_function(init, MISSING, depth + 1) if type(init) is types.FunctionType else None
        return Function(made.code if made else None, MISSING, value)
    return None


def method_of(owner: Any, name: str) -> Function | None:
    """``owner.<name>()``'s function when ``owner`` is an object of a user class (not a module or class)."""
    if issubclass(type(owner), (type, types.ModuleType)):
        return None
    return user_function(static_class_attr(type(owner), name), owner)


def factory_calls(node: ast.AST, given_too: bool = False) -> list[ast.Call]:
    """``torch.<factory>(…)`` calls in ``node`` without ``device=`` (or, ``given_too``, with it too)."""
    return [n for n in ast.walk(node)
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "torch" and (n.func.attr in FACTORIES or n.func.attr in LIKE_FACTORIES)
            and (given_too or not any(k.arg == "device" for k in n.keywords))]


def returned_factory(code: types.CodeType) -> tuple[ast.Return, ast.Call] | None:
    """The one ``return`` of the function whose value a factory call without ``device=`` makes
    (``return torch.triu(torch.ones(n, n), 1)``) when the function reads no tensor but what that
    call makes: then the result is on the default device. None otherwise."""
    node = user_code.function_node(code)
    if node is None:
        return None
    returns = [s for s in user_code.statements(node.body) if isinstance(s, ast.Return) and s.value is not None]
    if len(returns) != 1:
        return None
    value = returns[0].value
    calls = factory_calls(value)
    if len(calls) != 1 or calls[0].func.attr in LIKE_FACTORIES:
        return None
    parameters = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
    read = {n.id for n in ast.walk(value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    return (returns[0], calls[0]) if read <= parameters | {"torch"} else None
