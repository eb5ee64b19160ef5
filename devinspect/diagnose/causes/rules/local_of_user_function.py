"""A local of the user's function (``h = torch.ones(2, 4)`` in ``step``): the line that made it
gets the device; a local computed from another value is followed back to where that one was made;
one received from a caller is followed up the calls to the namespace tensor, container or caller's
line it came from. With nothing to edit, the local moves where it is used."""

from __future__ import annotations

import types
from typing import Any

from ....collect import locations
from ....model import Cause, Fix, SourceLine, device_is_accelerator
from ... import fix_builders
from .. import creation_sites, device_names, value_flow
from ..containers import comprehension_fix, passed_container
from ..context import CauseContext, FailedCall
from ..fix_writing import edit_fix
from .namespace_variable import of_record

_COMPREHENSIONS = frozenset({"<listcomp>", "<genexpr>", "<setcomp>", "<dictcomp>"})


def cause(context: CauseContext) -> Cause | None:
    if context.operand.operand.source != "local" or context.operand.frame is None:
        return None
    return local_cause(context)


def local_cause(context: CauseContext) -> Cause:
    """The cause of ``context.operand``, a local of the user frame it names."""
    call, n, target = context.call, context.operand, context.target
    frame, local = n.frame, n.local
    if frame.f_code.co_name in _COMPREHENSIONS:
        return Cause(fix=comprehension_fix(call, n))
    line = call.source(frame).line
    made_at = creation_sites.local_statement_line(local, frame, line) or line  # where the edit goes
    device_expr = device_names.device_expression(call.namespace, target, frame, avoid={local},
                                                 prefer=call.operand_locals(frame), line=made_at)
    origin = creation_sites.local_origin(local, frame, line, [local], device_expr)
    if origin is None and n.created is not None:
        origin = creation_sites.line_origin(n.created.where, _device_at(call, n.created.where, target, local, frame, device_expr),
                                            n.created.where.file == call.cell_file)
    trail = (value_flow.traced_back(local, frame, line, n.device, value_flow.device_namer(call.namespace, target))
             if origin is None else None) or value_flow.Trail(name=local)
    origin, made = (trail.origin, trail.name) if trail.origin is not None else (origin, local)  # computed: made there
    if origin is not None and origin.edit is not None:
        what = local if made == local else f"{made} (which {local} is computed from)"
        return Cause(fix=edit_fix(call, origin, f"create {what} on the device of the other inputs, in "
                                                f"{origin.edit.context or 'your code'}"))
    passed = _passed_in(context, frame, trail.parameter or local, line, n.device)
    if passed is not None:
        return passed
    edit = fix_builders.wrap_name_edit(call.source(frame), local, device_expr)
    if edit is None:
        return Cause()
    split = device_is_accelerator(n.device) and device_is_accelerator(target)  # model parallel: the move is the design
    return Cause(fix=Fix(summary=f"move {local} to the device of the other inputs where it is used", edits=(edit,),
                         note=None if split else f"{local} is computed from values on {n.device}: this copies it "
                                                 "on every call; making those values on the right device avoids the copy"))


def _device_at(call: FailedCall, where: SourceLine, target: str, local: str, frame: Any, device_expr: str) -> str:
    """How the line ``where`` (the one that made ``local``) names ``target``: ``device_expr`` when it
    is in ``frame``'s function, else by what that line's own frame can read (a caller's line
    cannot read the callee's locals)."""
    def runs(code: types.CodeType) -> bool:
        return code.co_filename == where.file and any(n == where.line for *_, n in code.co_lines())

    if runs(frame.f_code):
        return device_expr
    there = next((f for f in call.frames if runs(f.f_code)), None)
    if there is None:
        named = device_names.device_variable(call.namespace, target) if where.cell is not None else None
        return named or fix_builders.device_literal(target)
    return device_names.device_expression(call.namespace, target, there, avoid={local}, line=where.line)


def _passed_in(context: CauseContext, frame: Any, local: str, line: int, off: str) -> Cause | None:
    """A local computed from (or being) a parameter of the user's function: the value came from the
    caller. Up the user's frames (``encode(x)`` ← ``forward(x)`` ← ``model(data)`` in a loop), each call's
    argument leads to where the value was made: a namespace tensor or container (moved, its line edited)
    or a local a caller made (a loop's batch, ``data = batch[0]``: that line edited)."""
    call, target = context.call, context.target
    frames = list(call.frames)
    while frame in frames and frames.index(frame) + 1 < len(frames):
        caller = frames[frames.index(frame) + 1]
        where = call.source(caller)
        arguments = [creation_sites.call_argument(caller, where.text, frame.f_code.co_name, frame.f_code, name)
                     for name in value_flow.local_inputs(local, frame, line)]
        for record in filter(None, (call.index.record(a or "") for a in arguments)):
            if record.kind == "tensor" and record.alias_of is None and record.device != target:
                found = of_record(context, record)  # what the same call passes with it moves too
                return Cause(fix=found.fix, covers=found.covers, passed=(record.name,))
        caller_locals = locations.frame_locals(caller) if caller.f_locals is not caller.f_globals else {}
        if not caller_locals and (passed := passed_container(call, arguments, off)) is not None:
            return Cause(fix=passed)
        found = value_flow.argument_source(arguments, caller_locals, off)
        if found is None:
            return None
        made_at = creation_sites.local_statement_line(found, caller, where.line)
        if made_at is not None:  # made in the caller: that line, or nothing
            device_expr = device_names.device_expression(call.namespace, target, caller, avoid={found}, line=made_at)
            trail = value_flow.traced_back(found, caller, where.line, off, value_flow.device_namer(call.namespace, target))
            origin = trail.origin if trail is not None and trail.origin is not None and trail.origin.made_by == "factory" \
                else creation_sites.local_origin(found, caller, where.line, [found], device_expr, plain_values=True)
            if (origin is None or origin.edit is None) and trail is not None and trail.parameter is not None:
                frame, local, line = caller, trail.parameter, where.line  # computed from a parameter: one more up
                continue
            origin = origin or (trail.origin if trail is not None else None)
            if origin is None or origin.edit is None:
                return None  # made in the caller, and not to be written: no fix there
            return Cause(fix=edit_fix(call, origin, f"make {found} on {target} where {caller.f_code.co_name} "
                                                    f"{'makes' if origin.made_by == 'factory' else 'gets'} it"))
        frame, local, line = caller, found, where.line  # a parameter of the caller too: one more up
    return None
