"""The user's code as text: the session's cells and the functions of their frames, parsed, never run.

Where a tensor got its device is usually written in the user's own code: a factory call
without ``device=`` in the cell that failed, an input made in an earlier cell, a ``for``
loop over a DataLoader, a local of ``forward``. These readers find such lines from the
source text IPython keeps for every cell (``linecache``) and from a frame's code object.
Parsed cells are kept by file name and size (a cell's text never changes once run).
"""

from __future__ import annotations

import ast
import linecache
import textwrap
import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch

from ..objects import type_is_one_of
from . import locations
from .expressions import called_model, expression_root
from .output_operands import output_operands

#: How many of the most recent cells are looked through for an assignment.
MAX_CELLS = 200
_parsed: dict[tuple[str, int], ast.Module | None] = {}


@dataclass(frozen=True)
class Cell:
    """A cell of the session: its execution count, compiled file name and text."""

    number: int
    filename: str
    text: str


@dataclass(frozen=True)
class Statement:
    """A statement of the user's code: where it is and its parsed form."""

    filename: str
    #: Line of the statement's start, 1-based, in its file or cell.
    line: int
    node: ast.stmt
    #: The execution count of its cell, or None for a file.
    cell: int | None
    #: The function it is in (``forward``), or ``""`` at a cell's top level.
    function: str = ""

    @property
    def text(self) -> str:
        return linecache.getline(self.filename, self.line).strip()


def parse(filename: str) -> ast.Module | None:
    """The parsed text of a cell or file (None when it is not at hand or does not parse)."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    key = (filename, sum(len(line) for line in lines))
    if key not in _parsed:
        if len(_parsed) > 512:
            _parsed.clear()
        # Python first: a line may start with the % operator inside brackets ("..." % args). Else
        # IPython's own syntax (%magic, %%cell magic, !shell) becomes blank lines, those that start
        # a line first, then indented ones too: the Python around it parses, every line keeps its number.
        def blank(indented: bool) -> str:
            return "".join("\n" if (line.lstrip() if indented else line).startswith(("%", "!")) else line
                           for line in lines)

        _parsed[key] = None
        for text in ("".join(lines), blank(False), blank(True)):
            try:
                _parsed[key] = ast.parse(text, filename)
                break
            except (SyntaxError, ValueError):
                continue
    return _parsed[key]


def session_cells() -> list[Cell]:
    """The cells IPython has run in this session, oldest first (only those linecache still holds)."""
    found = []
    for filename in list(linecache.cache):
        number = locations.cell_number(filename)
        if number is not None:
            found.append(Cell(number, filename, "".join(linecache.getlines(filename))))
    found.sort(key=lambda c: c.number)
    return found[-MAX_CELLS:]


def function_node(code: types.CodeType) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The ``def`` of a code object in its file's parsed text."""
    tree = parse(code.co_filename)
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == code.co_name:
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            if first <= code.co_firstlineno <= node.lineno:
                return node
    return None


def parsed_statement(code: types.CodeType, line: int) -> ast.Module | None:
    """The simple statement of the function (or cell) of ``code`` that holds line ``line``, parsed on
    its own: a call written over several lines, whose one line does not parse. None for a
    compound statement (its header alone is not a statement) or an unknown source."""
    node = function_node(code)
    tree = parse(code.co_filename) if node is None else None
    body = node.body if node is not None else tree.body if tree is not None else []
    held = [s for s in statements(body) if s.lineno <= line <= (s.end_lineno or s.lineno)]
    if not held:
        return None
    inner = min(held, key=lambda s: (s.end_lineno or s.lineno) - s.lineno)
    if any(isinstance(getattr(inner, f, None), list) for f in ("body", "orelse", "handlers")):
        return None
    lines = linecache.getlines(code.co_filename)[inner.lineno - 1: inner.end_lineno or inner.lineno]
    try:
        return ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None


def statement_holding(filename: str, line: int) -> ast.stmt | None:
    """The innermost simple statement of a file or cell that holds ``line``, read from the whole
    file, so its columns are the file's: a line of an expression written over several lines
    does not parse alone."""
    tree = parse(filename)
    held = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno <= line <= (n.end_lineno or n.lineno)
            and not any(isinstance(getattr(n, f, None), list) for f in ("body", "orelse", "handlers"))
            ] if tree is not None else []
    return min(held, key=lambda s: (s.end_lineno or s.lineno) - s.lineno, default=None)


def statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Every statement of a block, nested blocks included, not entering nested functions or classes."""
    for node in body:
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from statements([n for n in inner if isinstance(n, ast.stmt)] +
                                      [s for h in inner if isinstance(h, ast.ExceptHandler) for s in h.body])


def parameter_names(node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> set[str]:
    """The names a ``def`` or ``lambda`` binds as its parameters, ``*args`` and ``**kwargs`` included."""
    a = node.args
    return {p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg) if p is not None}


def bound_before(code: types.CodeType, name: str, line: int) -> bool:
    """Whether the local ``name`` of the function of ``code`` has a value when line ``line`` starts:
    a parameter, or bound by a statement that starts before it (a loop holding the line binds its
    target on every pass). A name bound only further down (later in a loop body) is not: an edit
    reading it there raises on the first pass. Unknown source: True (nothing to contradict)."""
    node = function_node(code)
    if node is None:
        return True
    if name in parameter_names(node):
        return True
    return any(name in assigned_names(s) or name in _imported(s) for s in statements(node.body) if s.lineno < line)


def rebound_from(code: types.CodeType, name: str, line: int, now: int | None = None) -> bool:
    """Whether a statement of the function of ``code`` at or after line ``line`` binds ``name``: then
    the value the frame shows now is not the one a line there reads (``data, t = data.to(d), t``
    reads the old ``data``). With ``now`` (the line the frame is running), a binding at or after
    ``now`` has not run yet, unless a loop holds ``line`` (an earlier pass ran it)."""
    node = function_node(code)
    if node is None:
        return False
    body = list(statements(node.body))
    looped = any(isinstance(s, (ast.For, ast.AsyncFor, ast.While)) and s.lineno < line <= (s.end_lineno or s.lineno)
                 for s in body)
    end = now if now is not None and now > line and not looped else 1 << 30
    return any(name in assigned_names(s) for s in body if line <= s.lineno < end
               and not isinstance(s, (ast.For, ast.AsyncFor)))


def _imported(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def assigned_names(node: ast.stmt) -> set[str]:
    """Top-level names a statement binds (assignment targets, ``for`` targets, ``with … as``)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        targets = [node.target]
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        targets = [node.target]
    elif isinstance(node, (ast.With, ast.AsyncWith)):
        targets = [item.optional_vars for item in node.items if item.optional_vars is not None]
    out: set[str] = set()
    while targets:
        target = targets.pop()
        if isinstance(target, ast.Name):
            out.add(target.id)
        elif isinstance(target, (ast.Tuple, ast.List)):
            targets.extend(target.elts)
        elif isinstance(target, ast.Starred):
            targets.append(target.value)
        elif isinstance(target, (ast.Attribute, ast.Subscript)):
            # model.head = ..., model[2] = ...: that part is bound; the names it is read through
            # (model, and idx in table[idx] = ...) are only used.
            out.add(ast.unparse(target))
    return out


def last_assignment(name: str, filename: str, body: list[ast.stmt], before: int, cell: int | None,
                    function: str = "", made: str | None = None) -> Statement | None:
    """The last statement in ``body`` binding ``name`` that starts before line ``before``
    (a ``for`` loop whose body holds that line counts: it binds the name on every pass). With
    ``made``, the class name of the value: of two branches of an ``if`` that each bind it
    (``model = TransformerModel(...)`` / ``else: model = RNNModel(...)``), the one that makes it."""
    found: list[ast.stmt] = []
    for node in statements(body):
        if node.lineno >= before and not (isinstance(node, (ast.For, ast.AsyncFor))
                                          and node.lineno < before <= (node.end_lineno or node.lineno)):
            continue
        if name in assigned_names(node):
            found.append(node)
    if not found:
        return None
    last = max(found, key=lambda n: n.lineno)
    if made is not None and not _makes(last, made):
        ran = [n for n in found if _makes(n, made) and _exclusive(body, n, last)]
        last = max(ran, key=lambda n: n.lineno) if ran else last
    return Statement(filename, last.lineno, last, cell, function)


def made_before_updates(name: str, statement: Statement, body: list[ast.stmt],
                        keeps: Callable[[ast.expr], bool], made_here: Callable[[Statement], bool]) -> Statement:
    """The assignment that made the value ``name`` holds after ``statement``, past the updates
    that only reshape it in place of itself (``ids = ids.unsqueeze(0)``, for which ``keeps``
    holds), when ``made_here`` holds for it (a factory line: it made the tensor, and its device);
    else ``statement``. A bare rebinding (``data = data``) is no reshape: it is where a move goes."""
    current = statement
    for _ in range(8):
        value = current.node.value if isinstance(current.node, ast.Assign) else None
        if value is None or isinstance(value, ast.Name) or not keeps(value):
            break
        earlier = last_assignment(name, current.filename, body, current.line, current.cell, current.function)
        if earlier is None:
            break
        current = earlier
    return current if current is not statement and made_here(current) else statement


def _makes(node: ast.stmt, class_name: str) -> bool:
    """Whether the value ``node`` assigns calls a class of that name (``Net(...)``, ``nn.Net(...).to(d)``)."""
    value = getattr(node, "value", None)
    return value is not None and any(isinstance(c, ast.Call) and ast.unparse(c.func).rsplit(".", 1)[-1] == class_name
                                     for c in ast.walk(value))


def _exclusive(body: list[ast.stmt], a: ast.stmt, b: ast.stmt) -> bool:
    """Whether ``a`` and ``b`` sit in the two branches of one ``if`` (only one of them runs)."""
    def within(node: ast.stmt, block: list[ast.stmt]) -> bool:
        return bool(block) and block[0].lineno <= node.lineno <= (block[-1].end_lineno or block[-1].lineno)

    return any(isinstance(n, ast.If) and ((within(a, n.body) and within(b, n.orelse))
                                          or (within(b, n.body) and within(a, n.orelse))) for n in statements(body))


def assignment_in_session(name: str, current: Cell | None, line: int, made: str | None = None) -> Statement | None:
    """Where the namespace variable ``name`` was last bound: in the current cell before ``line``,
    else in the most recent earlier cell that binds it at its top level (``made``: as in
    :func:`last_assignment`)."""
    cells = session_cells()
    if current is not None:
        tree = parse(current.filename)
        if tree is not None:
            found = last_assignment(name, current.filename, tree.body, line, current.number, made=made)
            if found is not None:
                return found
    for cell in reversed(cells):
        if current is not None and cell.number >= current.number:
            continue
        tree = parse(cell.filename)
        if tree is None:
            continue
        found = last_assignment(name, cell.filename, tree.body, 1 << 30, cell.number, made=made)
        if found is not None:
            return found
    return None


def current_cell(filename: str) -> Cell | None:
    """The cell compiled as ``filename`` (None for a file that is not a cell)."""
    number = locations.cell_number(filename)
    if number is None:
        return None
    return Cell(number, filename, "".join(linecache.getlines(filename)))


#: ``nn.Module``'s own methods (``to``, ``eval``, ``parameters`` …): calling one passes the model
#: no inputs (``forward`` and ``generate`` do).
MODULE_METHODS = frozenset(k for k in vars(torch.nn.Module) if not k.startswith("_")) - {"forward"}


def model_calls(namespace: Any, modules: set[str]) -> list[Any]:
    """The namespace variables the session's latest cell calling each of ``modules`` passes to it
    (module roots as the namespace names them), read from the cells' text."""
    from ...model import ModelCall
    from ..namespace import MISSING, object_at

    found: dict[str, list[ModelCall]] = {}
    for cell in reversed(session_cells()):
        tree = parse(cell.filename)
        if tree is None:
            continue
        calls: dict[str, list[ModelCall]] = {}
        # Names the cell binds, by the line each binding ends on: an input the cell sets before
        # its call (images = images.to(dev)) is what the call gets, whatever the name holds now.
        bindings = [(node.end_lineno or node.lineno, name) for node in statements(tree.body)
                    for name in assigned_names(node)]
        for node, local, function in calls_with_locals(tree):
            callee = expression_root(node.func)
            model = _model_output_in(node, modules) if callee not in modules else None
            if model is not None and model not in found:
                # F.cross_entropy(model(x), labels): labels meet the model's output, on its device.
                set_before = {name for line, name in bindings if line < node.lineno}
                for arg in [*node.args, *(k.value for k in node.keywords)]:
                    root = expression_root(arg)
                    if isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript)) and root not in local \
                            and root not in set_before and object_at(namespace, ast.unparse(arg)) is not MISSING:
                        where = locations.source_line(cell.filename, node.lineno)
                        calls.setdefault(model, []).append(ModelCall(model, ast.unparse(arg), None, where,
                                                                     with_output_to=ast.unparse(node.func)))
                continue
            if function is not None and isinstance(node.func, ast.Name) and callee in parameter_names(function):
                callee = _argument_given(function, callee, callee) or callee  # the model the cells pass in
            if callee not in modules or callee in found or (isinstance(node.func, ast.Attribute)
                                                             and node.func.attr in MODULE_METHODS):
                continue  # not a call of the model: model.eval(), model[0].to(dev)
            if _own_method_without_forward(namespace, node.func):
                continue  # model.init_hidden(bsz): the user's method that never runs the model
            set_before = {name for line, name in bindings if line < node.lineno}
            calls.setdefault(callee, [])  # the latest cell calling it decides, even with nothing to note
            loops = {g.target.id: ast.unparse(g.iter) for comp in ast.walk(tree)
                     if isinstance(comp, (ast.ListComp, ast.GeneratorExp, ast.SetComp, ast.DictComp))
                     for g in comp.generators if isinstance(g.target, ast.Name)}
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                text = ast.unparse(arg)
                if expression_root(arg) in local and isinstance(arg, ast.Name):
                    # A local the function made with the user's helper from the notebook's variables
                    # (data, targets = get_batch(train_data, i)): those are what the model gets.
                    for made_from in helper_inputs(function, arg.id, node.lineno, local, namespace):
                        where = locations.source_line(cell.filename, node.lineno)
                        calls.setdefault(callee, []).append(ModelCall(callee, made_from, None, where))
                # A local the function moves before the call (data = data.to(device)), or a variable the
                # cell moves before it (sample = sample.to(device)): where the model's input goes.
                scope = (function if function is not None and expression_root(arg) in local
                         else tree if function is None and expression_root(arg) in set_before else None)
                if scope is not None and isinstance(arg, ast.Name):
                    device = moved_to(scope, arg.id, node.lineno, namespace)
                    if device and not _moves_before(scope, expression_root(node.func), node.lineno):
                        where = locations.source_line(cell.filename, node.lineno)
                        calls.setdefault(callee, []).append(ModelCall(callee, arg.id, None, where, moved_to=device))
                if expression_root(arg) in set_before or expression_root(arg) in local:
                    continue  # set before the call, or a local of the function the call is in
                container = None
                if isinstance(arg, ast.Name) and arg.id in loops:
                    text = loops[arg.id]
                    value = object_at(namespace, text)
                    container = type(value).__name__ if type_is_one_of(value, (list, tuple, dict)) else None
                    if container is None:
                        continue
                elif object_at(namespace, text) is MISSING:
                    continue
                where = locations.source_line(cell.filename, node.lineno)
                calls.setdefault(callee, []).append(ModelCall(callee, text, container, where))
        for model, operand, expression in output_operands(tree, modules, MODULE_METHODS):
            # out - target, with out = model(x): target meets the output on the model's device.
            if model not in found and expression_root(operand) not in {n for line, n in bindings if line < expression.lineno} \
                    and object_at(namespace, ast.unparse(operand)) is not MISSING:
                calls.setdefault(model, []).append(ModelCall(model, ast.unparse(operand), None, locations.source_line(
                    cell.filename, expression.lineno), with_output_in=ast.unparse(expression)))
        for callee, made in calls.items():
            found.setdefault(callee, made)
        if len(found) == len(modules):
            break
    return [c for made in found.values() for c in made]


def _model_output_in(call: ast.Call, modules: set[str]) -> str | None:
    """The model whose output ``call`` takes as an argument (``model`` in ``loss_fn(model(x), y)``)."""
    return next(filter(None, (called_model(arg, modules, MODULE_METHODS)
                              for arg in [*call.args, *(k.value for k in call.keywords)])), None)


def moved_to(scope: ast.FunctionDef | ast.AsyncFunctionDef | ast.Module | None, name: str, line: int,
             namespace: Any) -> str:
    """The device ``name`` (a local of the user's function, or a variable of a cell: ``scope``) was
    last moved to before ``line`` (``data = data.to(device)``, ``x, y = x.to(dev), y.to(dev)``,
    ``x = x.cuda()``), as a device string: its expression read from the namespace, through the
    argument the session's cells pass where it is a parameter (``train(model, device, loader)``);
    "" where it cannot be read so."""
    if scope is None:
        return ""
    statement = last_assignment(name, "", scope.body, line, None)
    node = statement.node if statement is not None else None
    if not isinstance(node, ast.Assign) or len(node.targets) != 1:
        return ""
    target, value = node.targets[0], node.value
    if isinstance(target, (ast.Tuple, ast.List)) and isinstance(value, (ast.Tuple, ast.List)) \
            and len(target.elts) == len(value.elts):
        value = next((v for t, v in zip(target.elts, value.elts) if isinstance(t, ast.Name) and t.id == name), None)
    elif not (isinstance(target, ast.Name) and target.id == name):
        return ""
    if isinstance(value, (ast.DictComp, ast.ListComp, ast.GeneratorExp)) or (
            isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.args
            and isinstance(value.args[0], ast.GeneratorExp)):
        # batch = {k: v.to(device) for k, v in batch.items()}, tuple(t.to(device) for t in batch): each item moves
        made = value.args[0] if isinstance(value, ast.Call) else value
        value = made.value if isinstance(made, ast.DictComp) else made.elt
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute)):
        return ""
    if value.func.attr == "cuda" and not value.args and not value.keywords:
        return "cuda:0"
    given = value.args[0] if value.args else next((k.value for k in value.keywords if k.arg == "device"), None)
    if value.func.attr != "to" or given is None:
        return ""
    if isinstance(given, ast.Constant) and type(given.value) is str:
        return _device_string(given.value)
    text = ast.unparse(given)
    if not isinstance(scope, ast.Module):
        if expression_root(given) in parameter_names(scope):
            text = _argument_given(scope, expression_root(given), text)
        elif any(expression_root(given) in assigned_names(s) for s in statements(scope.body)):
            return ""  # device = next(model.parameters()).device: the function's own, not the notebook's
    return _device_string(_namespace_value(namespace, text)) if text else ""


def _moves_before(scope: ast.AST, name: str, line: int) -> bool:
    """Whether ``scope`` moves ``name`` itself before ``line`` (``model.to(device)``, ``model.cuda()``,
    ``model = model.to(device)``): the model goes where its inputs go, and the call is fine."""
    return any(isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in _MOVES
               and expression_root(n.func.value) == name and n.lineno < line for n in ast.walk(scope))


def argument_for(call: ast.Call, parameters: list[str], parameter: str, skip: int = 0) -> ast.expr | None:
    """The expression ``call`` passes as ``parameter``: by keyword, else by its position among
    ``parameters`` (in order; the first ``skip`` of them bound otherwise, as ``self`` is by a
    method call); None when it passes none there, or a ``*`` argument stands in its place."""
    for keyword in call.keywords:
        if keyword.arg == parameter:
            return keyword.value
    if parameter in parameters:
        index = parameters.index(parameter) - skip
        if 0 <= index < len(call.args) and not isinstance(call.args[index], ast.Starred):
            return call.args[index]
    return None


def _argument_given(function: ast.FunctionDef | ast.AsyncFunctionDef, parameter: str, text: str) -> str:
    """``text`` (an expression rooted at ``parameter``) with the argument the latest of the
    session's cells passes for it in a call of ``function`` by its name; "" when none does."""
    positional = [a.arg for a in (*function.args.posonlyargs, *function.args.args)]
    for cell in reversed(session_cells()[-RECENT_CELLS:]):
        tree = parse(cell.filename)
        for call in ast.walk(tree) if tree is not None else ():
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == function.name):
                continue
            given = argument_for(call, positional, parameter)
            if given is not None:
                return ast.unparse(given) + text[len(parameter):]
    return ""


def _namespace_value(namespace: Any, text: str) -> Any:
    from ..namespace import MISSING, object_at

    value = object_at(namespace, text)
    return None if value is MISSING else value


def _device_string(value: Any) -> str:
    """``value`` (a ``torch.device`` or a string naming one) as the scan writes devices (``cuda:0``)."""
    try:
        device = value if type(value) is torch.device else torch.device(value) if type(value) is str else None
    except (RuntimeError, ValueError):
        return ""
    if device is None:
        return ""
    return str(device) if device.type == "cpu" or device.index is not None else f"{device.type}:0"


def _own_method_without_forward(namespace: Any, func: ast.expr) -> bool:
    """Whether ``func`` (``model.init_hidden``) is a method of the user's own module class whose
    source never calls the module (no ``self(...)``, ``self.forward(...)`` or a submodule call),
    or a name the model does not have at all (a branch for another kind of model, never run): it
    passes the model no inputs. A library's method (``generate``) is not read: it may."""
    from ..namespace import MISSING, object_at
    from ..objects import instance_dict, static_class_attr

    if not isinstance(func, ast.Attribute):
        return False
    owner = object_at(namespace, ast.unparse(func.value))
    if owner is MISSING or not issubclass(type(owner), torch.nn.Module):
        return False
    found = static_class_attr(type(owner), func.attr)
    if found is None:
        held = instance_dict(owner)
        return func.attr not in held and not any(type(held.get(part)) is dict and func.attr in held[part]
                                                 for part in ("_modules", "_parameters", "_buffers"))
    node = _users_function_node(found)
    if node is None:
        return False
    for n in ast.walk(node):
        if isinstance(n, ast.Call) and expression_root(n.func) == "self" and not (
                isinstance(n.func, ast.Attribute) and n.func.attr in MODULE_METHODS):
            return False  # self(x), self.forward(x), self.encoder(x): it may run the model
    return True


def calls_with_locals(tree: ast.AST) -> Iterator[tuple[ast.Call, frozenset[str], ast.FunctionDef | None]]:
    """Every call in a cell's code, with the names that are locals where it is (the parameters and
    assignments of the functions and lambdas around it): those are not the notebook's variables,
    whatever the namespace holds under the same name. Also the innermost ``def`` around the call."""
    def visit(node: ast.AST, local: frozenset[str], function: ast.FunctionDef | None
              ) -> Iterator[tuple[ast.Call, frozenset[str], ast.FunctionDef | None]]:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            names = parameter_names(node)
            if not isinstance(node, ast.Lambda):
                declared = {n for g in ast.walk(node) if isinstance(g, (ast.Global, ast.Nonlocal)) for n in g.names}
                names |= {n for s in statements(node.body) for n in assigned_names(s)} - declared
                function = node
            local = local | names
        if isinstance(node, ast.Call):
            yield node, local, function
        for child in ast.iter_child_nodes(node):
            yield from visit(child, local, function)

    yield from visit(tree, frozenset(), None)


def _users_function_node(function: Any) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The parsed ``def`` of ``function`` when it is a plain function of the user's code (the
    session's cells or the user's files), else None."""
    from ..objects import FUNCTION_CODE

    if type(function) is not types.FunctionType or not locations.is_user_code(FUNCTION_CODE(function)):
        return None
    return function_node(FUNCTION_CODE(function))


def _moves_nothing(function: Any) -> bool:
    """Whether the source of the user's function ``function`` never moves a tensor (a method of
    :data:`_MOVES`) and never names a device (``.device``, ``device=``): what it returns from its
    arguments stays on their device. Read from the source text; False when unknown."""
    node = _users_function_node(function)
    if node is None:
        return False
    for n in ast.walk(node):
        if isinstance(n, ast.Attribute) and (n.attr in _MOVES or n.attr == "device") \
                or isinstance(n, ast.keyword) and n.arg == "device":
            return False
        if isinstance(n, ast.Call) and not isinstance(n.func, (ast.Name, ast.Attribute)):
            return False
    return True


def helper_inputs(function: ast.FunctionDef | None, name: str, before: int, local: frozenset[str],
                  namespace: Any) -> list[str]:
    """The notebook's variables a local of ``function`` (the cell's ``def``) was made from by a call
    of the user's own helper that moves nothing, as its last binding before line ``before``
    (``data, targets = get_batch(train_data, i)`` makes ``data`` from ``train_data``)."""
    from ..namespace import MISSING, object_at

    if function is None:
        return []
    found = [s for s in statements(function.body) if s.lineno < before and name in assigned_names(s)]
    if not found:
        return []
    value = getattr(max(found, key=lambda s: s.lineno), "value", None)
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id not in local):
        return []
    helper = object_at(namespace, value.func.id)
    if helper is MISSING or not _moves_nothing(helper):
        return []
    return [a.id for a in [*value.args, *(k.value for k in value.keywords)]
            if isinstance(a, ast.Name) and a.id not in local and issubclass(type(object_at(namespace, a.id)), torch.Tensor)]


#: How many of the latest cells are read for function calls.
RECENT_CELLS = 10


def _recent_cells() -> Iterator[tuple[Cell, ast.Module]]:
    """The session's latest cells with their parsed text, newest first (one that does not parse
    left out)."""
    for cell in reversed(session_cells()[-RECENT_CELLS:]):
        tree = parse(cell.filename)
        if tree is not None:
            yield cell, tree


#: Methods that move a tensor (or a batch that moves its tensors) to a device.
_MOVES = frozenset({"to", "cuda", "xpu", "mps"})


def moved_in_cells() -> list[str]:
    """What the latest cell that uses a variable moves as it uses it: ``x`` in
    ``model(x.to(dev))``, ``batch["labels"]`` in ``loss_fn(out, batch["labels"].cuda())`` (as
    written, read from the cells' text). An older cell's move does not count once a newer cell
    uses the variable without it."""
    out: dict[str, None] = {}
    decided: set[str] = set()
    for _, tree in _recent_cells():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _MOVES \
                    and expression_root(node.func.value) not in decided:
                out[ast.unparse(node.func.value)] = None
        decided |= {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    return list(out)


def function_calls(namespace: Any, modules: set[str]) -> list[Any]:
    """Calls in the latest cells (not of ``modules``) that pass two or more namespace tensors."""
    from ...model import FunctionCall
    from ..namespace import object_at

    out = []
    seen: set[str] = set()
    for cell, tree in _recent_cells():
        for node, local, _ in calls_with_locals(tree):
            if expression_root(node.func) in modules:
                continue
            arguments = []
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                parts = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
                for part in parts:
                    if isinstance(part, (ast.Name, ast.Attribute, ast.Subscript)) and expression_root(part) not in local:
                        text = ast.unparse(part)
                        if issubclass(type(object_at(namespace, text)), torch.Tensor):
                            arguments.append(text)
            key = ast.unparse(node)
            if len(arguments) >= 2 and key not in seen:
                seen.add(key)
                out.append(FunctionCall(ast.unparse(node.func), tuple(arguments),
                                        locations.source_line(cell.filename, node.lineno)))
    return out
