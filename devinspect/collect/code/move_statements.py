"""Moves whose result is dropped, read from the user's code: ``x.to(dev)`` as a statement.

``Tensor.to`` (and ``.cuda()``, ``.cpu()``, a ``.half().to(dev)`` chain) returns a moved copy and
leaves the tensor where it was; ``Module.to`` moves a module in place, which is why the tensor
form is so often written as if it did too. A statement that is nothing but such a call drops the
copy. These readers find such statements in the session's cells and in a function's body, with
the device each moves to; they never run anything.
"""

from __future__ import annotations

import ast
import linecache
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ...runtime import tensor_getters
from . import locations, user_code

#: The methods that move a tensor to a device named by the method itself.
_NAMED_MOVES = frozenset({"cuda", "cpu", "xpu", "mps"})


def _moves() -> frozenset[str]:
    """The move methods: ``to``, the named ones, and a PrivateUse1 backend's (``.sim()``)."""
    backend = torch._C._get_privateuse1_backend_name()
    return _NAMED_MOVES | {"to", *((backend,) if backend != "privateuseone" else ())}


@dataclass(frozen=True)
class Dropped:
    """A dropped move: the statement, the tensor it moves (as written) and the move's call."""

    statement: user_code.Statement
    target: str
    call: ast.Call

    @property
    def written(self) -> str:
        """The move's call as the user wrote it (``x.to("cuda")``, quotes and spacing kept)."""
        text = "".join(linecache.getlines(self.statement.filename))
        return ast.get_source_segment(text, self.call) or ast.unparse(self.call)


def _target(call: ast.Call) -> ast.expr | None:
    """What a move chain starts from: ``x`` for ``x.half().to(dev)``, ``batch["ids"]`` for
    ``batch["ids"].cuda()``; None when it starts from anything but a name, attribute or item."""
    node = call.func.value if isinstance(call.func, ast.Attribute) else None
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        node = node.func.value
    if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript)):
        return node
    return None


def dropped_in(body: list[ast.stmt], filename: str, cell: int | None, function: str = "") -> Iterator[Dropped]:
    """Every dropped move in ``body`` (nested blocks included, nested functions not)."""
    moves = _moves()
    for node in user_code.statements(body):
        call = node.value if isinstance(node, ast.Expr) else None
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and call.func.attr in moves:
            target = _target(call)
            if target is not None:
                yield Dropped(user_code.Statement(filename, node.lineno, node, cell, function), ast.unparse(target), call)


def device_argument(call: ast.Call) -> ast.expr | str | None:
    """The device a move names: the expression of ``.to(dev)`` / ``.to(device=dev)`` / ``.cuda(1)``,
    the method's own device type for ``.cpu()`` / ``.cuda()``; None for ``.to(torch.float16)`` or
    anything unreadable (read, not guessed: a dtype is not a device)."""
    method = call.func.attr  # type: ignore[union-attr]
    given = next((k.value for k in call.keywords if k.arg == "device"), None)
    if method != "to":
        if given is None and call.args:
            given = call.args[0]
        return given if given is not None else method
    return given if given is not None else (call.args[0] if call.args else None)


def device_of(call: ast.Call, read: Callable[[ast.expr], Any]) -> str | None:
    """The device a move goes to, as devinspect names devices (``cuda:0``, ``sim:0``, ``cpu``), its
    argument read by ``read`` (a namespace's or a frame's values, statically); None when unknown."""
    given = device_argument(call)
    if given is None:
        return None
    if isinstance(given, str):
        value: Any = given
    elif isinstance(given, ast.Constant):
        value = given.value
    else:
        value = read(given)
    if type(value) is int and call.func.attr != "to":  # type: ignore[union-attr]
        value = f"{call.func.attr}:{value}"  # type: ignore[union-attr]
    if issubclass(type(value), torch.Tensor):
        return str(tensor_getters.device(value))
    if type(value) not in (str, torch.device):
        return None
    try:
        device = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        return None
    if device.type != "cpu" and device.index is None:
        device = torch.device(device.type, current_index(device.type))
    return str(device)


def current_index(device_type: str) -> int:
    """The device ``"cuda"`` means now (CUDA is asked only once initialised: reading never
    initialises it)."""
    if device_type == "cuda" and not torch.cuda.is_initialized():
        return 0
    try:
        return int(torch.get_device_module(device_type).current_device())
    except Exception:  # a type without a module: its first device
        return 0


def dropped_before(name: str, filename: str, body: list[ast.stmt], line: int, cell: int | None,
                   function: str = "") -> Dropped | None:
    """The last dropped move of ``name`` in ``body`` before ``line`` that no binding of ``name``
    between it and ``line`` undoes (a ``for`` loop whose body holds both binds it first)."""
    bound = user_code.last_assignment(name, filename, body, line, cell, function)
    found = None
    for dropped in dropped_in(body, filename, cell, function):
        if dropped.target != name or dropped.statement.line >= line:
            continue
        if bound is not None and bound.line > dropped.statement.line:
            continue
        if found is None or dropped.statement.line > found.statement.line:
            found = dropped
    return found


def dropped_in_session(name: str, current: user_code.Cell | None, line: int) -> Dropped | None:
    """A dropped move of the namespace variable ``name`` that its last binding does not undo: in the
    current cell before ``line``, else in the latest earlier cell, after the cell that binds it."""
    for cell in reversed(user_code.session_cells()):
        if current is not None and cell.number > current.number:
            continue
        tree = user_code.parse(cell.filename)
        if tree is None:
            continue
        before = line if current is not None and cell.number == current.number else 1 << 30
        found = dropped_before(name, cell.filename, tree.body, before, cell.number)
        if found is not None:
            return found
        if user_code.last_assignment(name, cell.filename, tree.body, before, cell.number) is not None:
            return None  # bound here, and not moved after: an older move is undone
    return None


def latest_dropped(read: Callable[[str], Any]) -> list[tuple[Dropped, str]]:
    """The dropped moves of the session's latest cells that still stand (the variable not bound
    again since), each with the device it moves to; ``read(name)`` reads a namespace value."""
    out: list[tuple[Dropped, str]] = []
    bound_later: set[str] = set()
    decided: set[str] = set()
    for cell in reversed(user_code.session_cells()[-user_code.RECENT_CELLS:]):
        tree = user_code.parse(cell.filename)
        if tree is None:
            continue
        found = list(dropped_in(tree.body, cell.filename, cell.number))
        for dropped in sorted(found, key=lambda d: -d.statement.line):
            root = dropped.target.split(".")[0].split("[")[0]
            if root in bound_later or dropped.target in decided:
                continue
            later = user_code.last_assignment(root, cell.filename, tree.body, 1 << 30, cell.number)
            if later is not None and later.line > dropped.statement.line:
                continue
            device = device_of(dropped.call, lambda node: read(ast.unparse(node)))
            if device is not None:
                decided.add(dropped.target)
                out.append((dropped, device))
        bound_later |= {n for node in user_code.statements(tree.body) for n in user_code.assigned_names(node)}
    return out


def line_of(dropped: Dropped) -> Any:
    """The :class:`~devinspect.model.records.SourceLine` of a dropped move."""
    statement = dropped.statement
    return locations.source_line(statement.filename, statement.line, statement.function or "<module>")


def dropped_records(namespace: Any) -> list[Any]:
    """The dropped moves of the latest cells that still stand, as records (what a scan keeps)."""
    from ...model import DroppedMove
    from ..namespace import MISSING, object_at

    def read(name: str) -> Any:
        value = object_at(namespace, name)
        return None if value is MISSING else value

    return [DroppedMove(d.target, d.written, device, line_of(d)) for d, device in latest_dropped(read)]
