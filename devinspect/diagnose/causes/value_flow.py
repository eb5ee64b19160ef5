"""Where a computed value got its device: back through the lines that computed it.

``alibi = build_alibi_tensor(mask, heads)`` is on the host because ``mask`` is, and ``mask`` was
made three lines up by ``torch.ones(...)`` without ``device=`` (in one branch of a conditional
expression); ``layer_state = tuple(s[:, :, i] for s in state[2:])`` is on the host because the
``state`` its caller passed in is. A computed value is not its own cause: the input it was
computed from that sits on the same wrong device is, followed back within the function to the
line that made it, or to the parameter it came in by (its caller's argument is then followed by
the caller's reader).

Read statically: the function's source text and the frame's locals by exact type; no user code
runs. A local's value is the one it holds now, which is the value the statement read unless the
name was bound again since; the trail stops where no input is on the wrong device.
"""

from __future__ import annotations

import ast
import dataclasses
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from ...collect import instance_dict, locations, user_code
from ...model import Cause
from ...runtime import tensor_getters
from . import creation_sites, device_names, made_in_code, maker_calls

_T = torch.Tensor
#: How many statements back a trail goes before it gives up.
_MAX_STEPS = 8

#: ``device_at(frame, line, avoid, prefer)``: how an edit at ``line`` of ``frame``'s function names
#: the right device (a local that has a value there, those in ``prefer`` first; the user's device
#: variable; a literal).
DeviceAt = Callable[[types.FrameType, int, set, tuple], str]


def device_namer(namespace: Mapping[str, Any], target: str) -> DeviceAt:
    """How an edit at a line of a frame names ``target``: in the user's own words there."""
    return lambda frame, line, avoid, prefer: device_names.device_expression(namespace, target, frame, avoid=avoid,
                                                                             prefer=prefer, line=line)


@dataclass(frozen=True)
class Trail:
    """The end of a trail: the line that made the value (with its edit), or the parameter of the
    function the value came in by."""

    origin: Cause | None = None
    parameter: str | None = None
    #: The local the trail ended at: the one the origin makes, or the parameter.
    name: str = ""


def traced_back(name: str, frame: types.FrameType, before: int, off: str, device_at: DeviceAt) -> Trail | None:
    """Where the local ``name`` of ``frame``, on device ``off``, got that device: the line that made
    it (or an input it was computed from), or the parameter it came in by; None when the trail
    ends at no such line (a value computed from nothing on ``off``)."""
    node = user_code.function_node(frame.f_code)
    if node is None:
        return None
    return _trail(name, frame, node, before, off, device_at, set())


def _trail(name: str, frame: types.FrameType, node: ast.FunctionDef | ast.AsyncFunctionDef, before: int, off: str,
           device_at: DeviceAt, seen: set) -> Trail | None:
    if (name, before) in seen or len(seen) >= _MAX_STEPS:
        return None
    seen.add((name, before))
    code = frame.f_code
    statement = user_code.last_assignment(name, code.co_filename, node.body, before,
                                          locations.cell_number(code.co_filename), code.co_name)
    if statement is None:
        return Trail(parameter=name, name=name) if name in user_code.parameter_names(node) else None
    origin = _made_here(name, frame, statement, before, device_at)
    if origin is not None:
        return Trail(origin=origin, name=name)
    value = getattr(statement.node, "value", None) or getattr(statement.node, "iter", None)
    if value is None:
        return None
    made: list[Trail] = []  # inputs each made on ``off`` by a factory: every one of those lines is edited
    # A name the statement binds again (images, targets = self.transform(images, targets)) holds its new
    # value now: what it was, the trail cannot read, so it follows it as an input on ``off`` too.
    rebound = user_code.assigned_names(statement.node) if isinstance(statement.node, ast.Assign) else set()
    for read in _inputs(value):
        if not holds_device(_local(frame, read), off) and read not in rebound:
            continue
        found = _trail(read, frame, node, statement.line, off, device_at, seen)
        if found is not None and (found.origin is None or found.origin.made_by != "factory"):
            if not made:
                return found
        elif found is not None:
            made.append(found)
    if not made:  # zip(self.cell_anchors, …): a method handed the device that assigns the attribute without it
        owner = _local(frame, "self")
        for attr in dict.fromkeys(n.attr for n in ast.walk(value) if isinstance(n, ast.Attribute)
                                  and isinstance(n.value, ast.Name) and n.value.id == "self"):
            edit = made_in_code.unmoved_in_device_method(type(owner), attr) \
                if holds_device(dict.get(instance_dict(owner), attr), off) else None
            if edit is not None:
                return Trail(origin=Cause(edit.where, "factory", edit), name=f"self.{attr}")
        # anchors = self.anchor_generator(images, features), given nothing on ``off``: that module's forward
        module = _called_module(value, frame)
        found = made_in_code.forward_made_on_default(type(module)) if module is not None else None
        if found is not None:
            return Trail(origin=Cause(found[1].where, "factory", found[1]), name=found[0])
    if len(made) > 1:  # di and dj of torch.meshgrid(di, dj): editing one leaves the other on the host
        extra = tuple(e for t in made[1:] for e in t.origin.edits if e not in made[0].origin.edits)
        return Trail(origin=dataclasses.replace(made[0].origin, also=made[0].origin.also + extra), name=made[0].name)
    return made[0] if made else None


def _made_here(name: str, frame: types.FrameType, statement: user_code.Statement, before: int,
               device_at: DeviceAt) -> Cause | None:
    """The edit of the statement that binds ``name`` when it makes the value (a factory call
    without ``device=``, also in one branch of a conditional or inside a comprehension; a loop
    over host batches), with the device named as that line can see it."""
    branch = _branch_taken(statement.node, frame)
    if branch is not None and not creation_sites.factory_calls(branch):
        return None  # the branch that ran passes a value through: its input is the cause
    value = getattr(statement.node, "value", None)
    reads = tuple(_inputs(value)) if value is not None else ()  # the line's own inputs name the device best
    device_expr = device_at(frame, statement.line, {name}, reads)
    origin = creation_sites.local_origin(name, frame, before, [name], device_expr) or \
        maker_calls.maker_origin(name, statement, frame, device_expr)
    if origin is None or origin.made_by not in ("factory", "loop"):
        return None
    if origin.where.line != statement.line:  # an earlier line made it: name the device as that line can
        origin = creation_sites.local_origin(name, frame, before, [name],
                                             device_at(frame, origin.where.line, {name}, ()))
    return origin


def _branch_taken(statement: ast.stmt, frame: types.FrameType) -> ast.expr | None:
    """For ``x = a if t is None else b`` (the test a local compared with None), the branch that ran;
    None for any other statement or a test that cannot be read without running code."""
    value = getattr(statement, "value", None)
    if not isinstance(value, ast.IfExp):
        return None
    test = value.test
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Is, ast.IsNot))
            and isinstance(test.left, ast.Name) and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value is None):
        return None
    local_vars = locations.frame_locals(frame)
    if test.left.id not in local_vars:
        return None
    is_none = dict.__getitem__(local_vars, test.left.id) is None
    return value.body if is_none == isinstance(test.ops[0], ast.Is) else value.orelse


def _inputs(value: ast.expr) -> list[str]:
    """The local names ``value`` reads a tensor from, in order: not a called function's name, not a
    comprehension's own variable, not ``self`` (its tensors are attributes, followed elsewhere)."""
    called = {id(n.func) for n in ast.walk(value) if isinstance(n, ast.Call)}
    bound = {t.id for n in ast.walk(value) if isinstance(n, ast.comprehension)
             for t in ast.walk(n.target) if isinstance(t, ast.Name)}
    out: list[str] = []
    for n in ast.walk(value):
        if (isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in called
                and n.id not in bound and n.id != "self" and n.id not in out):
            out.append(n.id)
    return out


def device_read_from(where: Any, frames: list[types.FrameType], device: str) -> tuple[str, types.FrameType] | None:
    """For a tensor made at ``where`` by a factory with ``device=`` read from another tensor
    (``device=anchors.device``, or ``device=device`` after ``device = anchors.device``): that local
    and the frame of ``frames`` it is in, when it is a tensor on the same wrong ``device``, the
    one the factory only followed."""
    frame = next((f for f in frames if f.f_code.co_filename == where.file and f.f_code.co_name == where.function), None)
    node = user_code.function_node(frame.f_code) if frame is not None else None
    statement = user_code.statement_holding(where.file, where.line) if node is not None else None
    for call in creation_sites.factory_calls(statement, given_too=True) if statement is not None else ():
        given = next((k.value for k in call.keywords if k.arg == "device"), None)
        if isinstance(given, ast.Name):
            assigned = user_code.last_assignment(given.id, where.file, node.body, where.line, None)
            given = getattr(assigned.node, "value", None) if assigned is not None else None
        if isinstance(given, ast.Attribute) and given.attr == "device" and isinstance(given.value, ast.Name) \
                and holds_device(_local(frame, given.value.id), device):
            return given.value.id, frame
    return None


def local_inputs(name: str, frame: types.FrameType, failing_line: int) -> list[str]:
    """The names the last assignment of the local ``name`` reads (``a`` for ``scaled = a * 2``),
    or ``[name]`` when it is a parameter of the function, never assigned."""
    node = user_code.function_node(frame.f_code)
    if node is None:
        return []
    statement = user_code.last_assignment(name, frame.f_code.co_filename, node.body, failing_line, None)
    if statement is None:
        return [name]
    value = getattr(statement.node, "value", None) or getattr(statement.node, "iter", None)
    if value is None:
        return []
    return [n.id for n in ast.walk(value) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)]


def argument_source(arguments: list[str | None], caller_locals: Mapping[str, Any], off: str) -> str | None:
    """The caller's local that a call's argument (as written) passes on: its root (``x`` for
    ``x.view(-1)``), else a local holding a tensor on ``off`` that a computed argument reads
    (``image1`` for ``torch.cat([image1, image2])``); None when no argument reads one."""
    written = [a for a in arguments if a]
    root = next((r for r in map(creation_sites.argument_root, written) if r in caller_locals), None)
    if root is not None:
        return root
    for argument in written:
        try:
            value = ast.parse(argument, mode="eval").body
        except SyntaxError:
            continue
        found = next((n for n in _inputs(value) if n in caller_locals and holds_device(caller_locals[n], off)), None)
        if found is not None:
            return found
        held = _attribute_value(value, caller_locals)  # images.tensors, of an object the caller made
        if held is not None and holds_device(held[1], off):
            return held[0]
    return None


def _called_module(value: ast.expr, frame: types.FrameType) -> torch.nn.Module | None:
    """The module ``value`` calls (``self.anchor_generator(...)``, ``head(...)``), read from the
    frame and the modules' own dicts; None for any other expression."""
    if not isinstance(value, ast.Call):
        return None
    func = value.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        owner = _local(frame, func.value.id)
        children = dict.get(instance_dict(owner), "_modules") if issubclass(type(owner), torch.nn.Module) else None
        module = dict.get(children, func.attr) if type(children) is dict else None
    else:
        module = _local(frame, func.id) if isinstance(func, ast.Name) else None
    return module if issubclass(type(module), torch.nn.Module) else None


def _attribute_value(node: ast.expr, local_vars: Mapping[str, Any]) -> tuple[str, Any] | None:
    """For ``images.tensors``: the local it is read from and the value, read from instance dicts."""
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if not chain or not isinstance(node, ast.Name) or node.id not in local_vars:
        return None
    value = local_vars[node.id]
    for attr in reversed(chain):
        value = dict.get(instance_dict(value), attr)
    return node.id, value


def _local(frame: types.FrameType, name: str) -> object:
    if frame.f_locals is frame.f_globals:
        return None
    return dict.get(locations.frame_locals(frame), name)


def holds_device(value: object, device: str, depth: int = 0) -> bool:
    """Whether ``value`` is a tensor on ``device``, or a plain list, tuple or dict holding one
    (two levels deep), read by exact type."""
    vt = type(value)
    if issubclass(vt, _T):
        return str(tensor_getters.device(value)) == device
    if depth >= 2:
        return False
    if vt is list or vt is tuple:
        return any(holds_device(v, device, depth + 1) for v in (list.__iter__(value) if vt is list
                                                                 else tuple.__iter__(value)))
    if vt is dict:
        return any(holds_device(v, device, depth + 1) for v in dict.values(value))
    return False
