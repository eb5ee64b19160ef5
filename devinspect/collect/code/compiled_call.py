"""A device mismatch that ``torch.compile`` met while tracing, read from the error and its traceback.

Tracing runs the model on fake tensors: the error's ``real_stack`` names the user's line,
and the fake tensors the traced op was given (read from the frame that ran it) carry the
devices. Nothing is run; the user's line is parsed as a plain cell's failing line is.
"""

from __future__ import annotations

import ast
import linecache
import re
from typing import Any

import torch

from ...runtime import tensor_getters
from ..objects import fake_device_of, instance_dict
from . import locations
from .failing_call import (
    FACTORIES,
    LIKE_FACTORIES,
    Entry,
    FailingCall,
    Temporary,
    Traced,
    names_a_device,
    operand_nodes,
)

#: Binary operators as the traced graph names their functions.
_TRACED_OPS = {"mul": ast.Mult, "add": ast.Add, "sub": ast.Sub, "truediv": ast.Div, "matmul": ast.MatMult,
               "floordiv": ast.FloorDiv, "pow": ast.Pow, "mod": ast.Mod}


def compiled_call(exc: BaseException, entries: list[Entry]) -> FailingCall | None:
    """A device mismatch that ``torch.compile`` met while tracing: the user's line from the
    error's ``real_stack`` and its operands' devices from the fake tensors tracing used (read
    from the frame that ran the traced op). None for any other error."""
    d = instance_dict(exc)
    real_stack = d.get("real_stack")
    if real_stack is None or not issubclass(type(exc), RuntimeError):
        return None
    summaries = [f for f in list(real_stack) if type(getattr(f, "filename", None)) is str]
    user = next((f for f in reversed(summaries) if not locations.is_library_file(f.filename)
                 and not locations.is_own_file(f.filename)), None)
    fakes = _traced_args(entries)
    if user is None or not fakes:
        return None
    devices = sorted({dev for _, dev in fakes})
    if len(devices) < 2 or not names_a_device(exc, devices):
        return None
    text = linecache.getline(user.filename, user.lineno).strip()
    operands: list = []
    node = None
    tree = _parsed_line(text)
    op_name = fakes[0][0]
    if tree is not None:
        node = _traced_node(tree, op_name, len(fakes))
    if node is not None:
        for part, (_, device) in zip(operand_nodes(node)[-len(fakes):] if isinstance(node, ast.Call)
                                     else operand_nodes(node), fakes):
            operands.append(_traced_operand(part, device, user))
    if not operands:
        operands = [Traced(f"operand {i + 1}", device, user.filename, user.lineno, _function_name(user.name))
                    for i, (_, device) in enumerate(fakes)]
    return FailingCall(entries[-1].frame, op_name, ast.unparse(node) if node is not None else text, operands,
                       devices, user.lineno)


def _parsed_line(text: str) -> ast.AST | None:
    """One line of the user's code, parsed: ``return h * mask`` (or ``yield``, ``await``) parses
    only inside a function, so it is parsed as one."""
    for source in (text, "async def _line():\n    " + text):
        try:
            return ast.parse(source)
        except SyntaxError:
            continue
    return None


#: The name torch.compile gives the rest of a function after a graph break.
_RESUMED = re.compile(r"^torch_dynamo_resume_in_(\w+?)_at_\d+$")


def _function_name(name: str) -> str:
    """The user's function a traced frame belongs to (``forward`` for its resumed part)."""
    match = _RESUMED.match(name)
    return match.group(1) if match else name


def _traced_operand(node: ast.AST, device: str, user: Any) -> Any:
    calls = [n for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Name) and n.func.value.id == "torch"
             and (n.func.attr in FACTORIES or n.func.attr in LIKE_FACTORIES)]
    if calls:
        call = calls[0]
        given = any(k.arg == "device" for k in call.keywords)
        return Temporary(device, f"torch.{call.func.attr}", ast.unparse(call), given,  # type: ignore[attr-defined]
                         user.filename, user.lineno, _function_name(user.name))
    return Traced(ast.unparse(node), device, user.filename, user.lineno, _function_name(user.name))


def _traced_node(tree: ast.AST, op: str, count: int) -> ast.AST | None:
    """The expression of the user's line that ran the traced op ``op`` (``mul``, ``linear``)."""
    binary = _TRACED_OPS.get(op)
    for node in ast.walk(tree):
        if binary is not None and isinstance(node, (ast.BinOp, ast.AugAssign)) and isinstance(node.op, binary):
            return node
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == op or name.lstrip("_") == op:
                return node
    return None


def _traced_args(entries: list[Entry]) -> list[tuple[str, str]]:
    """(op name, device) of each tensor argument of the op that tracing ran when it failed: the
    devices from the innermost tracing frame holding its arguments, the op from the nearest
    frame, that one or further out, holding the graph node (torch 2.10 passes the arguments
    on to a frame without it)."""
    machinery = [locations.frame_locals(e.frame) for e in reversed(entries)
                 if locations.is_compile_machinery(e.frame.f_code.co_filename)]
    for i, local_vars in enumerate(machinery):
        args = dict.get(local_vars, "args")
        kwargs = dict.get(local_vars, "kwargs")
        if type(args) is not tuple:
            continue
        values = list(args) + (list(dict.values(kwargs)) if type(kwargs) is dict else [])
        fakes = [device for device in map(_fake_device, values) if device is not None]
        if fakes:
            op = next((name for name in (_node_op(dict.get(v, "node")) for v in machinery[i:]) if name != "call"),
                      "call")
            return [(op, device) for device in fakes]
    return []


def _node_op(node: Any) -> str:
    """The name of the function a traced graph node calls (``mul``, ``linear``), read through the
    node's own C getter; ``call`` when it cannot be read."""
    base = getattr(torch._C, "_NodeBase", None)
    getter = base.__dict__.get("target") if base is not None else None
    if getter is None or not issubclass(type(node), base):
        return "call"
    try:
        target = getter.__get__(node, type(node))
    except Exception:
        return "call"
    name = target if type(target) is str else getattr(target, "__name__", None)
    return name if type(name) is str else "call"


def _fake_device(value: Any) -> str | None:
    if not tensor_getters.is_tensor(value):
        return None
    fake = fake_device_of(instance_dict(value))
    if fake is not None:
        return str(fake)
    # A wrapper subclass around a fake tensor (the simulated device's, DTensor's): its own device.
    inner = [v for v in instance_dict(value).values() if tensor_getters.is_tensor(v)]
    if inner and all(fake_device_of(instance_dict(v)) is not None for v in inner):
        return str(tensor_getters.device(value))
    return None
