"""TorchScript modules, scripted or traced: their tensors live in C++, behind the module.

Read through TorchScript's own dictionaries of the C++ module (``torch._C.ParameterDict``,
``BufferDict``, ``ModuleDict``), which run none of the user's Python. Names are the ones
the user types: ``scripted.blocks[0].weight``, ``getattr(traced, '0').weight``.
"""

from __future__ import annotations

import ast
from itertools import islice
from typing import Any, Iterator, Mapping

import torch

from ..namespace import attr_name, module_tree_paths, object_at
from .static_getters import instance_dict, type_name

_ScriptModule = torch._C.ScriptModule
_ScriptFunction = torch._C.ScriptFunction
_Module = torch.nn.Module
_INDEXABLE = ("Sequential", "ModuleList")


def script_object(d: dict) -> tuple[Any, bool] | None:
    """(the C++ module, whether its Sequential and ModuleList children take ``[i]``) behind a
    TorchScript module's instance dict ``d``: its own ``_c`` when scripted, that of the scripted
    module a traced one keeps (``_actual_script_module``), whose children only ``getattr``
    reaches. None for any other module."""
    c = d.get("_c")
    if type(c) is _ScriptModule:
        return c, True
    actual = d.get("_actual_script_module")
    if actual is not None and issubclass(type(actual), _Module):
        c = instance_dict(actual).get("_c")
        if type(c) is _ScriptModule:
            return c, False
    return None


def script_members(c: Any, name: str, indexable: bool) -> Iterator[tuple[str, str, Any]]:
    """``(kind, name, value)`` of each parameter, buffer and submodule of the C++ module ``c``
    (kind: "parameter", "buffer" or "module"; a submodule's value is its C++ module)."""
    for pname, p in torch._C.ParameterDict(c).items():
        if p is not None:
            yield "parameter", attr_name(name, pname), p
    for bname, b in torch._C.BufferDict(c).items():
        if b is not None:
            yield "buffer", attr_name(name, bname), b
    container = class_name(c)
    for cname, child in torch._C.ModuleDict(c).items():
        if not cname.isdigit():
            full = attr_name(name, cname)
        elif indexable and container in _INDEXABLE:
            full = f"{name}[{cname}]"
        else:
            full = f"getattr({name}, {cname!r})"
        yield "module", full, child


def script_tensors(c: Any, name: str, indexable: bool) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` of each parameter and buffer of the C++ module ``c`` and of all its
    submodules, depth first (the C++ submodules are made anew on each read, so only their
    tensors are handed out)."""
    for kind, full, value in script_members(c, name, indexable):
        if kind == "module":
            yield from script_tensors(value, full, indexable)
        else:
            yield full, value


def class_name(c: Any) -> str:
    """The class a C++ module was made from (``Linear`` for ``__torch__.torch.nn.…Linear``)."""
    return c.qualified_name.rsplit(".", 1)[-1]


def script_calls(source: str, namespace: Mapping[str, Any], limit: int = 5) -> list[str]:
    """What the calls in ``source`` hand to TorchScript, which runs in C++ where no Python mode
    sees its ops: one line for each called name (or the object whose method is called) that
    reads, statically, as a TorchScript function or module, or as a module with a TorchScript
    part (``model``: ``model.encoder``). At most ``limit`` lines."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    found: list[str] = []
    seen: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        targets = [node.func] + ([node.func.value] if isinstance(node.func, ast.Attribute) else [])
        for target in targets:
            text = ast.unparse(target)
            if text in seen:
                continue
            seen.add(text)
            use = _script_use(object_at(namespace, text), text)
            if use is not None:
                found.append(use)
                break
        if len(found) >= limit:
            break
    return found


def _script_use(value: Any, text: str) -> str | None:
    vt = type(value)
    if issubclass(vt, _ScriptFunction):
        return f"{text} is a TorchScript function"
    if not issubclass(vt, _Module):
        return None
    if script_object(instance_dict(value)) is not None:
        return f"{text} is a TorchScript module ({type_name(vt)})"
    part = _script_part(value, text)
    return None if part is None else f"{text} holds a TorchScript module, {part}"


def _script_part(m: Any, name: str, budget: int = 10_000) -> str | None:
    """The name of the first TorchScript submodule of the Python module ``m``, or None (at
    most ``budget`` modules of its tree are read)."""
    below = islice(module_tree_paths(m, name, set()), 1, budget)
    return next((path for module, path in below if script_object(instance_dict(module)) is not None), None)
