"""Every source edit a fix offers is checked against its line before it is offered.

An edit that gives a device (``device=`` added to a call, ``.to(dev)`` after a value) must run:
the line compiles, no keyword is given twice, and the device it gives survives the rest of the
line. Read statically from the line's text (nothing runs):

* a call that takes ``**kwargs`` may already give ``device=`` (a second one raises), and a call
  given ``out=`` makes its result where ``out`` is;
* ``.to(other)``, ``.cpu()`` or ``.cuda()`` later on the line moves the value again;
* an augmented assignment (``base += 1``) changes a tensor in place, which keeps the device of the
  line that made it.

An edit that would not run is replaced by the value moved on a line of its own after the line
(``x = x.to(dev)``) where the line binds one name; otherwise the fix keeps no edit and its note
says why. One interface for every rule that makes edits: :func:`with_edits_that_run`.
"""

from __future__ import annotations

import ast
import dataclasses
import textwrap
from collections import Counter

from ..model import EditCell, Fix, SourceEdit, Steps

#: Methods that move a value to a device of their own (the device given before does not survive).
_MOVERS = frozenset({"cpu", "cuda", "xpu", "mps", "ipu", "hpu", "to", "type"})
#: ``.to()`` keywords that keep the device (a dtype, a copy, a layout).
_DEVICE_KEPT_KEYWORDS = frozenset({"dtype", "non_blocking", "copy", "memory_format"})
#: ``torch.<name>`` spellings of dtypes (``.to(torch.float16)`` keeps the device).
_DTYPES = frozenset({
    "float", "float16", "float32", "float64", "double", "half", "bfloat16", "int", "int8", "int16", "int32",
    "int64", "long", "short", "uint8", "bool", "complex64", "complex128", "cfloat", "cdouble",
    "float8_e4m3fn", "float8_e5m2",
})


def _parsed(text: str) -> ast.Module | None:
    """``text`` (one or more lines, as written) parsed as statements; a compound statement's
    header (``for b in loader:``) parses with a body added. None when it does not parse."""
    text = textwrap.dedent(text).strip("\n")
    for source in (text, text + " pass", text + "\n    pass"):
        try:
            return ast.parse(source)
        except SyntaxError:
            continue
    return None


def _compile_problem(text: str) -> str | None:
    """Why ``text`` would not compile (a keyword given twice is caught by the compiler, not the parser)."""
    text = textwrap.dedent(text).strip("\n")
    last = None
    # As written, or as a header with its body; inside a function and a loop, where a line of
    # one may return, yield, await, break or continue.
    alone = (text, text + " pass", text + "\n    pass")
    inside = tuple(f"{kind} _edited():\n while True:\n{textwrap.indent(source, '  ')}"
                   for kind in ("def", "async def") for source in alone)
    for source in alone + inside:
        try:
            compile(source, "<edit>", "exec", ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
            return None
        except SyntaxError as exc:
            last = exc
    message = str(last.msg) if last is not None else "it does not parse"
    if "keyword argument repeated" in message:
        return f"the edited line would give a keyword twice ({message})"
    return f"the edited line would not compile ({message})"


def _parents(tree: ast.AST) -> dict[int, ast.AST]:
    return {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}


def _keeps_device(call: ast.Call, device_expr: str | None) -> bool:
    """Whether ``.to(...)`` with these arguments keeps the device its value is on: a dtype only,
    or the very device the edit gives."""
    if any(k.arg is None or k.arg not in _DEVICE_KEPT_KEYWORDS | {"device"} for k in call.keywords):
        return False
    given = [k.value for k in call.keywords if k.arg == "device"] + list(call.args[:1])
    for arg in given:
        text = ast.unparse(arg)
        if device_expr is not None and text == device_expr:
            continue
        if isinstance(arg, ast.Attribute) and isinstance(arg.value, ast.Name) and arg.value.id == "torch" \
                and arg.attr in _DTYPES:
            continue
        return False
    return not call.args[1:] or all(isinstance(a, ast.Attribute) and a.attr in _DTYPES for a in call.args[1:2])


def _undone_later(node: ast.AST, parents: dict[int, ast.AST], device_expr: str | None,
                  added: frozenset[int] = frozenset()) -> str | None:
    """What later on the line moves the value ``node`` makes (``.to(other)``, ``.cpu()``), if anything;
    a move the edit itself adds (``added``, by node id) is where the value is meant to go."""
    while True:
        parent = parents.get(id(node))
        if not (isinstance(parent, ast.Attribute) and parent.value is node):
            return None
        call = parents.get(id(parent))
        if not (isinstance(call, ast.Call) and call.func is parent):
            return None
        if id(call) in added:
            return None
        if parent.attr in _MOVERS and not (parent.attr == "to" and _keeps_device(call, device_expr)) \
                and not (parent.attr == "type" and not call.args and not call.keywords):
            return f".{parent.attr}({', '.join(ast.unparse(a) for a in call.args)}) later on the line moves it again"
        node = call


def _given_devices(old: ast.Module, new: ast.Module) -> list[tuple[ast.Call, str, str]]:
    """The calls of ``new`` that give a device ``old`` did not: (call, how, device expression);
    ``how`` is ``"device="`` or ``".to()"``, the ``device=`` ones first."""
    def calls(tree: ast.Module) -> list[ast.Call]:
        return [n for n in ast.walk(tree) if isinstance(n, ast.Call)]

    def moves(tree: ast.Module) -> Counter:
        return Counter(ast.unparse(n.args[0]) for n in calls(tree) if isinstance(n.func, ast.Attribute)
                       and n.func.attr == "to" and n.args and not _keeps_device(n, None))

    old_devices = Counter(ast.unparse(k.value) for n in calls(old) for k in n.keywords if k.arg == "device")
    old_moves = moves(old)
    keywords, moved = [], []
    for node in calls(new):
        device = next((k.value for k in node.keywords if k.arg == "device"), None)
        if device is not None and old_devices[ast.unparse(device)] == 0:
            keywords.append((node, "device=", ast.unparse(device)))
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "to" and node.args \
                and not _keeps_device(node, None):
            text = ast.unparse(node.args[0])
            if old_moves[text] > 0:
                old_moves[text] -= 1  # the line had this move already
            else:
                moved.append((node, ".to()", text))
    return keywords + moved


@dataclasses.dataclass(frozen=True)
class Checked:
    """An edit as checked: ``edit`` is what may be offered (the edit itself, its replacement, or
    None); ``reason`` says why the edit as made would not run (None when it runs)."""

    edit: SourceEdit | None
    reason: str | None = None


def why_not(edit: SourceEdit) -> str | None:
    """Why ``edit`` would not run as offered, or None when it would (or cannot be told from its
    line alone: one line of a statement written over several)."""
    old_tree = _parsed(edit.old)
    if old_tree is None or not edit.new.strip():
        return None  # a piece of a longer statement, or a line deleted: nothing to compile alone
    problem = _compile_problem(edit.new)
    if problem is not None:
        return problem
    new_tree = _parsed(edit.new)
    given = _given_devices(old_tree, new_tree)
    if not given:
        return None
    first = old_tree.body[0] if old_tree.body else None
    if isinstance(first, ast.AugAssign):
        target = ast.unparse(first.target)
        return (f"`{target} {_OPERATORS.get(type(first.op), '?=')} …` changes {target} in place, and {target} "
                "keeps the device of the line that made it")
    parents = _parents(new_tree)
    for call, how, device_expr in given:
        if how == "device=":
            if isinstance(call.func, ast.Attribute) and call.func.attr in _MOVERS:
                return f".{call.func.attr}() decides the device itself and takes no device= beside it"
            if any(k.arg is None for k in call.keywords):
                spread = next(ast.unparse(k.value) for k in call.keywords if k.arg is None)
                return f"the call takes **{spread}, which may already give device= (a second one raises)"
            if any(k.arg == "out" for k in call.keywords):
                return "the call writes into out=, whose device decides where its result is"
        undone = _undone_later(call, parents, device_expr, frozenset(id(c) for c, how, _ in given if how == ".to()"))
        if undone is not None:
            return undone
    return None


_OPERATORS = {ast.Add: "+=", ast.Sub: "-=", ast.Mult: "*=", ast.Div: "/=", ast.MatMult: "@=", ast.FloorDiv: "//=",
              ast.Mod: "%=", ast.Pow: "**=", ast.BitAnd: "&=", ast.BitOr: "|=", ast.BitXor: "^=",
              ast.LShift: "<<=", ast.RShift: ">>="}


def _moved_after(edit: SourceEdit) -> SourceEdit | None:
    """The line as written, then its one bound name moved on a line of its own (``x = x.to(dev)``)."""
    old_tree, new_tree = _parsed(edit.old), _parsed(edit.new)
    if old_tree is None or new_tree is None or len(old_tree.body) != 1:
        return None
    statement = old_tree.body[0]
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target = statement.targets[0]
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        target = statement.target
    else:
        return None
    if not isinstance(target, ast.Name):
        return None
    given = _given_devices(old_tree, new_tree)
    if not given:
        return None
    name, device_expr = target.id, given[0][2]
    moved = dataclasses.replace(edit, new=f"{edit.old.strip()}\n{name} = {name}.to({device_expr})")
    return moved if why_not(moved) is None else None


def checked(edit: SourceEdit) -> Checked:
    """``edit`` if it runs; else the value moved after the line, or nothing, with the reason."""
    reason = why_not(edit)
    if reason is None:
        return Checked(edit)
    return Checked(_moved_after(edit), reason)


def _action_without(action: object, dropped: dict[SourceEdit, SourceEdit | None]) -> object:
    """``action`` with each cell edit of ``dropped`` replaced (or left out when it has none)."""
    if type(action) is EditCell and action.edit in dropped:
        replacement = dropped[action.edit]
        return EditCell(replacement) if replacement is not None else None
    if type(action) is Steps:
        steps = tuple(a for a in (_action_without(s, dropped) for s in action.actions) if a is not None)
        return (Steps(steps) if len(steps) > 1 else steps[0]) if steps else None
    return action


def with_edits_that_run(fix: Fix | None) -> Fix | None:
    """``fix`` with only edits that run: each checked, replaced by a move after its line where it
    would not, or dropped with the reason in the fix's note; then its Apply fix makes every edit
    it shows in a notebook cell (:func:`with_cell_edits_applied`)."""
    return with_cell_edits_applied(_checked_edits(fix))


def carried_edits(action: object) -> list[SourceEdit]:
    """The source edits ``action`` makes itself (its cell edits, in order)."""
    if type(action) is EditCell:
        return [action.edit]
    if type(action) is Steps:
        return [e for step in action.actions for e in carried_edits(step)]
    return []


def with_cell_edits_applied(fix: Fix | None) -> Fix | None:
    """``fix`` whose action makes, besides what it did, each edit it shows of a notebook cell, in
    the cell that holds the line (the cell runs edited when it runs again): so that running the
    cells again does not bring the problem back. A fix whose code is to be run by hand is left as
    it is; an edit of a file is shown, for the user to make."""
    if fix is None or not fix.edits or (fix.action is None and fix.code is not None):
        return fix
    carried = carried_edits(fix.action)
    cells = [e for e in fix.edits if e.where.cell is not None and e not in carried]
    if not cells:
        return fix
    steps = list(fix.action.actions) if type(fix.action) is Steps else [fix.action] if fix.action is not None else []
    steps += [EditCell(edit) for edit in cells]
    return dataclasses.replace(fix, action=steps[0] if len(steps) == 1 else Steps(tuple(steps)))


def edits_by_hand(fix: Fix) -> list[SourceEdit]:
    """The edits ``fix`` shows that its action does not make (a file's lines): the user makes them."""
    carried = carried_edits(fix.action)
    return [e for e in fix.edits if e not in carried]


def _checked_edits(fix: Fix | None) -> Fix | None:
    if fix is None or not fix.edits:
        return fix
    results = [(edit, checked(edit)) for edit in fix.edits]
    if all(c.reason is None for _, c in results):
        return fix
    dropped = {edit: c.edit for edit, c in results if c.reason is not None}
    notes = []
    for edit, c in results:
        if c.reason is None:
            continue
        if c.edit is not None:
            notes.append(f"The edit of {edit.where.where} moves its value on a line after it, not on the line: "
                         f"{c.reason}.")
        else:
            notes.append(f"No edit of {edit.where.where}: {c.reason}; make it on the right device where it is made.")
    edits = tuple(c.edit for _, c in results if c.edit is not None)
    action = _action_without(fix.action, dropped)
    return dataclasses.replace(fix, edits=edits, action=action, note=" ".join(filter(None, [fix.note, *notes])),
                               rerun=fix.rerun and (action is not None or fix.code is not None))
