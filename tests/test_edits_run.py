"""Every edit rule against lines that already decide the device another way: each edit offered
(after :func:`devinspect.diagnose.edit_checks.checked`) compiles, gives no keyword twice and,
run with the simulated device, makes the tensor on the target device; an edit that would not is
replaced by a move after the line, or dropped with its reason."""

from __future__ import annotations

import ast
import itertools
import linecache

import pytest
import torch

from devinspect.collect.code.user_code import Statement as UserStatement
from devinspect.diagnose import edit_checks, fix_builders
from devinspect.diagnose.causes import creation_sites, line_edits
from devinspect.model.fixes import EditCell, Fix, SourceEdit
from devinspect.model.records import SourceLine

#: (line, the name it binds and the edit must put on the device)
SHAPES = {
    "factory": ("x = torch.ones(4, 3)", "x"),
    "kwargs giving the device": ("x = torch.ones(4, 3, **kw)", "x"),
    "kwargs giving a dtype": ("x = torch.ones(4, 3, **dtype_kw)", "x"),
    "out=": ("x = torch.ones(4, 3, out=buf)", "x"),
    ".to(other) after": ("x = torch.ones(4, 3).to(other)", "x"),
    ".to(other tensor) after": ("x = torch.zeros(4, 3).to(host)", "x"),
    ".cpu() after": ("x = torch.zeros(4, 3).cpu()", "x"),
    ".to(dtype) after": ("x = torch.zeros(4, 3).to(torch.float64)", "x"),
    "kwargs then .cpu()": ("x = torch.ones(4, 3, **kw).cpu()", "x"),
    "device given": ('x = torch.ones(4, 3, device="cpu")', "x"),
    "arithmetic": ("x = torch.randn(4, 3) * 2 + 1", "x"),
    "annotated": ("x: torch.Tensor = torch.ones(4, 3)", "x"),
    "unpacked": ("x, y = torch.ones(4, 3), torch.ones(2)", "x"),
    "augmented": ("base += 1", "base"),
    "augmented with a factory": ("base += torch.ones(4, 3)", "base"),
    "like": ("x = torch.zeros_like(host)", "x"),
}
SETUP = """
import torch
kw = dict(device="cpu", dtype=torch.float32)
dtype_kw = dict(dtype=torch.float32)
buf = torch.empty(4, 3)
other = "cpu"
host = torch.ones(4, 3)
base = torch.zeros(4, 3)
"""
DEVICE_EXPR = "dev"


def _statement(key: str, text: str) -> UserStatement:
    filename = f"<edit shape {key}>"
    linecache.cache[filename] = (len(text) + 1, None, [text + "\n"], filename)
    return UserStatement(filename, 1, ast.parse(text).body[0], None)


def _where(statement: UserStatement) -> SourceLine:
    return SourceLine(statement.filename, 1, "<module>", statement.text)


def _creation(statement, name, wrap):
    made = creation_sites.creation_edit(statement, DEVICE_EXPR, wrap=wrap, name=name)
    return [made[1]] if made is not None else []


def _factory_keyword(statement, name):
    return [e for call in ast.walk(statement.node) if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
            for e in [fix_builders.factory_device_edit(_where(statement), call.func.attr, DEVICE_EXPR)] if e is not None]


def _wrapped_name(statement, name):
    edit = fix_builders.wrap_name_edit(_where(statement), name, DEVICE_EXPR)
    return [edit] if edit is not None else []


def _value_of(node: ast.stmt, name: str) -> ast.AST:
    """The part of the statement that makes ``name``: its element of an unpacked tuple, else all of it."""
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple) and isinstance(node.value, ast.Tuple):
        names = [getattr(t, "id", None) for t in node.targets[0].elts]
        return node.value.elts[names.index(name)]
    return node


def _changes(statement, name, change):
    written = line_edits.statement_at(statement.filename, 1)
    out = []
    for node in ast.walk(_value_of(written.node, name)):
        made = change(line_edits.Changes(written), node)
        edits = made.edits() if made is not None else None
        out.extend(edits or ())
    return out


def _keyword_changes(statement, name):
    return _changes(statement, name, lambda c, node: c.keyword(node, "device", DEVICE_EXPR)
                    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else None)


def _appended_move(statement, name):
    return _changes(statement, name, lambda c, node: c.append(node, f".to({DEVICE_EXPR})")
                    if isinstance(node, ast.Call) else None)


#: Every rule that writes a device into a line, by its interface.
RULES = {
    "creation_edit": lambda s, n: _creation(s, n, wrap=False),
    "creation_edit wrap": lambda s, n: _creation(s, n, wrap=True),
    "factory_device_edit": _factory_keyword,
    "wrap_name_edit": _wrapped_name,
    "Changes.keyword device": _keyword_changes,
    "Changes.append .to": _appended_move,
}


def runs(edit: SourceEdit, name: str, sim: torch.device) -> str | None:
    """Why the edited line does not do its job, or None: it compiles, gives no keyword twice and,
    run after the setup, leaves ``name`` on the simulated device."""
    try:
        code = compile(edit.new, "<edited>", "exec")
    except SyntaxError as exc:
        return f"does not compile: {exc.msg}"
    for call in (n for n in ast.walk(ast.parse(edit.new)) if isinstance(n, ast.Call)):
        given = [k.arg for k in call.keywords if k.arg is not None]
        if len(given) != len(set(given)):
            return "repeats a keyword"
    namespace: dict = {"dev": sim}
    exec(SETUP, namespace)
    try:
        exec(code, namespace)
    except Exception as exc:  # the line's own error is the finding
        return f"raises {type(exc).__name__}: {exc}"
    value = namespace.get(name)
    if not isinstance(value, torch.Tensor) or value.device.type != sim.type:
        return f"{name} is on {getattr(value, 'device', None)}"
    return None


CASES = list(itertools.product(RULES, SHAPES))


@pytest.mark.parametrize("rule,shape", CASES)
def test_every_offered_edit_runs(sim, rule, shape):
    line, name = SHAPES[shape]
    statement = _statement(shape, line)
    for raw in RULES[rule](statement, name):
        checked = edit_checks.checked(raw)
        if checked.edit is not None:
            assert runs(checked.edit, name, sim) is None, (raw.new, checked.edit.new, checked.reason)
        else:
            assert checked.reason, raw.new
        if checked.reason is None:
            assert checked.edit == raw


def test_edits_that_failed_before_now_run_or_are_refused_with_a_reason(sim):
    """The count, for the record: of the edits the rules make on these shapes, how many would not
    run as made, and how many that are offered now would not."""
    made = failed_before = failed_after = refused = 0
    for rule, shape in CASES:
        line, name = SHAPES[shape]
        for raw in RULES[rule](_statement(shape, line), name):
            made += 1
            failed_before += runs(raw, name, sim) is not None
            checked = edit_checks.checked(raw)
            refused += checked.edit is None
            failed_after += checked.edit is not None and runs(checked.edit, name, sim) is not None
    assert made > 20 and failed_before > 0
    assert failed_after == 0
    print(f"edits made: {made}; failing as made: {failed_before}; failing as offered: {failed_after}; "
          f"refused with a reason: {refused}")


def test_augmented_assignment_gets_no_edit_and_the_fix_says_why():
    statement = _statement("augmented with a factory", "base += torch.ones(4, 3)")
    edit = fix_builders.factory_device_edit(_where(statement), "ones", DEVICE_EXPR)
    fix = Fix(summary="make base on sim:0", edits=(edit,), action=EditCell(edit), rerun=True)
    checked = edit_checks.with_edits_that_run(fix)
    assert checked.edits == () and checked.action is None and not checked.rerun
    assert "changes base in place" in checked.note


def test_a_replaced_edit_is_what_the_button_makes():
    statement = _statement("kwargs giving the device", "x = torch.ones(4, 3, **kw)")
    edit = fix_builders.factory_device_edit(_where(statement), "ones", DEVICE_EXPR)
    fix = edit_checks.with_edits_that_run(Fix(summary="make x on sim:0", edits=(edit,), action=EditCell(edit)))
    assert fix.edits[0].new == "x = torch.ones(4, 3, **kw)\nx = x.to(dev)"
    assert fix.action == EditCell(fix.edits[0])
    assert "**kw" in fix.note
