"""Reading a value by the path the user types (``model.blocks[2].scale``, ``batch["ids"]``),
statically: a module's parameters, buffers and children from its own dicts, instance
dicts and slots through their C descriptors, items of built-in containers through the
built-in types' methods. No property, ``__getattr__`` or ``__getitem__`` of the user's runs.
"""

from __future__ import annotations

import ast
import types
from typing import Any, Mapping

import torch

from ...runtime import tensor_getters
from ..objects import MODULE_DICT, instance_dict, slot_values, type_is_one_of

_T = torch.Tensor
_Module = torch.nn.Module
#: What a read returns when the value cannot be had without running code.
MISSING: Any = object()


def _is_tensor(value: Any) -> bool:
    return issubclass(type(value), _T)


def _is_module(value: Any) -> bool:
    return issubclass(type(value), _Module)


def attribute_of(base: Any, attr: str) -> Any:
    if _is_tensor(base):
        if attr == "grad":
            return tensor_getters.grad(base)
        if attr == "device":
            return tensor_getters.device(base)
        return MISSING
    if issubclass(type(base), types.ModuleType):
        return dict.get(MODULE_DICT(base), attr, MISSING)  # never a lazy module's __getattr__
    d = instance_dict(base)
    if _is_module(base):
        for group in ("_parameters", "_buffers", "_modules"):
            members = d.get(group)
            if type(members) is dict and attr in members:
                return members[attr]
    if attr in d:
        return d[attr]
    return next((v for k, v in slot_values(base) if k == attr), MISSING)


def item_of(base: Any, key: Any) -> Any:
    bt = type(base)
    if issubclass(bt, _Module):
        modules = instance_dict(base).get("_modules")
        if type(modules) is dict:
            if type(key) is int:
                children = list(dict.values(modules))
                return children[key] if -len(children) <= key < len(children) else MISSING
            if type(key) is str:
                return dict.get(modules, key, MISSING)
        return MISSING
    if bt is list or bt is tuple:
        if type(key) is int:
            size = list.__len__(base) if bt is list else tuple.__len__(base)
            getter = list.__getitem__ if bt is list else tuple.__getitem__
            return getter(base, key) if -size <= key < size else MISSING
        return MISSING
    if bt is dict and (type_is_one_of(key, (str, int)) or _is_tensor(key)):
        return dict.get(base, key, MISSING)
    return MISSING


def object_at(namespace: Mapping[str, Any], path: str) -> Any:
    """The object ``path`` names in ``namespace`` (names, attributes, constant items and
    ``getattr(x, "odd name")``), read statically; :data:`MISSING` when it cannot be read."""
    try:
        node = ast.parse(path, mode="eval").body
    except (SyntaxError, ValueError):
        return MISSING
    return _read(node, namespace)


def _read(node: ast.AST, namespace: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Name):
        return dict.get(namespace, node.id, MISSING) if issubclass(type(namespace), dict) else MISSING
    if isinstance(node, ast.Attribute):
        base = _read(node.value, namespace)
        return MISSING if base is MISSING else attribute_of(base, node.attr)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        base = _read(node.value, namespace)
        return MISSING if base is MISSING else item_of(base, node.slice.value)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) == 2 and isinstance(node.args[1], ast.Constant) and type(node.args[1].value) is str):
        base = _read(node.args[0], namespace)
        return MISSING if base is MISSING else attribute_of(base, node.args[1].value)
    return MISSING
