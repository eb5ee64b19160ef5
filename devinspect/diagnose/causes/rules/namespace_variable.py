"""A tensor the namespace holds (made in this cell or an earlier one): moved now, which lasts,
and the line that made it edited so it does not come back; made again on the target where the
failed cell itself makes it. In a list, tuple, dict or namedtuple, the container moves."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ....collect import MISSING, container_of, object_at, root_of, type_is_one_of
from ....model import Cause, Operand
from ... import fix_builders
from .. import creation_sites, device_names, made_in_code
from ..containers import MOVED_AT_MOST, container_fix, list_of_dicts_around, namedtuple_fix
from ..context import CauseContext, NamedOperand
from ..fix_writing import edit_fix, movable, plain_tensors_under
from . import dropped_move

_T = torch.Tensor


def cause(context: CauseContext) -> Cause | None:
    if context.operand.operand.source != "namespace" or context.operand.record is None:
        return None
    return variable_cause(context)


def variable_cause(context: CauseContext) -> Cause:
    """The cause of the namespace tensor ``context.operand`` (its ``record`` is known)."""
    if (dropped := dropped_move.cause(context)) is not None:
        return dropped
    call, n, target = context.call, context.operand, context.target
    namespace = call.namespace
    record = n.record
    root = root_of(record.name)
    parent = container_of(record.name)
    container = object_at(namespace, parent) if parent else MISSING
    if type_is_one_of(container, (list, tuple, dict)):
        return Cause(fix=container_fix(call, *list_of_dicts_around(call, parent, container)))
    if parent is None and creation_sites.named_fields(holder := object_at(namespace, root)) is not None:
        return Cause(fix=namedtuple_fix(call, root, holder))
    device_expr = device_names.device_expression(namespace, target)
    wrong = creation_sites.wrong_loop_targets(root, target, call.cell_file, call.failing_line, namespace)
    # The variable's own line is the fix only for the tensor or module that moves (not w of w.t).
    is_movable = record.name == root or movable(call, root)
    origin = made_in_code.made_in_session(root, call.cell, call.failing_line, wrong, device_expr,
                                           namespace, target) if is_movable else None
    first = call.index.lookup(n.value) if origin is None and issubclass(type(n.value), _T) else None
    if first is not None and not first[1] and first[0].name == first[0].root != root:
        # Named as the failing line reaches it (batch["ids"]), made as a variable of its own (ids = …).
        made = made_in_code.made_in_session(first[0].root, call.cell, call.failing_line, [], device_expr,
                                             namespace, target)
        origin = made if made is not None and not made.in_failed_cell else None
    if origin is not None and origin.in_failed_cell and origin.edit is not None:
        what = "the loop's batches" if origin.made_by == "loop" else root
        return Cause(fix=edit_fix(call, origin, f"make {what} on {target} where this cell makes "
                                                f"{'them' if origin.made_by == 'loop' else 'it'}"))
    under = call.index.result_under(record.name)
    # A cache or any object of a library's that holds several: all of them, not one per run.
    held = [] if is_movable else [r.name for r in plain_tensors_under(call, root) if r.device == record.device]
    if not is_movable and origin is None:  # an object's tensors: made again where its class makes them
        origin = made_in_code.attributes_origin(object_at(namespace, root), root, held or [record.name],
                                                namespace, target)
    if 1 < len(held) <= MOVED_AT_MOST and (several := fix_builders.move_tensors(root, held, target)) is not None:
        note = f"With the edits, {root}'s class makes them on {target} from now on." if origin else None
        return Cause(fix=dataclasses.replace(several, edits=origin.edits if origin else (),
                                             note=" ".join(filter(None, [several.note, note])) or None))
    grads = {r.param for r in under.records if r.kind == "gradient"}
    moved = fix_builders.move_tensor(record.name, target, source=record.device, requires_grad=record.requires_grad,
                              is_leaf=record.is_leaf, is_parameter=record.kind == "parameter",
                              has_grad=record.name in grads, swap_flag=bool(under.options.get("swap_flag")))
    # The other tensors the same line made (inputs, labels = sample()) fail next: they move too.
    together = [r for r in (call.index.record(x) for x in (origin.together if origin else ()) if x != record.name)
                if r is not None and r.kind == "tensor" and r.device != target and r.alias_of is None]
    moved = fix_builders.combine([moved, *(fix_builders.move_tensor(r.name, target, source=r.device) for r in together)])
    edits = origin.edits if origin is not None else ()
    note = f"With the edit, {origin.where.where} makes it on {target} from now on." if edits else None
    return Cause(fix=dataclasses.replace(moved, edits=edits, rerun=moved.action is not None,
                                         note=" ".join(filter(None, [moved.note, note])) or None),
                 covers=tuple(r.name for r in together))


def named_record(record: Any, value: Any = None) -> NamedOperand:
    """A namespace tensor's record (and its ``value`` when known) as an operand to explain."""
    return NamedOperand(Operand(record.name, "namespace", record.device, record.dtype or "?", None), value,
                        record=record)


def of_record(context: CauseContext, record: Any, value: Any = None) -> Cause:
    """The cause of a namespace tensor that a rule found the operand's value comes from, or that a
    call passes with it."""
    return variable_cause(context.about(named_record(record, value)))
