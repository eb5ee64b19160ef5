"""The namespace tensors off the target that the user's lines pass to some calls, each fixed where
it is made (as an operand would be): what the call rules over passed inputs share."""

from __future__ import annotations

import ast
from typing import Callable

from ....collect import line_names
from ....model import Cause
from .. import creation_sites
from ..context import CauseContext
from ..fix_writing import line_fix, plain_tensors_under
from ..rules import named_record, of_record, variable_fix


def passed_tensors(context: CauseContext, wanted: Callable[[ast.Call], bool]) -> Cause | None:
    """One cause holding a fix for each namespace tensor off the target that a call ``wanted``
    picks is passed, on the failing line of the innermost user frame and of the cell."""
    call, target, covered = context.call, context.target, context.covered
    names, lines, found = set(covered.names), set(covered.lines), []
    for frame in {id(f): f for f in (call.inner, call.cell) if f is not None}.values():
        where = call.source(frame)
        try:
            tree = ast.parse(where.text)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call) or not wanted(node):
                continue
            for arg in [line_names.converted_from(a.value if isinstance(a, ast.Starred) else a) for a in node.args] \
                    + [line_names.converted_from(k.value) for k in node.keywords]:
                if creation_sites.factory_calls(arg) and where not in lines:
                    # A tensor made right in the call (model(torch.ones(2, 4))): that line is the fix.
                    lines.add(where)
                    fix = line_fix(call, where, frame)
                    if fix is not None:
                        found.append(fix)
                    continue
                on_line = line_names.record_on_line(call.namespace, call.index, arg)
                r = call.index.record(ast.unparse(arg)) or (on_line[0] if on_line else None)
                if r is None and isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript)):
                    # model(**batch), model(*inputs): the tensors the container holds are passed.
                    r = next((u for u in plain_tensors_under(call, ast.unparse(arg)) if u.device != target
                              and u.name not in names), None)
                if r is None or r.device == target or r.alias_of is not None or r.kind != "tensor" \
                        or r.name in names:
                    continue
                names.add(r.name)
                if r.device == "meta":
                    found.append(variable_fix(call, named_record(r)))
                    continue
                made = of_record(context, r, on_line[1] if on_line else None)
                names.update(made.covers)
                if made.fix is not None:
                    found.append(made.fix)
    if not found and names == covered.names and lines == covered.lines:
        return None
    return Cause(fix=found[0] if found else None, more=tuple(found[1:]), covers=tuple(sorted(names - covered.names)),
                 lines=tuple(lines - covered.lines))

