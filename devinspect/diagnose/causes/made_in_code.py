"""Where the user's own code makes a tensor that a line only receives.

``hidden = model.init_hidden(4)`` receives what ``init_hidden`` makes with ``torch.zeros(...)``;
``standardize.mean`` was made by ``Standardize.__init__``; a dataclass field by its
``default_factory``; a helper behind ``functools.lru_cache`` or a decorator by the function it
wraps. Moving the tensor fixes this run only: the code that made it runs again (the cell calls
the method again, the object is made again), so the fix is the line that makes it, with
``device=`` added, named by what that line can see (``next(self.parameters()).device`` in a
module's method, the notebook's device variable in a function defined in a cell, else a literal).

Everything here reads source text, code objects and class dicts; no user code runs.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import types
from typing import Any, Iterator, Mapping

import torch

from ...collect import (
    FUNCTION_CODE,
    MISSING,
    instance_dict,
    locations,
    mro,
    object_at,
    plain_class_dict,
    static_class_attr,
    type_is_one_of,
    type_name,
    user_code,
    user_functions,
)
from ...model import Cause, SourceEdit
from .. import fix_builders
from . import creation_sites
from .device_names import device_variable

_Module = torch.nn.Module
_FIELD_FACTORY = dataclasses.Field.__dict__["default_factory"].__get__


def called_function(call: ast.Call, namespace: Mapping[str, Any]) -> user_functions.Function | None:
    """The user's own function that ``call`` (as written on a line of theirs) runs, read statically:
    a function, a method of a namespace object, a class's ``__init__``, seen through wrappers."""
    func = call.func
    if isinstance(func, ast.Name):
        return user_functions.user_function(dict.get(namespace, func.id, MISSING)
                                            if issubclass(type(namespace), dict) else MISSING)
    if not isinstance(func, ast.Attribute):
        return None
    owner = object_at(namespace, ast.unparse(func.value))
    if owner is MISSING:
        return None
    value = object_at(namespace, ast.unparse(func))
    return user_functions.user_function(value) if value is not MISSING else user_functions.method_of(owner, func.attr)


# -- statements that make tensors ------------------------------------------------------------------


def returned_statements(code: types.CodeType) -> list[user_code.Statement]:
    """The statements of the user's function that make its returned tensors with a factory: a
    ``return`` holding the factory call, or the assignment of a name it returns."""
    node = user_code.function_node(code)
    if node is None:
        return []
    out = []
    for statement in user_code.statements(node.body):
        if not isinstance(statement, ast.Return) or statement.value is None:
            continue
        if creation_sites.factory_calls(statement.value):
            out.append(_statement(code, statement))
            continue
        for name in _returned_names(statement.value):
            made = user_code.last_assignment(name, code.co_filename, node.body, statement.lineno, None, code.co_name)
            if made is not None and creation_sites.factory_calls(made.node) \
                    and not _combined_with_made(made, node, code):
                out.append(_statement(code, made.node))
    return _unique(out)


def _combined_with_made(statement: user_code.Statement, function: ast.FunctionDef | ast.AsyncFunctionDef,
                        code: types.CodeType) -> bool:
    """Whether the factory's value is combined with another tensor the function made without a
    device (``adj = torch.eye(n) + adj`` after ``adj = torch.sparse_coo_tensor(...)``): ``device=``
    on the factory alone would make that line mix devices, so the returned value moves instead."""
    value = getattr(statement.node, "value", None)
    if value is None:
        return False
    inside = {id(n) for call in creation_sites.factory_calls(value) for n in ast.walk(call)}
    called = {id(n.func) for n in ast.walk(value) if isinstance(n, ast.Call)}
    for n in ast.walk(value):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and id(n) not in inside and id(n) not in called:
            earlier = user_code.last_assignment(n.id, code.co_filename, function.body, statement.line, None,
                                                code.co_name)
            if earlier is not None and earlier.line != statement.line and creation_sites.factory_calls(earlier.node):
                return True
    return False


def _returned_names(value: ast.expr) -> list[str]:
    """The plain names a return value is made of (``h``, ``(h, c)``, ``{"k": k}``)."""
    if isinstance(value, ast.Name):
        return [value.id]
    if isinstance(value, (ast.Tuple, ast.List)):
        return [n for e in value.elts for n in _returned_names(e)]
    if isinstance(value, ast.Dict):
        return [n for e in value.values for n in _returned_names(e)]
    return []


def attribute_statements(cls: type, attr: str) -> list[user_code.Statement]:
    """The user's statements that make the tensor of ``obj.<attr>`` for an object of ``cls``: a
    ``self.<attr> = …`` line with a factory (or the line making the local or the other attribute
    it is computed from), or the ``default_factory`` of a dataclass field."""
    out = []
    for statement in creation_sites.assignments_in_methods(cls, attr, skip=()):
        if creation_sites.factory_calls(statement.node):
            out.append(statement)
            continue
        out += _sources_of(cls, statement)
    if not out:
        out += _field_factory(cls, attr)
    return _unique(out)


def _sources_of(cls: type, statement: user_code.Statement) -> list[user_code.Statement]:
    """One step back from ``self.a = f(x, self.b)``: the lines making ``x`` and ``self.b`` with a factory."""
    value = getattr(statement.node, "value", None)
    if value is None:
        return []
    out = []
    for n in ast.walk(value):
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
            out += [s for s in creation_sites.assignments_in_methods(cls, n.attr, skip=()) if creation_sites.factory_calls(s.node)]
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
            function = _function_node(statement)
            if function is None:
                continue
            made = user_code.last_assignment(n.id, statement.filename, function.body, statement.line, statement.cell,
                                           statement.function)
            if made is not None and made.line != statement.line and creation_sites.factory_calls(made.node):
                out.append(made)
    return out


def _function_node(statement: user_code.Statement) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    tree = user_code.parse(statement.filename)
    if tree is None:
        return None
    return next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == statement.function and n.lineno <= statement.line <= (n.end_lineno or n.lineno)), None)


def _field_factory(cls: type, attr: str) -> list[user_code.Statement]:
    """The class-body line whose ``field(default_factory=...)`` makes ``attr``."""
    for klass in mro(cls):
        fields = dict.get(plain_class_dict(klass), "__dataclass_fields__", None)
        if type(fields) is not dict or type(fields.get(attr)) is not dataclasses.Field:
            continue
        factory = _FIELD_FACTORY(fields[attr])
        if type(factory) is not types.FunctionType:
            return []
        code = FUNCTION_CODE(factory)
        tree = user_code.parse(code.co_filename) if locations.is_user_code(code) else None
        if tree is None:
            return []
        for node in ast.walk(tree):
            if isinstance(node, (ast.AnnAssign, ast.Assign)) and node.lineno == code.co_firstlineno \
                    and creation_sites.factory_calls(node):
                return [user_code.Statement(code.co_filename, node.lineno, node, locations.cell_number(code.co_filename),
                                          type_name(klass))]
        return []
    return []


def _statement(code: types.CodeType, node: ast.stmt) -> user_code.Statement:
    return user_code.Statement(code.co_filename, node.lineno, node, locations.cell_number(code.co_filename), code.co_name)


def _unique(statements: list[user_code.Statement]) -> list[user_code.Statement]:
    seen, out = set(), []
    for s in statements:
        if (s.filename, s.line) not in seen:
            seen.add((s.filename, s.line))
            out.append(s)
    return out


# -- the edits ---------------------------------------------------------------------------------------


def device_inside(statement: user_code.Statement, namespace: Mapping[str, Any], target: str,
                  instance: Any = MISSING) -> str:
    """How a line inside the user's function names ``target``: a parameter's device of the module
    it is a method of, else the notebook's device variable (a function defined in a cell sees the
    notebook's names) when nothing local hides it, else a literal."""
    function = _function_node(statement)
    first = function.args.args[0].arg if function is not None and function.args.args else None
    if first is not None and issubclass(type(instance), _Module) and _parameter_on(instance, target):
        return f"next({first}.parameters()).device"
    name = device_variable(namespace, target)
    if name is not None and statement.cell is not None and not _local_names(function) & {name}:
        return name
    return fix_builders.device_literal(target)


def _local_names(function: ast.AST | None) -> set[str]:
    if function is None:
        return set()
    names = {a.arg for a in ast.walk(function.args) if isinstance(a, ast.arg)}
    return names | {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}


def _parameter_on(module: Any, target: str, depth: int = 0) -> bool:
    """Whether ``module`` (read statically) has a parameter, and its first one is on ``target``."""
    from ...runtime import tensor_getters

    for p in _parameters(module, depth):
        return str(tensor_getters.device(p)) == target
    return False


def _parameters(module: Any, depth: int) -> Iterator[Any]:
    d = instance_dict(module)
    params = d.get("_parameters")
    if type(params) is dict:
        yield from (p for p in dict.values(params) if p is not None)
    children = d.get("_modules")
    if type(children) is dict and depth < 8:
        for child in dict.values(children):
            if child is not None:
                yield from _parameters(child, depth + 1)


def factory_edits(statements: list[user_code.Statement], device_of: Any) -> list[SourceEdit]:
    """``device=`` added to the factory calls of each statement (``device_of(statement)`` names the
    device there); statements that cannot be edited so are left out."""
    out = []
    for statement in statements:
        made = creation_sites.creation_edit(statement, device_of(statement))
        if made is not None and made[0] == "factory":
            out.append(made[1])
    return out


def edits_for_call(statement: user_code.Statement, namespace: Mapping[str, Any], target: str,
                   name: str | None = None) -> list[SourceEdit]:
    """The edits that make the tensors a statement receives from the user's function it calls on
    ``target``: the call passes the device the function takes (``load(…)`` whose ``device='cpu'``
    was left to its default), or the function makes them there (``hidden = model.init_hidden(4)``:
    its factory line; ``return a, b`` of values it did not move: ``name``'s own value moved, by its
    device parameter); ``[]`` when the statement itself is the place."""
    node = statement.node
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if not isinstance(value, ast.Call):
        return []
    called = called_function(value, namespace)
    if called is None or called.makes is not None or called.code is None:
        return []
    function = user_code.function_node(called.code)
    parameter = _device_parameter(function) if function is not None else None
    if parameter is not None and not _passes(value, function, parameter):
        here = device_variable(namespace, target) if statement.cell is not None else None
        edit = _argument_added(statement, value, f"{parameter}={here or fix_builders.device_literal(target)}")
        return [edit] if edit is not None else []
    made = returned_statements(called.code)
    if made:  # by the device the call passes it, where it takes one
        return factory_edits(made, lambda s: parameter or device_inside(s, namespace, target, called.instance))
    return _returned_value_moved(called, function, statement, name, namespace, target, parameter)


def _device_parameter(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The parameter of the user's function that takes a device (``device='cpu'``, ``dev=None``)."""
    a = function.args
    names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
    return next((n for n in names if n in ("device", "dev") or n.endswith("_device")), None)


def unmoved_in_device_method(cls: type, attr: str) -> SourceEdit | None:
    """A method of the user's class that is handed a device (``set_cell_anchors(self, dtype, device)``)
    and assigns ``self.<attr>`` without using it: that assignment moves the tensors it holds there
    (each item of a list it builds). None when no such method assigns it."""
    for statement in creation_sites.assignments_in_methods(cls, attr, skip=()):
        function = _function_node(statement)
        parameter = _device_parameter(function) if function is not None else None
        value = getattr(statement.node, "value", None)
        if parameter is None or value is None or statement.node.lineno != statement.node.end_lineno or any(
                isinstance(n, ast.Name) and n.id == parameter for n in ast.walk(value)):
            continue
        items = [value.elt] if isinstance(value, (ast.ListComp, ast.GeneratorExp, ast.SetComp)) else \
            list(value.elts) if isinstance(value, (ast.List, ast.Tuple)) else [value]
        line = linecache.getline(statement.filename, statement.line).rstrip("\n").encode()
        new = line
        for item in sorted(items, key=lambda n: n.col_offset, reverse=True):
            text = line[item.col_offset:item.end_col_offset].decode(errors="replace")
            atom = isinstance(item, (ast.Name, ast.Attribute, ast.Subscript, ast.Call))
            moved = f"{text if atom else f'({text})'}.to({parameter})"
            new = new[:item.col_offset] + moved.encode() + new[item.end_col_offset:]
        indent = len(line) - len(line.lstrip())
        where = locations.source_line(statement.filename, statement.line, statement.function or "<module>")
        return SourceEdit(where, line[indent:].decode(errors="replace"), new[indent:].decode(errors="replace"),
                          statement.function)
    return None


def forward_made_on_default(cls: type) -> tuple[str, SourceEdit] | None:
    """A module whose ``forward`` reads a device from its inputs (``device = features[0].device``) and
    binds what a method of its own makes with factories on the default device (``boxes =
    self._grid_boxes(sizes)``, a method handed no device) without moving it: the local it binds, and
    ``.to(device)`` there."""
    forward = static_class_attr(cls, "forward")
    node = user_code.function_node(FUNCTION_CODE(forward)) if type(forward) is types.FunctionType \
        and locations.is_user_code(FUNCTION_CODE(forward)) else None
    devices: dict[str, int] = {}  # a local holding an input's device, and the line it is bound on
    for statement in user_code.statements(node.body) if node is not None else ():
        if not isinstance(statement, ast.Assign) or len(statement.targets) != 1:
            continue
        target, value = statement.targets[0], statement.value
        pairs = zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
            and len(target.elts) == len(value.elts) else [(target, value)]
        for name, read in pairs:
            if isinstance(name, ast.Name) and isinstance(read, ast.Attribute) and read.attr == "device":
                devices.setdefault(name.id, statement.lineno)
        call = value if isinstance(target, ast.Name) and isinstance(value, ast.Call) else None
        if call is None or not (isinstance(call.func, ast.Attribute) and isinstance(call.func.value, ast.Name)
                                and call.func.value.id == "self"):
            continue
        method = static_class_attr(cls, call.func.attr)
        made = user_code.function_node(FUNCTION_CODE(method)) if type(method) is types.FunctionType else None
        device = next((d for d, line in devices.items() if line < statement.lineno), None)
        if made is None or device is None or _device_parameter(made) or not creation_sites.factory_calls(made):
            continue
        moved = creation_sites.creation_edit(_statement(FUNCTION_CODE(forward), statement), device, wrap=True)
        if moved is not None:
            return target.id, moved[1]
    return None


def _passes(call: ast.Call, function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str) -> bool:
    """Whether ``call`` gives ``parameter`` (by keyword, by position, or through ``*``/``**``)."""
    if any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args):
        return True
    positional = [p.arg for p in (*function.args.posonlyargs, *function.args.args)]
    offset = 1 if positional and positional[0] in ("self", "cls") and isinstance(call.func, ast.Attribute) else 0
    return user_code.argument_for(call, positional, parameter, offset) is not None


def _argument_added(statement: user_code.Statement, call: ast.Call, argument: str) -> SourceEdit | None:
    """The statement's line with ``argument`` added to ``call`` after its last argument (on that
    argument's line when the call spans several)."""
    items = [*call.args, *call.keywords]
    last = max(items, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0)) if items else None
    line_number = (last.end_lineno if last is not None else call.end_lineno) or statement.line
    line = linecache.getline(statement.filename, line_number).rstrip("\n").encode()
    column = (last.end_col_offset if last is not None else (call.end_col_offset or 1) - 1) or 0
    if not line.strip() or column > len(line):
        return None
    new = line[:column] + (f", {argument}" if last is not None else argument).encode() + line[column:]
    indent = len(line) - len(line.lstrip())
    where = locations.source_line(statement.filename, line_number, statement.function or "<module>")
    return SourceEdit(where, line[indent:].decode(errors="replace").rstrip(),
                      new[indent:].decode(errors="replace").rstrip(), statement.function)


def _returned_value_moved(called: user_functions.Function, function: Any, statement: user_code.Statement,
                          name: str | None, namespace: Mapping[str, Any], target: str,
                          parameter: str | None) -> list[SourceEdit]:
    """``return a, b.to(device)`` whose ``a`` (what ``name`` receives) is not moved: ``a.to(device)``
    there, by the function's own device parameter when it has one."""
    if function is None:
        return []
    returns = [s for s in user_code.statements(function.body) if isinstance(s, ast.Return) and s.value is not None]
    targets = statement.node.targets[0] if isinstance(statement.node, ast.Assign) else None
    if len(returns) != 1 or targets is None:
        return []
    value = returns[0].value
    if isinstance(targets, (ast.Tuple, ast.List)):
        names = [t.id if isinstance(t, ast.Name) else None for t in targets.elts]
        if name not in names or not isinstance(value, (ast.Tuple, ast.List)) or len(value.elts) != len(names):
            return []
        # What the line unpacks with it from the host goes too (states, actions, rewards = buffer.sample()).
        elements = [e for n, e in zip(names, value.elts) if n == name or (n is not None and _off(namespace, n, target))]
    else:
        elements = [value]
    if any(isinstance(e, ast.Call) and isinstance(e.func, ast.Attribute) and e.func.attr in ("to", "cuda")
           for e in elements):
        return []  # moved already: the cause is elsewhere
    made = _statement(called.code, returns[0])
    device_expr = parameter or device_inside(made, namespace, target, called.instance)
    edit = creation_sites.wrapped_parts(made, elements, device_expr)
    return [edit] if edit is not None else []


def _off(namespace: Mapping[str, Any], name: str, target: str) -> bool:
    from ...runtime import tensor_getters

    value = dict.get(namespace, name) if issubclass(type(namespace), dict) else None
    return tensor_getters.is_tensor(value) and str(tensor_getters.device(value)) != target


def received_from_the_same_function(statement: user_code.Statement, namespace: Mapping[str, Any]) -> list[str]:
    """The other variables the session's cells bound by calling the function ``statement`` calls
    (``val_data = batchify(...)`` beside ``train_data = batchify(...)``), each still holding what
    that call returned: an edit of the function makes them right only when those cells run again."""
    value = getattr(statement.node, "value", None)
    called = called_function(value, namespace) if isinstance(value, ast.Call) else None
    if called is None or called.code is None:
        return []
    out = []
    for cell in user_code.session_cells():
        tree = user_code.parse(cell.filename)
        for node in tree.body if tree is not None else ():
            if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and isinstance(node.value, ast.Call) and node is not statement.node):
                continue
            other = called_function(node.value, namespace)
            if other is None or other.code is not called.code:
                continue
            name = node.targets[0].id
            latest = user_code.assignment_in_session(name, None, 1 << 30)
            if latest is not None and latest.cell == cell.number and latest.line == node.lineno:
                out.append(name)
    return out


def edits_for_attributes(owner: Any, attrs: list[str], namespace: Mapping[str, Any], target: str) -> list[SourceEdit]:
    """The edits that make the tensors ``owner.<attr>`` on ``target`` where the object's class makes them."""
    cls = type(owner)
    if issubclass(cls, (torch.Tensor, _Module, type, types.ModuleType)) or type_is_one_of(owner, (list, tuple, dict, set)):
        return []
    statements = _unique([s for attr in attrs for s in attribute_statements(cls, attr)])
    edits = factory_edits(statements, lambda s: device_inside(s, namespace, target, owner))
    return list(dict.fromkeys(edits))


def made_in_session(name: str, cell_frame: types.FrameType | None, failing_line: int, wrong: list[str],
                     device_expr: str, namespace: Mapping[str, Any], target: str, **kw: Any) -> Cause | None:
    """:func:`creation_sites.assigned_in_session`, but where the line that made ``name`` only receives its tensors
    from a function of the user's (``hidden = model.init_hidden(4)``), that function's lines; and where
    it unpacks several (``s, a, r = buffer.sample(8)``), a line after it that moves each."""
    current = user_code.current_cell(cell_frame.f_code.co_filename) if cell_frame is not None else None
    value = dict.get(namespace, name, MISSING) if issubclass(type(namespace), dict) else MISSING
    kw.setdefault("made", type_name(type(value)) if value is not MISSING else None)
    statement = user_code.assignment_in_session(name, current, failing_line, kw["made"])
    if statement is not None and isinstance(statement.node, ast.Assign):
        here = current is not None and statement.cell == current.number
        targets = statement.node.targets
        unpacked = len(targets) == 1 and isinstance(targets[0], (ast.Tuple, ast.List))
        names = tuple(e.id for e in targets[0].elts if isinstance(e, ast.Name)) if unpacked else ()
        inside = edits_for_call(statement, namespace, target, name)
        if inside:
            names = tuple(dict.fromkeys((*names, *received_from_the_same_function(statement, namespace))))
            return Cause(inside[0].where, "inside", inside[0], here, also=tuple(inside[1:]), together=names)
        if unpacked:
            moved = [(n, e) for n in names
                     if (e := creation_sites.moved_expression(n, dict.get(namespace, n), target, device_expr)) is not None]
            edit = creation_sites.unpacking_edit(statement, moved)
            return Cause(edit.where, "value", edit, here, together=names) if edit is not None else None
    return creation_sites.assigned_in_session(name, cell_frame, failing_line, wrong, device_expr, **kw)


def attributes_origin(owner: Any, root: str, names: list[str], namespace: Mapping[str, Any],
                      target: str) -> Cause | None:
    """The lines of the class of ``owner`` (the object called ``root``) that make its tensors
    ``names`` (``root.mean``, ``root.std``), as one origin with every edit."""
    attrs = [n[len(root) + 1:] for n in names if n.startswith(root + ".") and n[len(root) + 1:].isidentifier()]
    edits = edits_for_attributes(owner, attrs, namespace, target) if owner is not MISSING else []
    if not edits:
        return None
    return Cause(edits[0].where, "factory", edits[0], False, also=tuple(edits[1:]))


def rerun_note(edits: tuple[SourceEdit, ...], cell_file: str | None) -> str | None:
    """What to run again once ``edits`` are made outside the failed cell: their cells, or (for a file
    the notebook imports) the notebook after a restart, since Python imports a file once."""
    cells = sorted({e.where.cell for e in edits if e.where.cell is not None and e.where.file != cell_file})
    files = sorted({e.where.file for e in edits if e.where.cell is None})
    parts = []
    if cells:
        which = ", ".join(f"Cell In[{c}]" for c in cells)
        parts.append(f"then run {which} again, and the cells after it that use it")
    if files:
        shown = ", ".join(locations.source_line(f, 1, "").where.rsplit(":", 1)[0] for f in files)
        parts.append(f"{shown} is imported once per kernel: restart the kernel and run the cells again to use the edit")
    return "; ".join(parts) or None


def held_modules(modules: Any, model: Any, target: str) -> list[Any]:
    """The summaries of modules below ``model`` that it holds without registering them (a plain list
    of layers): ``model.to()`` does not move them; those off ``target``."""
    return [m for m in modules if m.name != model.name and m.name.startswith((model.name + ".", model.name + "["))
            and any(d != target for d in m.devices)]


def held_module_edits(owner: Any, root: str, held: list[Any], namespace: Mapping[str, Any],
                      target: str) -> list[SourceEdit]:
    """The lines of the owner's class that make the modules it keeps in a plain attribute
    (``self.layers = self.layers + [Layer(...)]``, ``self.heads.append(nn.Linear(...))``): each
    module made there gets ``.to()``."""
    if owner is MISSING or not held:
        return []
    attrs = {m.name[len(root) + 1:].split("[")[0].split(".")[0] for m in held}
    out = []
    for attr in sorted(a for a in attrs if a.isidentifier()):
        for statement in _statements_filling(type(owner), attr):
            calls = [c for c in ast.walk(statement.node) if isinstance(c, ast.Call) and _makes_a_module(c, namespace)]
            edit = creation_sites.wrapped_parts(statement, calls, device_inside(statement, namespace, target, owner))
            if edit is not None:
                out.append(edit)
    return out


def _statements_filling(cls: type, attr: str) -> list[user_code.Statement]:
    """``self.<attr> = …`` and ``self.<attr>.append(…)`` (``extend``, ``insert``) in the class's methods."""
    out = list(creation_sites.assignments_in_methods(cls, attr, skip=()))
    for statement in creation_sites.assignments_in_methods(cls, "", skip=(), calls_on=attr):
        out.append(statement)
    return out


def _makes_a_module(call: ast.Call, namespace: Mapping[str, Any]) -> bool:
    made = object_at(namespace, ast.unparse(call.func)) if isinstance(call.func, (ast.Name, ast.Attribute)) else MISSING
    return issubclass(type(made), type) and issubclass(made, _Module)


def made_alike(name: str) -> list[str]:
    """The other variables the latest cell binding ``name`` makes with a call of the same function of
    the user's (``val_data = batchify(corpus.valid, 10)`` beside ``train_data = batchify(...)``):
    what leaves that one on the wrong device leaves them there too. Read from the cells' text."""
    statement = user_code.assignment_in_session(name, None, 1 << 30)
    value = getattr(statement.node, "value", None) if statement is not None else None
    tree = user_code.parse(statement.filename) if statement is not None else None
    if tree is None or not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name)):
        return []
    helper = value.func.id
    if not any(isinstance(n, ast.FunctionDef) and n.name == helper
               for cell in user_code.session_cells() if (t := user_code.parse(cell.filename)) is not None
               for n in t.body):
        return []  # not a function the session defines: a library's, whose other calls may differ
    return [n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name) and n.targets[0].id != name and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Name) and n.value.func.id == helper]
