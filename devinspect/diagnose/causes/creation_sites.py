"""Where a tensor got its device in the user's code, and the edit that fixes it there.

A tensor on the wrong device was put there by a line of the user's code: a factory call
without ``device=`` (``torch.zeros(out.shape)``), a ``for`` loop over a DataLoader that
yields host batches, an assignment in ``forward`` that replaces a buffer every call. The
fix of the cause is an edit of that line; a runtime ``.to()`` of the variable only helps
when nothing makes the tensor again before the next run. These functions find such lines
(statically, from the source text: :mod:`devinspect.collect.code.user_code`) and write the edit,
keeping the user's arguments and naming the device the way their code already does.
"""

from __future__ import annotations

import ast
import linecache
import types
from typing import Any, Mapping

import torch

from ...collect import FACTORIES, LIKE_FACTORIES, SAME_DEVICE_METHODS, locations, static_class_attr, user_code
from ...model import Cause, SourceEdit, SourceLine
from ...runtime import tensor_getters
from .. import fix_builders

_T = torch.Tensor


def local_statement_line(name: str, frame: types.FrameType, failing_line: int) -> int | None:
    """The line of the statement :func:`local_origin` edits for the local ``name``."""
    node = user_code.function_node(frame.f_code)
    if node is None:
        return None
    statement = user_code.last_assignment(name, frame.f_code.co_filename, node.body, failing_line, None)
    return statement.line if statement is not None else None


# -- edits -------------------------------------------------------------------------------------


def _source_line(statement: user_code.Statement) -> SourceLine:
    return locations.source_line(statement.filename, statement.line, statement.function or "<module>")


def _single_line(statement: user_code.Statement) -> bool:
    node = statement.node
    return node.lineno == (node.end_lineno or node.lineno)


def factory_calls(node: ast.AST, given_too: bool = False) -> list[ast.Call]:
    """``torch.<factory>(…)`` calls in ``node`` that do not say ``device=`` (or, ``given_too``,
    that say it as well)."""
    out = []
    for n in ast.walk(node):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name)
                and n.func.value.id == "torch" and (n.func.attr in FACTORIES or n.func.attr in LIKE_FACTORIES)
                and (given_too or not any(k.arg == "device" for k in n.keywords))):
            out.append(n)
    return out


def with_device(text: str, calls: list[ast.Call], device_expr: str, offset: int = 0) -> str | None:
    """``text`` (one line, stripped) with ``device=<device_expr>`` added to each of ``calls``
    (their columns are ``offset`` more than in ``text``: the line's indentation). Columns count
    UTF-8 bytes, as ast's do."""
    data = text.encode()
    spans = []
    for call in calls:
        if call.end_col_offset is None or call.lineno != call.end_lineno:
            return None
        given = next((k.value for k in call.keywords if k.arg == "device"), None)
        if given is not None:  # device= says another device: its value is replaced
            if given.end_col_offset is None or given.lineno != given.end_lineno:
                return None
            spans.append((given.col_offset - offset, given.end_col_offset - offset, None))
            continue
        start, end = call.col_offset - offset, call.end_col_offset - offset
        segment = data[start:end]
        if start < 0 or not segment.endswith(b")"):
            return None
        spans.append((start, end, segment))
    for start, end, segment in sorted(spans, reverse=True):
        if segment is None:
            data = data[:start] + device_expr.encode() + data[end:]
            continue
        inner = segment[:-1].rstrip()
        sep = b"" if inner.endswith(b"(") else b", "
        data = data[:start] + inner + sep + f"device={device_expr})".encode() + data[end:]
    return data.decode(errors="replace")


def _indent(statement: user_code.Statement) -> int:
    """The bytes before the first character of the statement's line: ast's columns, less these,
    are columns in the stripped line (a statement after a ``;`` starts further in)."""
    line = linecache.getline(statement.filename, statement.line).encode()
    return len(line) - len(line.lstrip())


def _cut(text: str, start: int, end: int | None = None) -> str:
    """``text`` from byte ``start`` to byte ``end``."""
    return text.encode()[max(start, 0):end].decode(errors="replace")


def creation_edit(statement: user_code.Statement, device_expr: str, wrap: bool = False,
                  name: str | None = None) -> tuple[str, SourceEdit] | None:
    """The edit that makes ``statement`` create its tensors on the right device: ``device=`` on its
    factory calls, or ``.to()`` of its value (always, with ``wrap``: a module or model that is
    built on the host). A statement over several lines gets ``device=`` after its factory call's
    last argument, on that argument's line; otherwise None."""
    if not _single_line(statement):
        return (None if wrap else _multiline_factory_edit(statement, device_expr)) \
            or _multiline_value_edit(statement, device_expr, wrap)
    where = _source_line(statement)
    text = where.text
    node = statement.node
    if not text:
        return None
    column = _indent(statement)
    # A factory call that names the wrong device is the cause itself: its device= is replaced.
    calls = [] if wrap else (factory_calls(node) or factory_calls(node, given_too=True))
    if calls:
        new = with_device(text, calls, device_expr, offset=column)
        if new is not None and new != text:
            return "factory", SourceEdit(where, text, new, statement.function)
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        if isinstance(node.targets[0], (ast.Tuple, ast.List)):
            # Several values at once: only the one called ``name`` moves, never the tuple (.to() of a
            # tuple raises): its own expression (x, y = a.to(dev), b), or a line after the unpacking.
            return _element_edit(statement, name, device_expr, column) if name else None
        if wrap and _moved_already(node.value):
            return None
        moved = _host_move(node.value)
        if moved is not None:
            # x = batch.cpu() / x = t.to("cpu"): the move to the host is the cause; it goes to the device instead
            start, end = moved.col_offset - column, (moved.end_col_offset or 0) - column
            base = _cut(text, start, end)
            cut = base.rfind(".")
            new = f"{_cut(text, 0, start)}{base[:cut]}.to({device_expr}){_cut(text, end)}"
            return "value", SourceEdit(where, text, new, statement.function)
        target = node.value
        # nn.Parameter(t).to(dev) would be no Parameter: its data moves instead. The line is text
        # (the call is never run or resolved), so the class is known by how the line spells it.
        if isinstance(target, ast.Call) and target.args and _callee(target).endswith("Parameter"):
            target = target.args[0]
        value = _cut(text, target.col_offset - column, (target.end_col_offset or 0) - column)
        if value:
            head = _cut(text, 0, target.col_offset - column)
            tail = _cut(text, (target.end_col_offset or 0) - column)
            wrapped = value if _is_atom(target) else f"({value})"
            return "value", SourceEdit(where, text, f"{head}{wrapped}.to({device_expr}){tail}", statement.function)
    return None


def _element_edit(statement: user_code.Statement, name: str, device_expr: str, column: int) -> tuple[str, SourceEdit] | None:
    """``x, y = a.to(dev), b`` with ``y``'s own expression moved (``b.to(dev)``)."""
    node = statement.node
    targets = node.targets[0].elts
    names = [t.id if isinstance(t, ast.Name) else None for t in targets]
    if name not in names:
        return None
    value = node.value
    where = _source_line(statement)
    text = where.text
    if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(targets) \
            and not any(isinstance(e, ast.Starred) for e in value.elts):
        element = value.elts[names.index(name)]
        start, end = element.col_offset - column, (element.end_col_offset or 0) - column
        part = _cut(text, start, end)
        if not part:
            return None
        moved = part if _is_atom(element) else f"({part})"
        new = f"{_cut(text, 0, start)}{moved}.to({device_expr}){_cut(text, end)}"
        return "value", SourceEdit(where, text, new, statement.function)
    return None  # unpacked from one value: what made that value decides (see unpacking_edit)


def wrapped_parts(statement: user_code.Statement, parts: list[ast.expr], device_expr: str) -> SourceEdit | None:
    """The statement's line with each expression of ``parts`` (all on that line) moved: ``part.to(dev)``."""
    if not parts or any(p.lineno != p.end_lineno or p.lineno != parts[0].lineno for p in parts):
        return None
    line = linecache.getline(statement.filename, parts[0].lineno).rstrip("\n")
    data = line.encode()
    for part in sorted(parts, key=lambda p: -p.col_offset):
        start, end = part.col_offset, part.end_col_offset or 0
        text = data[start:end].decode(errors="replace")
        if not text:
            return None
        moved = text if _is_atom(part) else f"({text})"
        data = data[:start] + f"{moved}.to({device_expr})".encode() + data[end:]
    indent = len(line) - len(line.lstrip())
    where = locations.source_line(statement.filename, parts[0].lineno, statement.function or "<module>")
    return SourceEdit(where, line[indent:].rstrip(), data.decode(errors="replace")[indent:].rstrip(), statement.function)


def _multiline_value_edit(statement: user_code.Statement, device_expr: str, wrap: bool) -> tuple[str, SourceEdit] | None:
    """``model = Net(\n    …\n)`` written over several lines: ``.to()`` after the call's closing
    bracket, on its last line (``).to(dev)``)."""
    node = statement.node
    if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Call)) or (wrap and _moved_already(node.value)):
        return None
    value = node.value
    if value.end_lineno is None or value.end_col_offset is None:
        return None
    line = linecache.getline(statement.filename, value.end_lineno).rstrip("\n").encode()
    indent = len(line) - len(line.lstrip())
    if value.end_col_offset > len(line) or not line[:value.end_col_offset].endswith(b")"):
        return None
    new = line[:value.end_col_offset] + f".to({device_expr})".encode() + line[value.end_col_offset:]
    where = locations.source_line(statement.filename, value.end_lineno, statement.function or "<module>")
    old, new_text = line[indent:].decode(errors="replace").rstrip(), new[indent:].decode(errors="replace").rstrip()
    return "value", SourceEdit(where, old, new_text, statement.function)


def _multiline_factory_edit(statement: user_code.Statement, device_expr: str) -> tuple[str, SourceEdit] | None:
    """``device=`` added after the last argument of the one factory call without it in a statement
    written over several lines (``torch.zeros(\n    batch,\n    dtype=dtype,\n)``), on the line
    that argument ends on; None when that is not one such call with arguments."""
    calls = factory_calls(statement.node)
    if len(calls) != 1 or not (calls[0].args or calls[0].keywords):
        return None
    last = max([*calls[0].args, *calls[0].keywords], key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0))
    if last.end_lineno is None or last.end_col_offset is None or isinstance(last, ast.keyword) and last.arg is None:
        return None
    line = linecache.getline(statement.filename, last.end_lineno).rstrip("\n").encode()
    indent = len(line) - len(line.lstrip())
    if not line.strip() or last.end_col_offset > len(line):
        return None
    new = line[:last.end_col_offset] + f", device={device_expr}".encode() + line[last.end_col_offset:]
    where = locations.source_line(statement.filename, last.end_lineno, statement.function or "<module>")
    old, new_text = line[indent:].decode(errors="replace").rstrip(), new[indent:].decode(errors="replace").rstrip()
    return "factory", SourceEdit(where, old, new_text, statement.function)


def _callee(call: ast.Call) -> str:
    """``nn.Parameter`` for ``nn.Parameter(x)``: the called name as written, ``""`` if it is no name."""
    func = call.func
    return ast.unparse(func) if isinstance(func, (ast.Name, ast.Attribute)) else ""


def default_device_edit(where: SourceLine, device_expr: str) -> SourceEdit | None:
    """The user's line run with ``device_expr`` as the default device (``with torch.device(dev):``
    around it), for the tensors library code it calls makes without ``device=``; None for a line
    that is not one simple statement."""
    try:
        tree = ast.parse(where.text)
    except SyntaxError:
        return None
    if len(tree.body) != 1 or hasattr(tree.body[0], "body"):
        return None
    return SourceEdit(where, where.text, f"with torch.device({device_expr}):\n    {where.text}", where.function)


def _host_move(node: ast.AST) -> ast.Call | None:
    """The outermost ``.cpu()`` or ``.to("cpu")`` call a value ends with, else None."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    if node.func.attr == "cpu" and not node.args:
        return node
    if node.func.attr == "to" and node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value == "cpu":
        return node
    return None


def _moved_already(node: ast.AST) -> bool:
    """``nn.Linear(4, 2).to(dev)``: a value already moved (the cause is elsewhere)."""
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("to", "cuda")


def _is_atom(node: ast.AST) -> bool:
    return isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))


def loop_edit(statement: user_code.Statement, names: list[str], device_expr: str,
              moved: str | None = None) -> SourceEdit | None:
    """A ``for`` loop whose targets come from the host: a first line in its body moves them
    (``moved`` is that line where a target is not a tensor: a dict batch's own move)."""
    node = statement.node
    if not isinstance(node, (ast.For, ast.AsyncFor)) or not node.body or not names:
        return None
    where = _source_line(statement)
    if node.lineno != getattr(node.target, "end_lineno", node.lineno):
        return None
    indent = " " * max(4, node.body[0].col_offset - node.col_offset)
    line = moved or f"{', '.join(names)} = {', '.join(f'{n}.to({device_expr})' for n in names)}"
    return SourceEdit(where, where.text, f"{where.text}\n{indent}{line}", statement.function)


def unpacking_edit(statement: user_code.Statement, moved: list[tuple[str, str]]) -> SourceEdit | None:
    """``s, a, r = buffer.sample(8)`` whose values come from the host: a line after it moves each
    of them (``moved``: name, expression), as a loop's first line moves its batch."""
    node = statement.node
    if not moved or not _single_line(statement) or not isinstance(node, ast.Assign):
        return None
    where = _source_line(statement)
    line = f"{', '.join(n for n, _ in moved)} = {', '.join(e for _, e in moved)}"
    return SourceEdit(where, where.text, f"{where.text}\n{line}", statement.function)


def _loop_binding(root: str, cell_file: str | None, failing_line: int) -> user_code.Statement | None:
    """The ``for`` statement of the failed cell that binds ``root`` before its failing line, or None."""
    current = user_code.current_cell(cell_file) if cell_file else None
    statement = user_code.assignment_in_session(root, current, failing_line) if current else None
    return statement if statement is not None and isinstance(statement.node, (ast.For, ast.AsyncFor)) else None


def loop_line(root: str, cell_file: str | None, failing_line: int, namespace: Mapping[str, Any],
              moved_of: Any) -> str | None:
    """The line that moves, at the top of the failed cell's ``for`` loop binding ``root``, every
    name the loop binds that ``moved_of(name, value)`` gives an expression for; None without a loop."""
    statement = _loop_binding(root, cell_file, failing_line)
    if statement is None:
        return None
    pairs = []
    for name in [e.id for e in ast.walk(statement.node.target) if isinstance(e, ast.Name)]:
        value = dict.get(namespace, name) if issubclass(type(namespace), dict) else None
        expression = moved_of(name, value)
        if expression is not None:
            pairs.append((name, expression))
    if not pairs:
        return None
    return f"{', '.join(n for n, _ in pairs)} = {', '.join(e for _, e in pairs)}"


def moved_expression(name: str, value: Any, target: str, device_expr: str, depth: int = 0) -> str | None:
    """``name`` with its tensors on ``target``: a tensor's ``.to()``, a list's, tuple's or dict's own
    comprehension, a nested dict rebuilt around its moved items (``{**batch, "inputs": {…}}``);
    None when nothing it holds is elsewhere, or it cannot be written so."""
    if tensor_getters.is_tensor(value):
        return f"{name}.to({device_expr})" if str(tensor_getters.device(value)) != target else None
    fields = named_fields(value)
    if fields is not None:  # a namedtuple: its fields cannot be set, _replace makes it again
        moved = [f"{field}={name}.{field}.to({device_expr})" for field, item in zip(fields, tuple.__iter__(value))
                 if tensor_getters.is_tensor(item) and str(tensor_getters.device(item)) != target]
        return f"{name}._replace({', '.join(moved)})" if moved else None
    if type(value) not in (list, tuple, dict) or depth > 3:
        return None
    items = list(dict.items(value)) if type(value) is dict else list(enumerate(value))
    tensors = [v for _, v in items if tensor_getters.is_tensor(v)]
    if len(tensors) == len(items):
        if not any(str(tensor_getters.device(v)) != target for v in tensors):
            return None
        return fix_builders.container_moved(name, device_expr, type(value).__name__, True)
    if type(value) is not dict or not all(type(k) is str for k, _ in items):
        moved = any(tensor_getters.is_tensor(v) and str(tensor_getters.device(v)) != target for _, v in items)
        return fix_builders.container_moved(name, device_expr, type(value).__name__, False) if moved else None
    parts = []
    for key, item in items:  # a batch of dicts: each part that holds a tensor elsewhere, moved in place
        inner = moved_expression(f"{name}[{fix_builders.literal(key)}]", item, target, device_expr, depth + 1)
        if inner is not None:
            parts.append(f"{fix_builders.literal(key)}: {inner}")
    return f"{{**{name}, {', '.join(parts)}}}" if parts else None


def named_fields(value: Any) -> tuple[str, ...] | None:
    """The fields of a namedtuple (read from its class, statically), or None for anything else."""
    if not issubclass(type(value), tuple) or type(value) is tuple:
        return None
    fields = static_class_attr(type(value), "_fields")
    if type(fields) is not tuple or not all(type(f) is str and f.isidentifier() for f in fields) \
            or len(fields) != tuple.__len__(value) or static_class_attr(type(value), "_replace") is None:
        return None
    return fields


def wrong_loop_targets(root: str, target: str, cell_file: str | None, failing_line: int,
                       namespace: Mapping[str, Any]) -> list[str]:
    """The names a ``for`` loop of the failed cell binds together with ``root`` whose tensors are
    off ``target`` (``[root]`` when no loop binds it)."""
    statement = _loop_binding(root, cell_file, failing_line)
    if statement is None:
        return [root]
    out = []
    for name in user_code.assigned_names(statement.node):
        value = dict.get(namespace, name) if issubclass(type(namespace), dict) else None
        if tensor_getters.is_tensor(value) and str(tensor_getters.device(value)) != target:
            out.append(name)
    ordered = [e.id for e in ast.walk(statement.node.target) if isinstance(e, ast.Name) and e.id in out]
    return ordered or [root]


# -- finding the line -------------------------------------------------------------------------


def assigned_in_session(name: str, cell_frame: types.FrameType | None, failing_line: int, wrong: list[str],
                     device_expr: str, wrap: bool = False, moved: str | None = None,
                     made: str | None = None) -> Cause | None:
    """Where the namespace variable ``name`` (of class ``made``, when known) was made: in the failed
    cell before its failing line (a ``for`` loop over host batches included: ``moved`` as in
    :func:`loop_edit`), else in the latest earlier cell that binds it."""
    current = user_code.current_cell(cell_frame.f_code.co_filename) if cell_frame is not None else None
    statement = user_code.assignment_in_session(name, current, failing_line, made)
    if statement is None:
        return None
    here = current is not None and statement.cell == current.number
    if isinstance(statement.node, (ast.For, ast.AsyncFor)):
        edit = loop_edit(statement, wrong, device_expr, moved)
        return Cause(_source_line(statement), "loop", edit, here) if edit is not None else None
    if wrap:
        later = _later_placement(name, statement, failing_line if here else 1 << 30)
        if later is not None:
            return _placement_origin(name, later, device_expr, here)
    made = creation_edit(statement, device_expr, wrap=wrap)
    if made is None:
        return None
    kind, edit = made
    return Cause(_source_line(statement), kind, edit, here)


def _places_on_host(call: ast.Call) -> bool:
    """``m.cpu()``, ``m.to("cpu")``, ``m.load_state_dict(sd, assign=True)`` (it takes the tensors
    of ``sd`` where they are): a statement after a model's creation that decides its device."""
    method = call.func.attr if isinstance(call.func, ast.Attribute) else ""
    if method == "load_state_dict":
        return any(k.arg == "assign" and not (isinstance(k.value, ast.Constant) and not k.value.value)
                   for k in call.keywords)
    return _host_move(call) is not None


def _later_placement(name: str, statement: user_code.Statement, before: int) -> user_code.Statement | None:
    """The last statement after ``statement`` in its cell, before line ``before``, that puts the
    module ``name`` on the host (when no later statement moves it on)."""
    tree = user_code.parse(statement.filename)
    if tree is None:
        return None
    found = None
    for node in tree.body:
        if node.lineno <= statement.line or node.lineno >= before:
            continue
        value = node.value if isinstance(node, ast.Expr) else None
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) \
                and ast.unparse(value.func.value) == name:
            placed = _places_on_host(value)
            found = user_code.Statement(statement.filename, node.lineno, node, statement.cell) if placed else None
    return found


def _placement_origin(name: str, statement: user_code.Statement, device_expr: str, here: bool) -> Cause | None:
    """The edit of a statement that puts a module on the host: its move goes to the device
    instead, or the module moves to the device on the next line."""
    if not _single_line(statement):
        return None
    where = _source_line(statement)
    text = where.text
    call = statement.node.value
    if _host_move(call) is not None:
        indent = _indent(statement)
        start, end = call.col_offset - indent, (call.end_col_offset or 0) - indent
        new = f"{_cut(text, 0, start)}{name}.to({device_expr}){_cut(text, end)}"
    else:
        new = f"{text}\n{name}.to({device_expr})"
    return Cause(where, "value", SourceEdit(where, text, new, statement.function), here)


def local_origin(name: str, frame: types.FrameType, failing_line: int, wrong: list[str],
                 device_expr: str, plain_values: bool = False) -> Cause | None:
    """Where a local of a user function got its value: its last assignment before the failing
    line (or the ``for`` loop binding it), read from the function's source. A factory call is
    edited; with ``plain_values``, so is an assignment of data that only passes through
    (``data = batch[0]``: the value moves there), never a computed one (``h = self.fc(x)``)."""
    node = user_code.function_node(frame.f_code)
    if node is None:
        return None
    statement = user_code.last_assignment(name, frame.f_code.co_filename, node.body, failing_line,
                                        locations.cell_number(frame.f_code.co_filename), frame.f_code.co_name)
    if statement is None:
        return None
    if isinstance(statement.node, (ast.For, ast.AsyncFor)):
        if not _loop_makes(statement.node, frame, wrong):
            return None
        edit = loop_edit(statement, wrong, device_expr)
        return Cause(_source_line(statement), "loop", edit) if edit is not None else None
    statement = user_code.made_before_updates(name, statement, node.body, lambda v: argument_root(ast.unparse(v)) == name,
                                            lambda s: (creation_edit(s, device_expr, name=name) or ("",))[0] == "factory")
    made = creation_edit(statement, device_expr, name=name)
    if made is None or (made[0] != "factory" and not _unpacks(statement)
                        and not (plain_values and _passes_through(statement))):
        return None
    return Cause(_source_line(statement), made[0], made[1])


def _loop_makes(loop: ast.For | ast.AsyncFor, frame: types.FrameType, names: list[str]) -> bool:
    """Whether a ``for`` loop of ``frame``'s function gives ``names`` their device: each is a tensor
    or module (``.to()`` moves it) and the loop iterates what yields values (a loader, a generator),
    not a list, tuple or dict of tensors it was handed, made where the fix belongs."""
    local_vars = locations.frame_locals(frame)
    if not all(tensor_getters.is_tensor(v) or issubclass(type(v), torch.nn.Module)
               for v in (dict.get(local_vars, n) for n in names)):
        return False
    held = [dict.get(local_vars, n.id) for n in ast.walk(loop.iter) if isinstance(n, ast.Name)]
    items = [v for h in held if type(h) in (list, tuple, dict) for v in (dict.values(h) if type(h) is dict else h)]
    return not any(tensor_getters.is_tensor(v) or type(v) is dict and any(map(tensor_getters.is_tensor, dict.values(v)))
                   for v in items)


def _unpacks(statement: user_code.Statement) -> bool:
    node = statement.node
    return isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], (ast.Tuple, ast.List))


def _passes_through(statement: user_code.Statement) -> bool:
    """``data = batch[0]``, ``x = x``, ``inputs = sample.x``: a value bound, indexed or read, not computed."""
    value = getattr(statement.node, "value", None)
    return value is not None and all(isinstance(n, (ast.Name, ast.Subscript, ast.Attribute, ast.Constant, ast.Load,
                                                    ast.Slice, ast.Tuple)) for n in ast.walk(value))


def argument_root(expression: str) -> str | None:
    """The name an argument is of, through what keeps a tensor's device (``x`` for ``x.view(-1, 784)``,
    ``batch[0]``, ``x.float()``); None for anything computed or moved."""
    try:
        node = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return None
    while True:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in SAME_DEVICE_METHODS:
            node = node.func.value
        else:
            return None


def local_origin_at(filename: str, function: str, lineno: int, name: str, device_expr: str) -> Cause | None:
    """:func:`local_origin` for a function known by file, name and a line inside it (one that
    torch.compile traced: no frame of it ever ran)."""
    tree = user_code.parse(filename)
    if tree is None:
        return None
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == function and n.lineno <= lineno <= (n.end_lineno or n.lineno)), None)
    if node is None:
        return None
    statement = user_code.last_assignment(name, filename, node.body, lineno, locations.cell_number(filename), function)
    if statement is None or isinstance(statement.node, (ast.For, ast.AsyncFor)):
        return None
    made = creation_edit(statement, device_expr)
    if made is None or made[0] != "factory":
        return None
    return Cause(_source_line(statement), made[0], made[1])


def call_argument(caller: types.FrameType, caller_line: str, function: str, code: types.CodeType,
                  parameter: str) -> str | None:
    """The expression the caller's line passes as ``parameter`` of ``function``
    (``x`` in ``out = project(x)``), or None."""
    try:
        tree = ast.parse(caller_line.strip())
    except SyntaxError:  # a call written over several lines: its whole statement
        tree = user_code.parsed_statement(caller.f_code, caller.f_lineno)
    if tree is None:
        return None
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        # A forward runs when a module is called (model(x)): the callee is a module, not any call (.mean()).
        if callee != function and not (function == "forward" and _calls_a_module(caller, node.func)):
            continue
        given = user_code.argument_for(node, list(names), parameter, 1 if names and names[0] == "self" else 0)
        if given is not None:
            return ast.unparse(given)
    return None


def _calls_a_module(frame: types.FrameType, func: ast.expr) -> bool:
    """Whether ``func`` (as written in ``frame``'s line) names an ``nn.Module``, read statically."""
    from ...collect import MISSING, object_at

    scope = dict(frame.f_globals) if type(frame.f_globals) is dict else {}
    if frame.f_locals is not frame.f_globals:
        scope.update(locations.frame_locals(frame))
    value = object_at(scope, ast.unparse(func))
    return value is not MISSING and issubclass(type(value), torch.nn.Module)


def line_origin(where: SourceLine, device_expr: str, in_failed_cell: bool) -> Cause | None:
    """A tensor made on a known line (a temporary, or one the check saw being made): ``device=``
    on the factory calls of that line that lack it."""
    text = where.text.strip()
    if not text or locations.is_library_file(where.file):
        return None
    try:
        tree, offset, whole = ast.parse(text), 0, True
    except SyntaxError:  # one line of an expression written over several: its statement's calls on it
        tree, physical = user_code.statement_holding(where.file, where.line), linecache.getline(where.file, where.line)
        offset, whole = len(physical.encode()) - len(physical.lstrip().encode()), False
    on_line = lambda calls: [c for c in calls if whole or c.lineno == c.end_lineno == where.line]  # noqa: E731
    calls = (on_line(factory_calls(tree)) or on_line(factory_calls(tree, given_too=True))) if tree else []
    if not calls:
        return None
    new = with_device(text, calls, device_expr, offset)
    if new is None or new == text:
        return None
    return Cause(where, "factory", SourceEdit(where, text, new, where.function), in_failed_cell)


def assignments_in_methods(cls: type, attr: str, skip: tuple[str, ...] = ("__init__",),
                           calls_on: str | None = None) -> list[user_code.Statement]:
    """``self.<attr> = …`` statements in the user's own methods of ``cls`` other than ``skip``
    (a buffer reassigned in ``forward`` gets its device there on every call); with ``calls_on``,
    the ``self.<calls_on>.append(…)`` (``extend``, ``insert``) statements instead."""
    from ...collect import FUNCTION_CODE, mro, plain_class_dict

    out = []
    for klass in mro(cls):
        if klass is torch.nn.Module or klass is object:
            break
        for method, value in dict.items(plain_class_dict(klass)):
            if type(value) is not types.FunctionType or method in skip:
                continue
            code = FUNCTION_CODE(value)
            if not locations.is_user_code(code):
                continue
            node = user_code.function_node(code)
            if node is None:
                continue
            for statement in user_code.statements(node.body):
                targets = statement.targets if isinstance(statement, ast.Assign) else \
                    [statement.target] if isinstance(statement, (ast.AnnAssign, ast.AugAssign)) else []
                if calls_on is not None:
                    call = statement.value if isinstance(statement, ast.Expr) else None
                    hit = (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                           and call.func.attr in ("append", "extend", "insert")
                           and ast.unparse(call.func.value) == f"self.{calls_on}")
                else:
                    hit = any(isinstance(t, ast.Attribute) and t.attr == attr and isinstance(t.value, ast.Name)
                              and t.value.id == "self" for t in targets)
                if hit:
                    out.append(user_code.Statement(code.co_filename, statement.lineno, statement,
                                                 locations.cell_number(code.co_filename), code.co_name))
    return out
