"""The call that raised, read from a traceback without running anything.

Python (3.11+) records, for each frame of a traceback, the exact expression that was
running (``F.linear(input, self.weight, self.bias)``, ``x @ w``, ``table[ids]``); from
the innermost frame outwards, that expression's operands are read statically (locals,
globals, a module's parameters and buffers, plain attributes and items: no property,
no ``__getattr__``, no user code). A tensor made right there by a factory call
(``torch.ones(8)``) is an operand too: a :class:`Temporary`, on the device its
``device=`` names (read statically) or the default device. The first expression whose
operands sit on more than one device is the failing call. The error's message is only
a hint: it decides nothing unless no frame's operands could be read, and even then
only the locals of the library function that raised stand in, never the namespace.
"""

from __future__ import annotations

import ast
import linecache
import re
import types
from dataclasses import dataclass
from itertools import islice
from typing import Any, Iterator

import torch

from ...runtime import tensor_getters
from ..namespace import MISSING, attribute_of, item_of
from ..objects import instance_dict, script_object, script_tensors, type_is_one_of, type_name
from . import locations, user_functions
from .factories import FACTORIES, LIKE_FACTORIES

_T = torch.Tensor
_Module = torch.nn.Module
_MISSING: Any = object()

#: Messages that say a mismatch; used only when no frame's operands could be read.
_MISMATCH_WORDS = re.compile(r"on the same device|same device as|should be the same|device type|expected device|"
                             r"Expected all tensors", re.IGNORECASE)
#: Words every device-mismatch message has one of, from PyTorch's own checks ("on the same
#: device", "is on CPU, but expected it to be on GPU", "torch.cuda.FloatTensor") to a backend's
#: or a library's; the device types of the operands count too ("Input is not an XLA tensor").
_DEVICE_WORDS = re.compile(r"\b(?:devices?|cpu|cuda|gpu|host|accelerator)\b", re.IGNORECASE)
#: Calls whose inputs may lawfully sit on different devices: their failing for mixed devices
#: needs the message to say so too.
_CROSS_DEVICE = frozenset({"to", "copy_", "cuda", "cpu", "xpu", "mps", "set_", "type", "index_put_",
                           "pin_memory", "_to_copy"})
#: Methods that give a tensor on the same device as ``self`` (a stand-in for the operand).
SAME_DEVICE_METHODS = frozenset({
    "view", "reshape", "flatten", "squeeze", "unsqueeze", "transpose", "permute", "contiguous", "t", "float",
    "half", "bfloat16", "double", "long", "int", "bool", "detach", "clone", "expand", "expand_as", "view_as",
    "narrow", "chunk", "split", "T", "mT", "data", "mean", "sum", "abs", "exp", "log", "sqrt", "softmax",
    "new_zeros", "new_ones", "new_full", "new_empty", "new_tensor",
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
#: Errors that are never a device mismatch, whatever their message says (but see _MISSING_KERNEL).
_NEVER = (RecursionError, NotImplementedError)
#: The dispatcher's NotImplementedError for an op with no kernel on the device it chose: with
#: mixed operands it is a mismatch (CUDA's conv3d of a host input picks the host's 3-D kernel
#: and looks for it on the GPU), so those operands are read like any other failing call's.
_MISSING_KERNEL = re.compile(r"Could not run '[\w:.]+' with arguments from the '\w+' backend")


@dataclass(frozen=True)
class Entry:
    """One frame of a traceback, at the instruction that was running."""

    frame: types.FrameType
    lineno: int
    lasti: int


@dataclass(frozen=True)
class Temporary:
    """A tensor made by a factory call inside the failing expression: never named, its device
    read from the call (``device=`` evaluated statically) or the default device."""

    device: str
    #: ``torch.ones``, ``torch.zeros_like`` …: the factory as written, and the call's source text.
    factory: str
    text: str
    #: Whether the call says ``device=``.
    given: bool
    #: Where the call is: file, line and function, and the live frame when there is one.
    filename: str
    lineno: int
    function: str
    frame: types.FrameType | None = None


@dataclass(frozen=True)
class Traced:
    """An operand of a call that ``torch.compile`` traced (never run): the name the user's line
    gives it and the device tracing saw (a fake tensor's)."""

    name: str
    device: str
    filename: str
    lineno: int
    function: str


@dataclass(frozen=True, eq=False)
class Result:
    """The result of an expression on the failing line that was never computed (``self.fc(x)``,
    ``a * b``): on the one device all its inputs are on, as ``stand_in``, one of those inputs, is.
    It is shown as the expression, never as the input, which is not an operand of the call."""

    text: str
    stand_in: Any

    @property
    def device(self) -> str:
        return device_of(self.stand_in)


@dataclass(frozen=True)
class FailingCall:
    """The expression that raised, in which frame, and its operands: tensors and temporaries."""

    frame: types.FrameType
    op: str
    text: str
    tensors: list
    devices: list[str]
    #: The line of ``frame`` the expression is on.
    lineno: int = 0


def tensor_inputs(args: tuple, kwargs: dict) -> Iterator[Any]:
    """The tensors a call passes, in its arguments or one list or tuple deep."""
    for value in (*args, *kwargs.values()):
        vt = type(value)
        if issubclass(vt, _T):
            yield value
        elif vt is list or vt is tuple:
            for item in value:
                if issubclass(type(item), _T):
                    yield item


def first_line(exc: BaseException | None) -> str:
    """``RuntimeError: its message's first line`` (the class alone when the message is empty)."""
    if exc is None:
        return ""
    try:
        text = BaseException.__str__(exc).strip().splitlines()
    except Exception:
        text = []
    return f"{type_name(type(exc))}: {text[0]}" if text else type_name(type(exc))


def op_name(func: Any) -> str:
    """How a function is named in an explanation: ``Tensor.add``, ``F.linear``, ``torch.cat``."""
    name = getattr(func, "__name__", repr(func))
    qual = getattr(func, "__qualname__", name)
    module = getattr(func, "__module__", "") or ""
    if qual.startswith(("TensorBase.", "Tensor.", "_TensorBase.")):
        return f"Tensor.{name}"
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{name}"
    if qual.startswith("_VariableFunctionsClass.") or module == "torch":
        return f"torch.{name}"
    return f"{module}.{name}" if module else name


def traceback_entries(tb_: types.TracebackType | None) -> Iterator[Entry]:
    seen = 0
    while type(tb_) is types.TracebackType and seen < 256:
        yield Entry(tb_.tb_frame, tb_.tb_lineno or tb_.tb_frame.f_lineno, tb_.tb_lasti)
        tb_ = tb_.tb_next
        seen += 1


def failing_call(entries: list[Entry], exc: BaseException) -> FailingCall | None:
    """From the innermost frame outwards (devinspect's own frames skipped, and none further
    out than the user's innermost line, unless that line ran inside ``functional_call``),
    the first running expression whose operands sit on more than one device."""
    if issubclass(type(exc), _NEVER) and not _MISSING_KERNEL.search(message(exc)):
        return None
    hinted = bool(_MISMATCH_WORDS.search(message(exc)))
    looked = 0
    for position in range(len(entries) - 1, -1, -1):
        entry = entries[position]
        filename = entry.frame.f_code.co_filename
        if locations.is_own_file(filename) or locations.is_compile_machinery(filename) \
                or _is_module_call_plumbing(entry.frame.f_code):
            continue
        looked += 1
        node = running_expression(entry)
        if node is not None:
            found = _call_from(node, entry, hinted, exc)
            if found is not None:
                return found
        if (locations.is_user_code(entry.frame.f_code) and not _substituted_by_caller(entries[:position])) \
                or looked >= _MAX_FRAMES:
            break
    if hinted:
        return _from_locals(entries)
    return None


#: Where ``torch.func.functional_call`` runs a module with tensors of a dict in place of its own;
#: they are the module's again when the error is read, so the caller's line names them.
_SUBSTITUTING_FILES = ("/torch/nn/utils/stateless.py", "/torch/_functorch/functional_call.py")


def _substituted_by_caller(callers: list[Entry]) -> bool:
    """Whether a user frame ran inside ``functional_call``, called from further out in the user's code
    (``callers``: the frames outside it, outermost first)."""
    for outer in reversed(callers):
        if outer.frame.f_code.co_filename.replace("\\", "/").endswith(_SUBSTITUTING_FILES):
            return True
        if locations.is_user_code(outer.frame.f_code):
            return False
    return False


#: Where ``Module.__call__`` dispatches to ``forward``: it passes the module and its inputs on,
#: so the line that called the module, or the module's own code, names the failing call.
_MODULE_FILE = torch.nn.modules.module.__file__
_CALL_PLUMBING = frozenset({"_wrapped_call_impl", "_call_impl"})


def _is_module_call_plumbing(code: types.CodeType) -> bool:
    return code.co_name in _CALL_PLUMBING and code.co_filename == _MODULE_FILE


def names_a_device(exc: BaseException, devices: list[str]) -> bool:
    """Whether the error's message names a device: a call whose inputs sit on several devices
    may fail for another reason (a checkpoint of the wrong shape, a missing argument), and
    the operands' devices alone would then make up a culprit. Never enough on its own: a
    mismatch is still decided by the operands' devices."""
    text = message(exc)
    if _DEVICE_WORDS.search(text):
        return True
    kinds = {device.partition(":")[0] for device in devices} - {""}
    return any(re.search(rf"\b{re.escape(kind)}\b", text, re.IGNORECASE) for kind in kinds)


def says_mismatch(exc: BaseException) -> bool:
    """Whether the error's message says its inputs were on different devices (a hint only)."""
    return not isinstance(exc, _NEVER) and bool(_MISMATCH_WORDS.search(message(exc)))


def message(exc: BaseException) -> str:
    """An exception's message, read without calling a user class's ``__str__``."""
    try:
        return BaseException.__str__(exc)
    except Exception:
        return ""


def running_expression(entry: Entry) -> ast.AST | None:
    """The expression the frame was running when the error passed through it (Python 3.11+
    keeps its exact position), parsed; None when its source is not at hand."""
    code = entry.frame.f_code
    positions: tuple = (None, None, None, None)
    if hasattr(code, "co_positions"):
        try:
            positions = list(code.co_positions())[entry.lasti // 2]
        except (IndexError, ValueError):
            pass
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
    first = entry.lineno if None in positions or not lines or end > len(lines) else start
    for source, mode in ((f"(\n{text}\n)", "eval"), (text.strip(), "exec")):
        try:
            tree = ast.parse(source, mode=mode)
        except SyntaxError:
            continue
        # Numbered as the file is: a factory on the second line of an expression is made there.
        tree = ast.increment_lineno(tree, first - (2 if mode == "eval" else 1))
        return tree.body if mode == "eval" else (tree.body[0] if tree.body else None)
    return None


def _call_from(node: ast.AST, entry: Entry, hinted: bool, exc: BaseException) -> FailingCall | None:
    frame = entry.frame
    for candidate in _failing_nodes(node):
        op, cross_device = _op_of(candidate, frame)
        if cross_device and not hinted:
            continue
        operands = _operands(operand_nodes(candidate, frame), frame, entry.lineno)
        devices = devices_of(operands)
        if len(devices) > 1 and (hinted or names_a_device(exc, devices)):
            return FailingCall(frame, op, ast.unparse(candidate), operands, devices, entry.lineno)
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
            if _is_tensor(base):
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


def operand_nodes(node: ast.AST, frame: types.FrameType | None = None) -> list[ast.AST]:
    if isinstance(node, ast.Call):
        out = []
        # A method's object is an operand (t.add(u), model.generate(ids)); the module that holds a
        # submodule being called (self in self.fc(x)) is not: the submodule's parameters are.
        if isinstance(node.func, ast.Attribute) and not (frame is not None and _is_module(_value(node.func, frame))):
            out.append(node.func.value)
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


def _is_tensor(value: Any) -> bool:
    return issubclass(type(value), _T)


def _is_module(value: Any) -> bool:
    return issubclass(type(value), _Module)


def _operands(nodes: list[ast.AST], frame: types.FrameType, lineno: int, depth: int = 0) -> list:
    """The tensors and temporaries the expressions ``nodes`` stand for, in ``frame``."""
    out: list = []
    seen: set[int] = set()
    for node in nodes:
        value = _value(node, frame, depth, lineno)
        if value is not _MISSING:
            _add_operand(value, out, seen)
    return out


def _add_operand(value: Any, out: list, seen: set[int], level: int = 0) -> None:
    """Add ``value``'s tensors to ``out`` (a module's sample, a list's or dict's items). A function
    of its own, not a closure: a closure that calls itself is a cycle that keeps ``out``, and the
    tensors in it, alive until the cyclic collector runs."""
    if len(out) >= _MAX_TENSORS or level > 2:
        return
    vt = type(value)
    if issubclass(vt, _T) or vt is Temporary or vt is Result:
        if id(value) not in seen:
            seen.add(id(value))
            out.append(value)
    elif issubclass(vt, _Module):
        for t in _module_sample(value):
            _add_operand(t, out, seen, level + 1)
    elif vt is list or vt is tuple:
        for item in value[:_MAX_TENSORS]:
            _add_operand(item, out, seen, level + 1)
    elif vt is dict:
        for item in list(dict.values(value))[:_MAX_TENSORS]:
            _add_operand(item, out, seen, level + 1)


def _module_sample(module: Any) -> list:
    """One parameter or buffer per device of ``module`` (read from its own dicts)."""
    by_device: dict[str, Any] = {}
    stack, visited = [module], 0
    while stack and visited < 10_000:
        m = stack.pop()
        visited += 1
        d = instance_dict(m)
        for t in _own_tensors(d):
            if _is_tensor(t):
                by_device.setdefault(str(tensor_getters.device(t)), t)
        children = d.get("_modules")
        stack.extend(c for c in (dict.values(children) if type(children) is dict else ()) if _is_module(c))
    return list(by_device.values())


#: Tensors read from one TorchScript module's C++ side, at most.
_MAX_SCRIPT_TENSORS = 10_000


def _own_tensors(d: dict) -> list:
    """A module's parameters and buffers, from its instance dict ``d``; all of them for a
    TorchScript module, whose tensors and submodules live in C++."""
    script = script_object(d)
    if script is not None:
        return [t for _, t in islice(script_tensors(script[0], "", script[1]), _MAX_SCRIPT_TENSORS)]
    out: list = []
    for group in ("_parameters", "_buffers"):
        members = d.get(group)
        out += list(dict.values(members)) if type(members) is dict else []
    return out


def device_of(operand: Any) -> str:
    """The device of a tensor, a :class:`Temporary`, :class:`Traced` or :class:`Result` operand."""
    return operand.device if type_is_one_of(operand, (Temporary, Traced, Result)) else str(tensor_getters.device(operand))


def devices_of(operands: list) -> list[str]:
    # A CPU scalar joins any device's op (as in CUDA's own checks): it is not a second device.
    found = set()
    for o in operands:
        o = o.stand_in if type(o) is Result else o
        if type_is_one_of(o, (Temporary, Traced)):
            found.add(o.device)
        elif not (tensor_getters.device(o).type == "cpu" and tensor_getters.dim(o) == 0):
            found.add(str(tensor_getters.device(o)))
    return sorted(found)


def _from_locals(entries: list[Entry]) -> FailingCall | None:
    """The message says mismatch but no expression could be read: the tensors of the library
    function that raised (its locals, and ``self``'s parameters and buffers) stand in for the
    operands. Never a cell's own frame (its locals are the whole namespace) or user code."""
    entry = next((e for e in reversed(entries) if not locations.is_own_file(e.frame.f_code.co_filename)), None)
    if entry is None:
        return None
    frame = entry.frame
    if locations.is_user_code(frame.f_code) or frame.f_locals is frame.f_globals:
        return None
    local_vars = locations.frame_locals(frame)
    values = list(dict.values(local_vars))
    owner = dict.get(local_vars, "self")
    if _is_module(owner):
        d = instance_dict(owner)
        values += _own_tensors(d)
        values += list(dict.values(d))  # tensors kept as plain attributes
    tensors = [v for v in values if _is_tensor(v)][:_MAX_TENSORS]
    devices = devices_of(tensors)
    if len(devices) < 2:
        return None
    return FailingCall(frame, frame.f_code.co_name, "", tensors, devices, entry.lineno)


# -- reading an expression's value without running anything ----------------------------------


def _value(node: ast.AST, frame: types.FrameType, depth: int = 0, lineno: int = 0) -> Any:
    """The value ``node`` had in ``frame``, read from dicts and C-level fields only; _MISSING when
    reading it would run code (a property, ``__getattr__``, a call). A factory call is a
    :class:`Temporary`."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        local_vars = locations.frame_locals(frame)
        if node.id in local_vars:
            return dict.__getitem__(local_vars, node.id)
        globals_ = frame.f_globals
        if type(globals_) is dict and node.id in globals_:
            return dict.__getitem__(globals_, node.id)
        builtins = dict.get(globals_, "__builtins__") if type(globals_) is dict else None
        return dict.get(builtins, node.id, _MISSING) if type(builtins) is dict else _MISSING
    if isinstance(node, ast.Starred):
        return _value(node.value, frame, depth, lineno)
    if isinstance(node, (ast.List, ast.Tuple)):
        items = [_value(e, frame, depth, lineno) for e in node.elts]
        return [v for v in items if v is not _MISSING]
    if isinstance(node, ast.Attribute):
        base = _value(node.value, frame, depth, lineno)
        if base is _MISSING:
            return _MISSING
        if (_is_tensor(base) or type_is_one_of(base, (Temporary, Result))) and node.attr in SAME_DEVICE_METHODS:
            return base  # same device: it stands in for the attribute
        if type_is_one_of(base, (Temporary, Result)):
            return _MISSING
        if _is_tensor(base) and node.attr == "shape":
            return tensor_getters.shape(base)  # a size read from the C struct (what a helper is made from: zeros(x.shape))
        value = attribute_of(base, node.attr)
        return _MISSING if value is MISSING else value
    if isinstance(node, ast.Subscript):
        base = _value(node.value, frame, depth, lineno)
        if _is_tensor(base):
            return base  # indexing keeps the device: the tensor stands in for the part
        key = _value(node.slice, frame, depth, lineno)
        if base is _MISSING or key is _MISSING:
            return _MISSING
        if type(base) is torch.Size and type(key) is int and -len(base) <= key < len(base):
            return tuple.__getitem__(base, key)
        value = item_of(base, key)
        return _MISSING if value is MISSING else value
    if isinstance(node, ast.Call):
        made = _factory_call(node, frame, depth, lineno)
        if made is _MISSING:
            made = _returned_by_users_function(node, frame, depth, lineno)
        if made is not _MISSING:
            return made
        if isinstance(node.func, ast.Attribute) and node.func.attr in SAME_DEVICE_METHODS:
            base = _value(node.func.value, frame, depth, lineno)
            if _is_tensor(base) or type_is_one_of(base, (Temporary, Result)):
                return base  # same device: it stands in for the result
    if isinstance(node, (ast.Call, ast.BinOp, ast.UnaryOp, ast.Compare)) and depth < _MAX_DEPTH:
        # A result we may not compute (self.fc(x), a * b): when every input sits on one
        # device, so does the result, and one of the inputs stands in for it.
        inputs = _operands(operand_nodes(node, frame), frame, lineno, depth + 1)
        devices = devices_of(inputs)
        if len(devices) == 1:
            stand_in = next(t for t in inputs if device_of(t) == devices[0])
            return Result(ast.unparse(node), stand_in.stand_in if type(stand_in) is Result else stand_in)
    return _MISSING


def value_in_frame(node: ast.AST, frame: types.FrameType) -> Any:
    """The value the expression ``node`` had in ``frame``, read as :func:`failing_call` reads
    operands (no property, no ``__getattr__``, no call); None when that would run code."""
    value = _value(node, frame)
    return None if value is _MISSING else value


def _factory_call(node: ast.Call, frame: types.FrameType, depth: int, lineno: int) -> Any:
    """A :class:`Temporary` for ``torch.<factory>(…)``, or _MISSING for any other call."""
    func = node.func
    if not (isinstance(func, ast.Attribute) and (func.attr in FACTORIES or func.attr in LIKE_FACTORIES)):
        return _MISSING
    if _value(func.value, frame, depth, lineno) is not torch:
        return _MISSING
    keyword = next((k.value for k in node.keywords if k.arg == "device"), None)
    device: Any = None
    if keyword is not None:
        device = _value(keyword, frame, depth, lineno)
        device = _device_name(device)
        if device is None:
            return _MISSING  # a device= we cannot read: no guess
    elif func.attr in LIKE_FACTORIES:
        template = _value(node.args[0], frame, depth, lineno) if node.args else _MISSING
        if not (_is_tensor(template) or type_is_one_of(template, (Temporary, Result))):
            return _MISSING
        device = device_of(template)
    else:
        device = str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "cpu"
    return Temporary(device, f"torch.{func.attr}", ast.unparse(node), keyword is not None, frame.f_code.co_filename,
                     getattr(node, "lineno", 0) if lineno else frame.f_lineno, frame.f_code.co_name, frame)


def _returned_by_users_function(node: ast.Call, frame: types.FrameType, depth: int, lineno: int) -> Any:
    """A :class:`Temporary` for a call of the user's function (``causal_mask(6)``, behind
    ``functools.lru_cache`` too) that passes it no tensor and whose one ``return`` makes the tensor
    with a factory call without ``device=``: on the default device, made at that line."""
    function = user_functions.user_function(_value(node.func, frame, depth, lineno))
    if function is None or function.code is None or function.makes is not None:
        return _MISSING
    for argument in [*node.args, *(k.value for k in node.keywords)]:
        value = _value(argument, frame, depth, lineno)
        if value is _MISSING or _is_tensor(value) or type_is_one_of(value, (Temporary, Result)):
            return _MISSING
    found = user_functions.returned_factory(function.code)
    if found is None:
        return _MISSING
    statement, call = found
    device = str(torch.get_default_device()) if hasattr(torch, "get_default_device") else "cpu"
    code = function.code
    return Temporary(device, f"torch.{call.func.attr}", ast.unparse(call), False, code.co_filename, statement.lineno,
                     code.co_name)


def _device_name(value: Any) -> str | None:
    """A device written as a ``torch.device``, a string or an int index, as devinspect names it."""
    vt = type(value)
    if vt is torch.device:
        return str(value)
    if vt is str:
        try:
            return str(torch.device(value))
        except (RuntimeError, ValueError, TypeError):
            return None
    if vt is Temporary or vt is Result:
        return value.device
    return None
