"""A tensor made by a call that is handed no tensor (``coords = make_coords_grid(b, h, w)``).

Such a call makes its value as a factory does: nothing it is given has a device, so the
device the value gets is decided by the call itself. Its line is where the device is given:
``device=`` when the function takes a ``device`` parameter the call leaves to its default,
else a ``.to()`` of the value it returns.

Read statically: the call's callee and arguments by their values in the frame (no property,
no call), the callee's parameters from its code object.
"""

from __future__ import annotations

import ast
import linecache
import types
from typing import Any

import torch

from ...collect import (
    FUNCTION_CODE,
    MISSING,
    instance_dict,
    locations,
    static_class_attr,
    user_code,
    user_functions,
    value_in_frame,
)
from ...model import Cause, SourceEdit
from ...runtime import tensor_getters
from . import creation_sites


def maker_origin(name: str, statement: user_code.Statement, frame: types.FrameType,
                 device_expr: str) -> Cause | None:
    """The edit of ``name = f(...)`` when ``f`` is handed no tensor and the local it bound is a
    tensor; None for any other statement."""
    node = statement.node
    local_vars = locations.frame_locals(frame) if frame.f_locals is not frame.f_globals else frame.f_globals
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id == name and tensor_getters.is_tensor(dict.get(local_vars, name))):
        return None
    edit = maker_edit(statement, frame, device_expr)
    return Cause(edit.where, "factory", edit) if edit is not None else None


def replacing_edit(statement: user_code.Statement, frame: types.FrameType | None, device_expr: str) -> SourceEdit | None:
    """The edit of a statement that makes a tensor anew (a buffer replaced in ``forward``): ``device=``
    on its factory calls, or on the call handed no tensor that makes it (read in ``frame``, the
    statement's running function)."""
    made = creation_sites.creation_edit(statement, device_expr)
    if made is not None and made[0] == "factory":
        return made[1]
    return maker_edit(statement, frame, device_expr) if frame is not None else None


def maker_edit(statement: user_code.Statement, frame: types.FrameType, device_expr: str) -> SourceEdit | None:
    """For ``target = f(...)`` (a name or an attribute) whose call is handed no tensor: ``device=``
    to ``f`` when it takes one the call leaves to its default, else ``.to()`` of what it returns.
    None when the value is not such a call. The caller knows the value bound is a tensor."""
    node = statement.node
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.value, ast.Call)
            and isinstance(node.targets[0], (ast.Name, ast.Attribute))):
        return None
    call = node.value
    if not _handed_no_tensor(call, frame):
        return None
    found = _callee_code(call.func, frame)
    if found is None:
        return None
    code, skip = found
    where = locations.source_line(statement.filename, statement.line, statement.function or "<module>")
    edit = _device_argument_edit(where, statement, call, code, skip, device_expr)
    if edit is None:
        made = creation_sites.creation_edit(statement, device_expr, wrap=True)
        edit = made[1] if made is not None else None
    return edit


def _callee_code(func: ast.expr, frame: types.FrameType) -> tuple[types.CodeType, int] | None:
    """The code the called function runs and how many of its parameters are bound (1 for a method
    of an object, ``self.make_table``); None for a class or what cannot be read without running code."""
    if isinstance(func, ast.Attribute):
        owner = value_in_frame(func.value, frame)
        method = static_class_attr(type(owner), func.attr) if owner is not None else None
        if type(method) is types.FunctionType and func.attr not in instance_dict(owner):
            return FUNCTION_CODE(method), 1
    callee = value_in_frame(func, frame)
    function = user_functions.user_function(callee)
    if function is not None:
        return (function.code, 0 if function.instance is MISSING else 1) \
            if function.makes is None and function.code is not None else None
    return (FUNCTION_CODE(callee), 0) if type(callee) is types.FunctionType else None  # a library's function


def _handed_no_tensor(call: ast.Call, frame: types.FrameType) -> bool:
    """Whether nothing the call passes is, or holds, a tensor or a module: each argument's names
    and attribute chains read in the frame."""
    for argument in [*call.args, *(k.value for k in call.keywords)]:
        for read in _reads(argument):
            if _carries_a_device(value_in_frame(read, frame)):
                return False
    return True


def _reads(node: ast.AST) -> list[ast.AST]:
    """The whole names, attribute chains and subscripts an expression reads (``self.n_heads``, not ``self``)."""
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return [node]
    return [r for child in ast.iter_child_nodes(node) for r in _reads(child)]


def _carries_a_device(value: Any, depth: int = 0) -> bool:
    vt = type(value)
    if tensor_getters.is_tensor(value) or issubclass(vt, torch.nn.Module):
        return True
    if depth >= 2:
        return False
    if vt is list or vt is tuple:
        return any(_carries_a_device(v, depth + 1) for v in (list.__iter__(value) if vt is list else tuple.__iter__(value)))
    if vt is dict:
        return any(_carries_a_device(v, depth + 1) for v in dict.values(value))
    return False


def _device_argument_edit(where: Any, statement: user_code.Statement, call: ast.Call, code: types.CodeType,
                          skip: int, device_expr: str) -> SourceEdit | None:
    """``device=`` added to ``call`` when its function takes ``device`` and the call leaves it to
    the default; None when the call gives it (by keyword, by position or by ``**``)."""
    parameters = code.co_varnames[skip: code.co_argcount + code.co_kwonlyargcount]
    if "device" not in parameters or any(k.arg in ("device", None) for k in call.keywords):
        return None
    position = parameters.index("device")
    if position < code.co_argcount - skip and (len(call.args) > position or any(isinstance(a, ast.Starred) for a in call.args)):
        return None
    if call.lineno != call.end_lineno or statement.node.lineno != statement.node.end_lineno:
        return None
    physical = linecache.getline(statement.filename, statement.line).encode()
    indent = len(physical) - len(physical.lstrip())
    new = creation_sites.with_device(where.text, [call], device_expr, offset=indent)
    return SourceEdit(where, where.text, new, statement.function) if new and new != where.text else None
