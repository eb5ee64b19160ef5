"""The call that raised, read from a traceback without running anything.

Python (3.11+) records, for each frame of a traceback, the exact expression that was
running (``F.linear(input, self.weight, self.bias)``, ``x @ w``, ``table[ids]``); from
the innermost frame outwards, that expression's operands are read statically (locals,
globals, a module's parameters and buffers, plain attributes and items: no property,
no ``__getattr__``, no user code). The first expression whose tensor operands sit on
more than one device is the failing call. The error's message is only a hint: it
decides nothing unless no frame's operands could be read.
"""

from __future__ import annotations

import ast
import linecache
import re
import types
from dataclasses import dataclass
from typing import Any, Iterator

import torch

from . import locations
from . import tensorbase as tb
from .static import instance_dict, slot_values

_T = torch.Tensor
_Module = torch.nn.Module
_MISSING: Any = object()


#: Messages that say a mismatch; used only when no frame's operands could be read.
_MISMATCH_WORDS = re.compile(r"on the same device|same device as|should be the same|device type|"
                             r"Expected all tensors", re.IGNORECASE)


#: Calls whose inputs may lawfully sit on different devices: their failing for mixed devices
#: needs the message to say so too.
_CROSS_DEVICE = frozenset({"to", "copy_", "cuda", "cpu", "xpu", "mps", "set_", "type", "index_put_",
                           "pin_memory", "_to_copy"})


#: Methods that give a tensor on the same device as ``self`` (a stand-in for the operand).
_SAME_DEVICE_METHODS = frozenset({
    "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous", "t", "float",
    "half", "bfloat16", "double", "long", "int", "bool", "detach", "clone", "expand", "expand_as", "view_as",
    "narrow", "chunk", "split", "T", "mT", "data", "mean", "sum", "abs", "exp", "log", "sqrt", "softmax",
})


_BINARY_DUNDERS = {
    ast.Add: "__add__", ast.Sub: "__sub__", ast.Mult: "__mul__", ast.MatMult: "__matmul__", ast.Div: "__truediv__",
    ast.FloorDiv: "__floordiv__", ast.Mod: "__mod__", ast.Pow: "__pow__", ast.BitAnd: "__and__",
    ast.BitOr: "__or__", ast.BitXor: "__xor__", ast.LShift: "__lshift__", ast.RShift: "__rshift__",
}


#: At most this many frames (innermost first) and operand tensors are looked at.
_MAX_FRAMES = 12


_MAX_TENSORS = 64


#: How deep inside an operand's own calls its device is looked for.
_MAX_DEPTH = 3


@dataclass(frozen=True)
class Entry:
    """One frame of a traceback, at the instruction that was running."""

    frame: types.FrameType
    lineno: int
    lasti: int


@dataclass(frozen=True)
class FailingCall:
    """The expression that raised, in which frame, and its operands' tensors."""

    frame: types.FrameType
    op: str
    text: str
    tensors: list
    devices: list[str]


def traceback_entries(tb: types.TracebackType | None) -> Iterator[Entry]:
    seen = 0
    while type(tb) is types.TracebackType and seen < 256:
        yield Entry(tb.tb_frame, tb.tb_lineno or tb.tb_frame.f_lineno, tb.tb_lasti)
        tb = tb.tb_next
        seen += 1


def failing_call(entries: list[Entry], exc: BaseException) -> FailingCall | None:
    """From the innermost frame outwards (devinspect's own frames skipped, and none further
    out than the user's innermost line), the first running expression whose tensor
    operands sit on more than one device."""
    hinted = bool(_MISMATCH_WORDS.search(_message(exc)))
    looked = 0
    for entry in reversed(entries):
        filename = entry.frame.f_code.co_filename
        if locations.is_own_file(filename):
            continue
        looked += 1
        node = _running_expression(entry)
        if node is not None:
            found = _call_from(node, entry.frame, hinted)
            if found is not None:
                return found
        if locations.is_user_code(entry.frame.f_code) or looked >= _MAX_FRAMES:
            break
    if hinted:
        return _from_locals(entries)
    return None


def _message(exc: BaseException) -> str:
    try:
        return BaseException.__str__(exc)
    except Exception:  # noqa: BLE001
        return ""


def _running_expression(entry: Entry) -> ast.AST | None:
    """The expression the frame was running when the error passed through it (Python 3.11+
    keeps its exact position), parsed; None when its source is not at hand."""
    code = entry.frame.f_code
    try:
        positions = list(code.co_positions())[entry.lasti // 2]
    except (IndexError, ValueError):
        positions = (None, None, None, None)
    lines = linecache.getlines(code.co_filename, entry.frame.f_globals)
    start, end, col, end_col = positions
    if None in positions or not lines or end > len(lines):
        text = lines[entry.lineno - 1].strip() if 0 < entry.lineno <= len(lines) else ""
    else:
        chunk = [line.encode() for line in lines[start - 1:end]]
        if len(chunk) == 1:
            text = chunk[0][col:end_col].decode(errors="replace")
        else:
            chunk[0], chunk[-1] = chunk[0][col:], chunk[-1][:end_col]
            text = b"".join(chunk).decode(errors="replace")
    if not text:
        return None
    for source, mode in ((f"(\n{text}\n)", "eval"), (text.strip(), "exec")):
        try:
            tree = ast.parse(source, mode=mode)
        except SyntaxError:
            continue
        return tree.body if mode == "eval" else (tree.body[0] if tree.body else None)
    return None


def _call_from(node: ast.AST, frame: types.FrameType, hinted: bool) -> FailingCall | None:
    for candidate in _failing_nodes(node):
        op, cross_device = _op_of(candidate, frame)
        if cross_device and not hinted:
            continue
        tensors = _tensors(_operand_nodes(candidate), frame)
        devices = _devices(tensors)
        if len(devices) > 1:
            return FailingCall(frame, op, ast.unparse(candidate), tensors, devices)
    return None


def _failing_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The expression itself first, then (when a whole line stood in for it) the calls and
    operators inside it, outermost first."""
    yield node
    for inner in ast.walk(node):
        if inner is not node and isinstance(inner, (ast.Call, ast.BinOp, ast.Subscript, ast.Compare, ast.AugAssign)):
            yield inner


def _op_of(node: ast.AST, frame: types.FrameType) -> tuple[str, bool]:
    """The op as %%devcheck names it (``F.linear``, ``Tensor.__matmul__``), and whether it may
    lawfully take inputs on different devices."""
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute):
            base = _value(func.value, frame)
            if isinstance(base, _T):
                return f"Tensor.{func.attr}", func.attr in _CROSS_DEVICE
            return ast.unparse(func), func.attr in _CROSS_DEVICE
        return ast.unparse(func), False
    if isinstance(node, (ast.BinOp, ast.AugAssign)):
        dunder = _BINARY_DUNDERS.get(type(node.op), "operator")
        if isinstance(node, ast.AugAssign):
            dunder = dunder.replace("__", "__i", 1)
        return f"Tensor.{dunder}", False
    if isinstance(node, ast.Subscript):
        return "Tensor.__getitem__", False
    return ast.unparse(node), False


def _operand_nodes(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.Call):
        out = [node.func.value] if isinstance(node.func, ast.Attribute) else []
        out.append(node.func)  # a module being called brings its parameters
        out.extend(node.args)
        out.extend(k.value for k in node.keywords)
        return out
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.AugAssign):
        return [node.target, node.value]
    if isinstance(node, ast.Compare):
        return [node.left, *node.comparators]
    if isinstance(node, ast.Subscript):
        return [node.value] if isinstance(node.slice, ast.Slice) else [node.value, node.slice]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    return []


def _tensors(nodes: list[ast.AST], frame: types.FrameType, depth: int = 0) -> list:
    out: list = []
    seen: set[int] = set()

    def add(value: Any, depth: int = 0) -> None:
        if len(out) >= _MAX_TENSORS or depth > 2:
            return
        if isinstance(value, _T):
            if id(value) not in seen:
                seen.add(id(value))
                out.append(value)
        elif isinstance(value, _Module):
            for t in _module_sample(value):
                add(t, depth + 1)
        elif type(value) in (list, tuple):
            for item in value[:_MAX_TENSORS]:
                add(item, depth + 1)
        elif type(value) is dict:
            for item in list(dict.values(value))[:_MAX_TENSORS]:
                add(item, depth + 1)

    for node in nodes:
        value = _value(node, frame, depth)
        if value is not _MISSING:
            add(value)
    return out


def _module_sample(module: Any) -> list:
    """One parameter or buffer per device of ``module`` (read from its own dicts)."""

    by_device: dict[str, Any] = {}
    stack, visited = [module], 0
    while stack and visited < 10_000:
        m = stack.pop()
        visited += 1
        d = instance_dict(m)
        for group in ("_parameters", "_buffers"):
            for t in dict.values(d.get(group) or {}):
                if isinstance(t, _T):
                    by_device.setdefault(str(tb.device(t)), t)
        stack.extend(c for c in dict.values(d.get("_modules") or {}) if isinstance(c, _Module))
    return list(by_device.values())


def _devices(tensors: list) -> list[str]:
    # A CPU scalar joins any device's op (as in CUDA's own checks): it is not a second device.
    return sorted({str(tb.device(t)) for t in tensors if not (tb.device(t).type == "cpu" and tb.dim(t) == 0)})


def _from_locals(entries: list[Entry]) -> FailingCall | None:
    """The message says mismatch but no expression could be read: the innermost frame's own
    tensors (its locals, and ``self``'s parameters and buffers) stand in for the operands."""

    frame = next((e.frame for e in reversed(entries) if not locations.is_own_file(e.frame.f_code.co_filename)), None)
    if frame is None:
        return None
    values = list(dict.values(frame.f_locals)) if type(frame.f_locals) is dict else []
    owner = frame.f_locals.get("self") if type(frame.f_locals) is dict else None
    if isinstance(owner, _Module):
        d = instance_dict(owner)
        values += [t for group in ("_parameters", "_buffers") for t in dict.values(d.get(group) or {})]
        values += list(d.values())  # tensors kept as plain attributes
    tensors = [v for v in values if isinstance(v, _T)][:_MAX_TENSORS]
    devices = _devices(tensors)
    if len(devices) < 2:
        return None
    return FailingCall(frame, frame.f_code.co_name, "", tensors, devices)


def _value(node: ast.AST, frame: types.FrameType, depth: int = 0) -> Any:
    """The value ``node`` had in ``frame``, read from dicts and C-level fields only; _MISSING when
    reading it would run code (a property, ``__getattr__``, a call)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        local_vars = frame.f_locals
        if type(local_vars) is dict and node.id in local_vars:
            return dict.__getitem__(local_vars, node.id)
        globals_ = frame.f_globals
        return dict.get(globals_, node.id, _MISSING) if type(globals_) is dict else _MISSING
    if isinstance(node, ast.Starred):
        return _value(node.value, frame, depth)
    if isinstance(node, ast.Attribute):
        base = _value(node.value, frame, depth)
        return _MISSING if base is _MISSING else _attribute(base, node.attr)
    if isinstance(node, ast.Subscript):
        base = _value(node.value, frame, depth)
        if isinstance(base, _T):
            return base  # indexing keeps the device: the tensor stands in for the part
        key = _value(node.slice, frame, depth)
        if base is _MISSING or key is _MISSING:
            return _MISSING
        return _item(base, key)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _SAME_DEVICE_METHODS:
        base = _value(node.func.value, frame, depth)
        if isinstance(base, _T):
            return base  # same device: it stands in for the result
    if isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp)) and depth < _MAX_DEPTH:
        # A result we may not compute (self.fc(x), a * b): when every input sits on one
        # device, so does the result, and one of the inputs stands in for it.
        inputs = _tensors(_operand_nodes(node), frame, depth + 1)
        devices = _devices(inputs)
        if len(devices) == 1:
            return next(t for t in inputs if str(tb.device(t)) == devices[0])
    return _MISSING


def _attribute(base: Any, attr: str) -> Any:

    if isinstance(base, _T):
        if attr == "grad":
            return tb.grad(base)
        return base if attr in _SAME_DEVICE_METHODS else _MISSING
    if isinstance(base, types.ModuleType):
        return dict.get(base.__dict__, attr, _MISSING)
    d = instance_dict(base)
    if isinstance(base, _Module):
        for group in ("_parameters", "_buffers", "_modules"):
            members = d.get(group)
            if type(members) is dict and attr in members:
                return members[attr]
    if attr in d:
        return d[attr]
    return next((v for k, v in slot_values(base) if k == attr), _MISSING)


def _item(base: Any, key: Any) -> Any:
    if isinstance(base, _Module):

        modules = instance_dict(base).get("_modules")
        if type(modules) is dict:
            if type(key) is int:
                children = list(modules.values())
                return children[key] if -len(children) <= key < len(children) else _MISSING
            if type(key) is str:
                return modules.get(key, _MISSING)
        return _MISSING
    if isinstance(base, (list, tuple)) and type(key) is int:
        getter = list.__getitem__ if isinstance(base, list) else tuple.__getitem__
        return getter(base, key) if -len(base) <= key < len(base) else _MISSING
    if isinstance(base, dict) and (type(key) in (str, int) or isinstance(key, _T)):
        return dict.get(base, key, _MISSING)
    return _MISSING
