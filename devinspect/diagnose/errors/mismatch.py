"""Naming the operands of a call that failed on mixed devices, and fixing the cause.

Shared by ``%%devcheck`` (which sees the failing call itself, on the live stack) and the
explanation after the fact (which finds it in the traceback's frames). Each operand is
named the way the user knows it (a namespace variable, a parameter, a local of their
``forward``, a tensor made right there) and, when it is on the wrong device, fixed where
its device is decided:

* made by a line of the user's code (a factory without ``device=``, a loop over a
  DataLoader, a buffer replaced in ``forward``): that line is edited; in the failed cell
  the edit is what Apply fix makes, and Re-run cell then runs the edited cell;
* made in an earlier cell and kept in the namespace: moved now (which lasts), and the
  line that made it edited so it does not come back;
* a part of a model (a module assigned after ``.to()``, a model loaded on the host, one
  off accelerate's map): that part moves, the rest of the model and a deliberate split stay;
* a list, tuple or dict of tensors: moved keeping its type; optimizer state: each to its
  own parameter's device; a model on ``meta``: storage made and initialised.

Everything here runs only after an error, reads the user's objects statically, and never
raises into the user's code: the callers catch.
"""

from __future__ import annotations

import ast
import dataclasses
import types
from dataclasses import dataclass
from typing import Any, Callable, Mapping

import torch

from ...collect.code import call_stack, line_names, locations, user_code
from ...collect.code.failing_call import Result, Temporary, Traced, first_line
from ...collect.namespace.names import binds_module, container_of, root_of
from ...collect.namespace.path_lookup import MISSING, object_at
from ...collect.objects.static_getters import type_is_one_of, type_name
from ...model.check_report import Mismatch, Operand
from ...model.fixes import EditCell, Fix
from ...model.records import SourceLine, device_is_accelerator
from ...runtime import tensor_getters
from .. import fixes
from ..causes import creation_sites, device_names, made_in_code, maker_calls, value_flow
from ..causes.dropped_moves import dropped_move_fix
from .container_fixes import MOVED_AT_MOST, ContainerFixes

_T = torch.Tensor
_Module = torch.nn.Module
_COMPREHENSIONS = frozenset({"<listcomp>", "<genexpr>", "<setcomp>", "<dictcomp>"})


@dataclass
class Failure:
    """Where a call failed: what a diagnosis may read, from a live stack (``%%devcheck``, at the
    moment of the error) or from a traceback's frames (after the fact)."""

    namespace: Mapping[str, Any]
    #: The innermost frame at the failure; its ``f_back`` chain is the rest of the stack.
    stack: types.FrameType | None
    #: Which frame is the checked cell (or block) itself.
    is_cell_frame: Callable[[types.FrameType], bool]
    #: The source line a frame is at (a traceback knows the failing line exactly).
    source: Callable[[types.FrameType], SourceLine] = locations.frame_line
    #: (line, factory, device given) of a tensor the check saw being created, else None.
    created: Callable[[Any], Any] = lambda _tensor: None
    #: The user's line of the failing call when no frame of it runs (a call torch.compile traced).
    line: SourceLine | None = None


def diagnose(failure: Failure, op: str, operands: list, devices: list[str], exc: BaseException) -> Mismatch:
    """Name the operands (tensors, or :class:`~devinspect.collect.code.failing_call.Temporary`) of a call
    that failed with inputs on ``devices``, and choose the fix."""
    return _Diagnosis(failure, op, operands, devices, exc).build()


@dataclass
class _Named:
    """An operand, named, with what its fix needs."""

    operand: Operand
    value: Any
    record: Any = None
    #: The user frame it is a local of, and the local's name.
    frame: Any = None
    local: str | None = None
    #: (line, factory, device given) where it was made, when known.
    created: Any = None
    #: What the explanation shows when the operand is a result never computed (``self.fc(x)``): the
    #: expression; its fix is still chosen from the input that stands in for it.
    shown: Operand | None = None

    @property
    def device(self) -> str:
        return self.operand.device


class _Diagnosis(ContainerFixes):
    """Names the operands of a failed op and chooses the fix. Runs only after an error."""
    def __init__(self, failure: Failure, op: str, operands: list, devices: list[str], exc: BaseException):
        self.failure, self.op, self.values, self.devices, self.exc = failure, op, operands, devices, exc
        self.whole_moves: set[str] = set()
        self.replaced_in_methods: set[str] = set()  # buffers a method makes anew: their fix is that line

    def build(self) -> Mismatch:
        from ...collect.namespace.scan import NameIndex, module_paths

        failure = self.failure
        frames = locations.user_frames(failure.stack)
        self.user_frames = frames
        self.inner = frames[0] if frames else None
        self.cell = next((f for f in frames if failure.is_cell_frame(f)), None)
        self.cell_file = self.cell.f_code.co_filename if self.cell is not None else None
        self.failing_line = failure.source(self.cell).line if self.cell is not None else 1 << 30
        self.index = NameIndex(failure.namespace)
        self.modules = module_paths(failure.namespace)
        named = [self._name(v) for v in self.values]
        self._named = named
        target = self._target(named)
        fix = self._fix(named, target) if target else None
        fix = fixes.importing_torch(fix, binds_module(failure.namespace, "torch"))
        fix = fixes.with_note(fix, fixes.PARTIAL_STEP_NOTE) if call_stack.optimizer_step_running(failure.stack) else fix
        user_frame = failure.line or (failure.source(self.inner) if self.inner is not None
                                      and self.inner is not self.cell else None)
        # The module named next to the user's line is the one whose forward that line is in, not a
        # library submodule it called; else the innermost module running says where it failed.
        running = (call_stack.running_module_path(self.modules, self.inner)
                   if user_frame is not None and failure.line is None else None)
        return Mismatch(
            op=self.op,
            error=first_line(self.exc),
            devices=tuple(self.devices),
            operands=tuple(n.shown or n.operand for n in named),
            cell_line=failure.source(self.cell) if self.cell is not None else None,
            user_frame=user_frame,
            module_path=running or call_stack.innermost_module_path(self.modules, failure.stack),
            target_device=target,
            fix=fix,
        )

    # -- naming ---------------------------------------------------------------------------

    def _name(self, value: Any) -> _Named:
        if type(value) is Result:
            inner = self._name(value.stand_in)
            shown = Operand(value.text, "result", value.device, "?", None,
                            f"computed from {inner.operand.name or 'its inputs'}, on its device")
            return dataclasses.replace(inner, shown=shown)
        if type(value) is Temporary:
            where = locations.source_line(value.filename, value.lineno, value.function)
            detail = f"made by {value.text} at {where.label}" + ("" if value.given else " (no device=)")
            operand = Operand(None, "temporary", value.device, "?", None, detail)
            return _Named(operand, value, frame=value.frame,
                          created=(where, value.factory.split(".")[-1], value.given, ""))
        if type(value) is Traced:
            where = locations.source_line(value.filename, value.lineno, value.function)
            operand = Operand(value.name, "traced", value.device, "?", None,
                              f"traced by torch.compile at {where.label}")
            return _Named(operand, value, local=value.name)
        device, dtype = str(tensor_getters.device(value)), str(tensor_getters.dtype(value)).removeprefix("torch.")
        try:
            shape = tuple(int(s) for s in tensor_getters.shape(value))
        except Exception:  # a symbolic or unreadable shape
            shape = None
        created = self.failure.created(value)
        detail = creation_sites.creation_detail(created)
        found = self.index.lookup(value)
        if found is not None and ".param_groups[" in found[0].name:
            # An optimizer's place is where the walk met it first; a name of the user's is better.
            better = next((n for n in self.index.other_names(found[0].name) if ".param_groups[" not in n), None)
            record = self.index.record(better) if better is not None else None
            found = (record, found[1]) if record is not None else found
        on_line = line_names.name_on_line(self.failure.namespace, self.failure.source(self.cell).text, value,
                                          found[0].name) if found is not None and not found[1] and self.cell else None
        if on_line is not None:
            found = (line_names.renamed(found[0], on_line), False)
        if found is not None:
            record, is_view = found
            if is_view:
                detail = "; ".join(filter(None, [f"a view of {record.name}", detail]))
            return _Named(Operand(record.name, self.index.source(record), device, dtype, shape, detail), value,
                          record=record, created=created)
        for frame in self.user_frames:
            local = call_stack.local_name(frame, value, self.modules)
            if local is not None:
                name, source = local
                operand = Operand(name, source, device, dtype, shape, detail or f"in {frame.f_code.co_name}")
                return _Named(operand, value, frame=frame, local=name if source == "local" else None,
                              created=created)
        if created is None:
            # Made by library code: its source says how, when it is a factory call without device=.
            made_there = creation_sites.library_factory(call_stack.frames_from(self.failure.stack), value)
            created = (made_there[0], made_there[1], False, made_there[2]) if made_there else None
            detail = creation_sites.creation_detail(created)
        inside = self._library()
        source = "created" if created else "unknown"
        return _Named(Operand(None, source, device, dtype, shape,
                              detail or (f"made inside {inside}" if inside else "a temporary")), value, created=created)

    # -- the one device everything should be on -------------------------------------------------
    def _target(self, named: list[_Named]) -> str | None:
        real = [n.device for n in named if n.device not in ("meta", "?")]
        accelerators = list(dict.fromkeys(d for d in real if device_is_accelerator(d)))
        if len(accelerators) > 1:
            # Between accelerators (a pipeline, a dispatched model): the device of the module
            # whose forward is running, else of the model whose parameter is an operand.
            running = call_stack.running_module_device(self.failure.stack)
            if running in accelerators:
                return running
            for n in named:
                model = self._model_of(n)
                if model is not None:
                    return fixes.target_device(model.devices)
        return fixes.target_device(real)

    def _model_of(self, n: _Named) -> Any:
        from ..findings import enclosing_module, root_module

        if n.operand.name is None or n.operand.source not in ("parameter", "buffer", "gradient", "attribute"):
            return None
        return enclosing_module(self.index.result, root_module(self.index.result_under(n.operand.name), n.operand.name))

    # -- fixes ----------------------------------------------------------------------------------
    def _fix(self, named: list[_Named], target: str) -> Fix | None:
        parts: list[Fix] = []
        seen: set[str] = set()
        misplaced = [n for n in named if n.device != target]
        self.handled = {n.operand.name for n in misplaced if n.operand.name}
        for n in misplaced:
            fix = self._operand_fix(n, target)
            if fix is not None and fix.summary not in seen:
                seen.add(fix.summary)
                parts.append(fix)
        # A model split between the host and an accelerator fails at its next part whatever moves
        # now: its parts off the target move too (a split across accelerators may be deliberate).
        for n in named:
            model = self._model_of(n)
            if model is None or model.name in self.whole_moves or model.deliberate_split:
                continue
            if not self._off_target_tensors(model, target):
                continue
            real = [d for d in model.devices if d != "meta"]
            if len(real) > 1 and any(not device_is_accelerator(d) for d in real):
                fix = self._model_parts_fix(n, target)
                if fix is not None and fix.summary not in seen:
                    seen.add(fix.summary)
                    parts.insert(0, fix)  # the model first: the larger change
        moved = {n.operand.name for n in misplaced if n.operand.source == "namespace" and n.operand.name} | {
            h[1] for h in self.handled if type(h) is tuple and h[0] == "passed"}
        if moved:
            # The other inputs of the call that passed a misplaced tensor would fail next (labels after ids).
            passed = self._passed_tensors(target, lambda call: bool(moved & line_names.call_arguments(call)))
            parts.extend(f for f in passed if f.summary not in seen and not seen.add(f.summary))
        if any(n.operand.source == "unknown" for n in misplaced):
            # Made inside library code from what the user passed in: those inputs are the cause.
            parts.extend(f for f in self._passed_tensors(target, lambda call: True) if f.summary not in seen)
        parts.extend(f for f in self._inputs_of_moved_models(target) if f.summary not in seen)
        if not parts:
            return self._default_device_fix(misplaced, target) or fixes.made_inside_library(
                self._library() or "library code", misplaced[0].device, target)
        fix = fixes.combine(parts)
        call_line = self.failure.source(self.cell).text if self.cell is not None else ""
        note = call_stack.keyword_hook_gap(self.failure.stack, [(n.operand.name, n.local, n.value) for n in misplaced],
                                            self.modules, call_line)
        return fixes.with_note(fix, note) if note else fix

    def _library(self) -> str:
        """The package the user's innermost line called into, whose code then failed (``transformers``
        for a ``generate`` that ended in ``F.conv1d``), or ``""``."""
        package = ""
        for f in call_stack.frames_from(self.failure.stack):
            if locations.is_user_code(f.f_code):
                return package
            package = package if locations.is_own_file(f.f_code.co_filename) else (
                locations.package_of(f.f_code.co_filename) or package)
        return package

    def _default_device_fix(self, misplaced: list[_Named], target: str) -> Fix | None:
        """Tensors library code makes with a factory that has no ``device=`` follow the default
        device: the user's line that calls it runs with ``target`` as the default (an edit of that
        line; the library is not the place of a fix)."""
        made = [n.created for n in misplaced]
        frame = self.inner
        if frame is None or not made or any(c is None or c[2] for c in made):
            return None
        where = self.failure.source(frame)
        in_cell = where.file == self.cell_file
        device_expr = device_names.device_expression(self.failure.namespace, target, None if in_cell else frame,
                                                     line=where.line)
        edit = creation_sites.default_device_edit(where, device_expr)
        if edit is None:
            return None
        library = self._library() or "library code"
        factories = ", ".join(sorted({f"torch.{c[1]}" for c in made}))
        fix = self._edit_fix(creation_sites.Origin(where, "factory", edit, in_cell),
                             f"run {where.label} with {target} as the default device")
        note = (f"{library} makes a tensor by {factories} without device=, so on the default device: under "
                f"`with torch.device(...)` it is made on {target}")
        return dataclasses.replace(fix, note=" ".join(filter(None, [note, fix.note])))

    def _operand_fix(self, n: _Named, target: str) -> Fix | None:
        source = n.operand.source
        dropped = self._dropped_move(n, target)
        if dropped is not None:  # x.to(dev) as a statement, its copy dropped: that line is the cause
            return dropped
        if n.device == "meta":
            fix = self._meta_fix(n, target)
            if fix is None and source == "namespace" and n.record is not None:
                fix = self._meta_variable_fix(n, target)
            return fix
        if source in ("parameter", "buffer", "gradient"):
            if source == "buffer":
                made = self._forward_buffer_fix(n, target)
                if made is not None:
                    return made
            return self._model_parts_fix(n, target)
        if source == "attribute":
            return self._attribute_fix(n, target)
        if source == "optimizer_state" and n.operand.name:
            return dataclasses.replace(fixes.optimizer_state(n.operand.name.split(".state[", 1)[0]), rerun=True)
        if source == "namespace" and n.record is not None:
            return self._namespace_fix(n, target)
        if source == "local" and n.frame is not None:
            return self._local_fix(n, target)
        if source == "traced":
            return self._traced_fix(n, target)
        if n.created is not None:
            # device=device, with device = anchors.device: the tensor it reads the device of is the cause
            read = value_flow.device_read_from(n.created[0], self.user_frames, n.device) if n.created[2] else None
            fix = self._local_fix(_Named(dataclasses.replace(n.operand, name=read[0]), None, frame=read[1], local=read[0]),
                                  target) if read else None
            return fix or self._line_fix(n.created[0], target, n.frame)
        return self._comprehension_fix(n, target)

    def _edit_fix(self, origin: creation_sites.Origin, summary: str) -> Fix:
        """A fix that is an edit of the user's line: made by Apply fix when it is in the failed cell."""
        edits = origin.edits
        in_cell = len(edits) == 1 and edits[0].where.cell is not None and edits[0].where.file == self.cell_file
        action = EditCell(edits[0]) if in_cell else None
        return Fix(summary=summary, edits=edits, action=action, rerun=in_cell,
                   note=None if in_cell else made_in_code.rerun_note(edits, self.cell_file))

    def _dropped_move(self, n: _Named, target: str) -> Fix | None:
        name = n.record.name if n.record is not None and n.operand.source == "namespace" else None
        return dropped_move_fix(self.failure.namespace, n.value, name, n.device, target, self.user_frames, self.cell,
                                lambda f: self.failure.source(f).line)

    def _namespace_fix(self, n: _Named, target: str) -> Fix | None:
        if (dropped := self._dropped_move(n, target)) is not None:
            return dropped
        record = n.record
        root = root_of(record.name)
        parent = container_of(record.name)
        container = object_at(self.failure.namespace, parent) if parent else MISSING
        if type_is_one_of(container, (list, tuple, dict)):
            return self._container_fix(*self._list_of_dicts_around(parent, container), target)
        if parent is None and creation_sites.named_fields(holder := object_at(self.failure.namespace, root)) is not None:
            return self._namedtuple_fix(root, holder, target)
        device_expr = device_names.device_expression(self.failure.namespace, target)
        wrong = creation_sites.wrong_loop_targets(root, target, self.cell_file, self.failing_line, self.failure.namespace)
        # The variable's own line is the fix only for the tensor or module that moves (not w of w.t).
        movable = record.name == root or self._movable(root)
        origin = made_in_code.namespace_origin(root, self.cell, self.failing_line, wrong, device_expr,
                                               self.failure.namespace, target) if movable else None
        first = self.index.lookup(n.value) if origin is None and issubclass(type(n.value), _T) else None
        if first is not None and not first[1] and first[0].name == first[0].root != root:
            # Named as the failing line reaches it (batch["ids"]), made as a variable of its own (ids = …).
            made = made_in_code.namespace_origin(first[0].root, self.cell, self.failing_line, [], device_expr,
                                                 self.failure.namespace, target)
            origin = made if made is not None and not made.in_failed_cell else None
        if origin is not None and origin.in_failed_cell and origin.edit is not None:
            what = "the loop's batches" if origin.kind == "loop" else root
            return self._edit_fix(origin, f"make {what} on {target} where this cell makes {'them' if origin.kind == 'loop' else 'it'}")
        under = self.index.result_under(record.name)
        # A cache or any object of a library's that holds several: all of them, not one per run.
        held = [] if movable else [r.name for r in self._plain_tensors_under(root) if r.device == record.device]
        if not movable and origin is None:  # an object's tensors: made again where its class makes them
            origin = made_in_code.attributes_origin(object_at(self.failure.namespace, root), root,
                                                    held or [record.name], self.failure.namespace, target)
        if 1 < len(held) <= MOVED_AT_MOST and (several := fixes.move_tensors(root, held, target)) is not None:
            note = f"With the edits, {root}'s class makes them on {target} from now on." if origin else None
            return dataclasses.replace(several, edits=origin.edits if origin else (),
                                       note=" ".join(filter(None, [several.note, note])) or None)
        grads = {r.param for r in under.records if r.kind == "gradient"}
        moved = fixes.move_tensor(record.name, target, source=record.device, requires_grad=record.requires_grad,
                                  is_leaf=record.is_leaf, is_parameter=record.kind == "parameter",
                                  has_grad=record.name in grads, swap_flag=bool(under.options.get("swap_flag")))
        # The other tensors the same line made (inputs, labels = sample()) fail next: they move too.
        together = [self.index.record(x) for x in (origin.together if origin else ()) if x != record.name]
        moved = fixes.combine([moved, *(fixes.move_tensor(r.name, target, source=r.device) for r in together
                                        if r is not None and r.kind == "tensor" and r.device != target
                                        and r.alias_of is None and not self.handled.add(r.name))])
        edits = origin.edits if origin is not None else ()
        note = f"With the edit, {origin.where.where} makes it on {target} from now on." if edits else None
        return dataclasses.replace(moved, edits=edits, rerun=moved.action is not None,
                                   note=" ".join(filter(None, [moved.note, note])) or None)

    def _local_fix(self, n: _Named, target: str) -> Fix | None:
        frame, local = n.frame, n.local
        if frame.f_code.co_name in _COMPREHENSIONS:
            return self._comprehension_fix(n, target)
        line = self.failure.source(frame).line
        operands = tuple(o.local for o in self._named if o.local and o.frame is frame and o.device == target)
        made_at = creation_sites.local_statement_line(local, frame, line) or line  # where the edit goes
        device_expr = device_names.device_expression(self.failure.namespace, target, frame, avoid={local},
                                                     prefer=operands, line=made_at)
        origin = creation_sites.local_origin(local, frame, line, [local], device_expr)
        if origin is None and n.created is not None:
            origin = creation_sites.line_origin(n.created[0], self._device_at(n.created[0], target, local, frame, device_expr),
                                         n.created[0].file == self.cell_file)
        trail = (value_flow.traced_back(local, frame, line, n.device, value_flow.device_namer(self.failure.namespace, target))
                 if origin is None else None) or value_flow.Trail(name=local)
        origin, made = (trail.origin, trail.name) if trail.origin is not None else (origin, local)  # computed: made there
        if origin is not None and origin.edit is not None:
            what = local if made == local else f"{made} (which {local} is computed from)"
            return self._edit_fix(origin, f"create {what} on the device of the other inputs, in "
                                          f"{origin.edit.context or 'your code'}")
        passed = self._passed_in(frame, trail.parameter or local, line, target, n.device)
        if passed is not None:
            return passed
        edit = fixes.wrap_name_edit(self.failure.source(frame), local, device_expr)
        if edit is None:
            return None
        split = device_is_accelerator(n.device) and device_is_accelerator(target)  # model parallel: the move is the design
        return Fix(summary=f"move {local} to the device of the other inputs where it is used", edits=(edit,),
                   note=None if split else f"{local} is computed from values on {n.device}: this copies it on every "
                                           "call; making those values on the right device avoids the copy")

    def _device_at(self, where: SourceLine, target: str, local: str, frame: Any, device_expr: str) -> str:
        """How the line ``where`` (the one that made ``local``) names ``target``: ``device_expr`` when it
        is in ``frame``'s function, else by what that line's own frame can read (a caller's line
        cannot read the callee's locals)."""
        def runs(code: types.CodeType) -> bool:
            return code.co_filename == where.file and any(n == where.line for *_, n in code.co_lines())

        if runs(frame.f_code):
            return device_expr
        there = next((f for f in self.user_frames if runs(f.f_code)), None)
        if there is None:
            named = device_names.device_variable(self.failure.namespace, target) if where.cell is not None else None
            return named or fixes.device_literal(target)
        return device_names.device_expression(self.failure.namespace, target, there, avoid={local}, line=where.line)

    def _passed_in(self, frame: Any, local: str, line: int, target: str, off: str) -> Fix | None:
        """A local computed from (or being) a parameter of the user's function: the value came from the
        caller. Up the user's frames (``encode(x)`` ← ``forward(x)`` ← ``model(data)`` in a loop), each call's
        argument leads to where the value was made: a namespace tensor or container (moved, its line edited)
        or a local a caller made (a loop's batch, ``data = batch[0]``: that line edited)."""
        frames = self.user_frames
        while frame in frames and frames.index(frame) + 1 < len(frames):
            caller = frames[frames.index(frame) + 1]
            where = self.failure.source(caller)
            arguments = [creation_sites.call_argument(caller, where.text, frame.f_code.co_name, frame.f_code, name)
                         for name in value_flow.local_inputs(local, frame, line)]
            for record in filter(None, (self.index.record(a or "") for a in arguments)):
                if record.kind == "tensor" and record.alias_of is None and record.device != target:
                    self.handled.add(("passed", record.name))  # what the same call passes with it moves too
                    return self._namespace_fix(_Named(Operand(record.name, "namespace", record.device, "?", None),
                                                      None, record=record), target)
            caller_locals = locations.frame_locals(caller) if caller.f_locals is not caller.f_globals else {}
            if not caller_locals and (passed := self._passed_container(arguments, off, target)) is not None:
                return passed
            found = value_flow.argument_source(arguments, caller_locals, off)
            if found is None:
                return None
            made_at = creation_sites.local_statement_line(found, caller, where.line)
            if made_at is not None:  # made in the caller: that line, or nothing
                device_expr = device_names.device_expression(self.failure.namespace, target, caller, avoid={found},
                                                             line=made_at)
                trail = value_flow.traced_back(found, caller, where.line, off, value_flow.device_namer(self.failure.namespace, target))
                origin = trail.origin if trail is not None and trail.origin is not None and trail.origin.kind == "factory" \
                    else creation_sites.local_origin(found, caller, where.line, [found], device_expr, plain_values=True)
                if (origin is None or origin.edit is None) and trail is not None and trail.parameter is not None:
                    frame, local, line = caller, trail.parameter, where.line  # computed from a parameter: one more up
                    continue
                origin = origin or (trail.origin if trail is not None else None)
                return self._edit_fix(origin, f"make {found} on {target} where {caller.f_code.co_name} "
                                              f"{'makes' if origin.kind == 'factory' else 'gets'} it") \
                    if origin is not None and origin.edit is not None else None
            frame, local, line = caller, found, where.line  # a parameter of the caller too: one more up
        return None

    def _traced_fix(self, n: _Named, target: str) -> Fix | None:
        """A local of a function torch.compile traced: the line that made it, read from the source."""
        traced = n.value
        if not traced.name.isidentifier():
            return None
        anchor = next((o.local for o in self._named if o.operand.source == "traced" and o.device == target
                       and o.local and o.local.isidentifier()), None)
        device_expr = f"{anchor}.device" if anchor else device_names.device_expression(self.failure.namespace, target)
        origin = creation_sites.local_origin_at(traced.filename, traced.function, traced.lineno, traced.name, device_expr)
        if origin is None or origin.edit is None:
            return None
        return self._edit_fix(origin, f"create {traced.name} on the device of the other inputs, in "
                                      f"{origin.edit.context or 'your code'}")

    def _line_fix(self, where: SourceLine, target: str, frame: Any) -> Fix | None:
        in_cell = where.file == self.cell_file
        operands = tuple(o.local for o in self._named if o.local and o.frame is frame and o.device == target)
        here = frame is not None and where.file == frame.f_code.co_filename
        # A file's line sees its module's names, not the notebook's: no device variable of the namespace.
        namespace = self.failure.namespace if where.cell is not None else {}
        device_expr = device_names.device_expression(namespace, target, None if in_cell else frame,
                                                     prefer=operands, line=where.line if here else None)
        origin = creation_sites.line_origin(where, device_expr, in_cell)
        if origin is None:
            return None
        return self._edit_fix(origin, f"make the tensor of {where.label} on {target}")

    def _attribute_fix(self, n: _Named, target: str) -> Fix | None:
        name = n.operand.name or ""
        for module in self.index.holders.modules:
            for u in module.unregistered:
                if name == u.name:
                    return dataclasses.replace(fixes.register_buffers(u, module.unregistered, target), rerun=True)
                if name.startswith((u.name + "[", u.name + ".")):
                    container = object_at(self.failure.namespace, u.name)
                    kind = type_name(type(container)) if type_is_one_of(container, (list, tuple, dict)) else "list"
                    return dataclasses.replace(fixes.move_container(u.name, target, kind, attribute_of=u), rerun=True)
        return None

    def _forward_buffer_fix(self, n: _Named, target: str) -> Fix | None:
        """A buffer that a method other than ``__init__`` replaces (``self.scale = torch.ones(8)`` in
        ``forward``): it gets its device there on every call, so that line is the fix."""
        name, owner = n.operand.name or "", n.record.owner if n.record is not None else None
        if owner is None:
            return None
        module = object_at(self.failure.namespace, owner) if owner else MISSING
        if module is MISSING:
            return None
        attr = name.rsplit(".", 1)[-1]
        statements = creation_sites.assignments_in_methods(type(module), attr)
        if not statements:
            return None
        statement = statements[0]
        frame = next((f for f in self.user_frames if f.f_code.co_filename == statement.filename
                      and f.f_code.co_name == statement.function), None)
        operands = tuple(o.local for o in self._named if o.local and o.frame is frame and o.device == target)
        device_expr = device_names.device_expression(self.failure.namespace, target, frame, prefer=operands,
                                                     line=statement.line)
        edit = maker_calls.replacing_edit(statement, frame, device_expr)
        if edit is None:
            return None
        where = locations.source_line(statement.filename, statement.line, statement.function)
        fix = self._edit_fix(creation_sites.Origin(where, "factory", edit),
                             f"make {attr} on {target} where {statement.function} replaces it")
        self.replaced_in_methods.add(name)
        note = (f"{statement.function} replaces the buffer {name} with a new tensor on every call, so "
                f"moving it would not last")
        return dataclasses.replace(fix, note="; ".join(filter(None, [note, fix.note])))

    def _off_target_tensors(self, model: Any, target: str) -> list[str]:
        """The parameters and buffers of ``model`` off ``target``, less those a method replaces."""
        prefixes = (model.name + ".", model.name + "[")
        return [r.name for r in self.index.result_under(model.name).records
                if r.kind in ("parameter", "buffer") and r.name.startswith(prefixes) and r.device not in (target, "meta")
                and r.name not in self.replaced_in_methods]

    def _model_parts_fix(self, n: _Named, target: str) -> Fix | None:
        model = self._model_of(n)
        if model is None:
            return None
        if model.deliberate_split and model.off_map:
            # Not a whole move: its inputs stay where its first part is (the hooks move them).
            return dataclasses.replace(fixes.redispatch(model.name, model.off_map, offloaded=model.offloaded > 0),
                                       rerun=True)
        parts = fixes.parts_off(model, target)
        # Modules it keeps in a plain list or dict attribute are not registered: its .to() leaves them.
        held = made_in_code.held_modules(self.index.result.modules, model, target)
        if held:
            parts = list(dict.fromkeys([*(parts or ([model.name] if model.parameters or model.buffers else [])),
                                        *(m.name for m in held)]))
        if not model.deliberate_split:
            self.whole_moves.add(model.name)  # wholly on the target once this is done
        fix = self._move(model, target, parts)
        # The line that made the part (model.head = nn.Linear(...)) or the model gets .to(): it does
        # not come back when those cells run again.
        edits = [origin.edit for origin in (self._module_origin(p, target) for p in (parts or [model.name]))
                 if origin is not None and origin.edit is not None and not held]
        edits += made_in_code.held_module_edits(object_at(self.failure.namespace, model.name), model.name, held,
                                                self.failure.namespace, target)
        if held and edits and self._made_in_failed_cell(model.name):
            # The cell makes the model again before it fails: only its class's edited lines help.
            return Fix(summary=f"make {', '.join(m.name for m in held)} on {target} where {model.name}'s class "
                               "makes them", edits=tuple(dict.fromkeys(edits)),
                       note=made_in_code.rerun_note(tuple(edits), self.cell_file))
        return dataclasses.replace(fix, edits=tuple(dict.fromkeys(edits)), rerun=True)

    def _made_in_failed_cell(self, name: str) -> bool:
        """Whether the failed cell binds ``name`` before its failing line (running it again makes it anew)."""
        current = user_code.current_cell(self.cell_file) if self.cell_file else None
        statement = user_code.assignment_in_session(name, current, self.failing_line) if current else None
        return statement is not None and statement.cell == current.number

    def _module_origin(self, path: str, target: str) -> creation_sites.Origin | None:
        device_expr = device_names.device_expression(self.failure.namespace, target)
        for name in (path, root_of(path)):
            if not self._movable(name):
                continue  # models[2]'s list: .to() on the line that made the list would raise
            made = type_name(type(object_at(self.failure.namespace, name)))
            origin = creation_sites.namespace_origin(name, self.cell, self.failing_line, [], device_expr, wrap=True, made=made)
            if origin is not None:
                return origin
        return None

    def _move(self, model: Any, target: str, parts: list[str] | None = None) -> Fix:
        """Move a model (or its ``parts``). Where the move swaps tensors (a Python device backend,
        DTensor, the swap flag), the failed call's frames still hold some of its parameters:
        they become the traceback, which the fix releases first, with any graph that saved them."""
        from ..findings import graph_holder_names, move_fix, optimizers_with_state_under

        holders = self.index.holders
        swap_flag = bool(holders.options.get("swap_flag"))
        names = parts or [model.name]
        optimizers = tuple(dict.fromkeys(o for p in names for o in optimizers_with_state_under(holders, p)))
        part_of = model.name if parts else None
        swapped = [r for r in holders.records if r.kind == "parameter"
                   and r.name.startswith(tuple(f"{n}{sep}" for n in names for sep in ".["))]
        # Buffers are reassigned, never swapped: a module with no parameters is never refused
        # (one with any is: every parameter is swapped, those already on the target too).
        if not swapped or all(fixes.moves_in_place(d, target, swap_flag) for d in model.devices if d != target):
            if parts is None:
                return move_fix(holders, model, target)
            return fixes.move_module(names, target, optimizers=optimizers, part_of=part_of)
        return fixes.move_module(names, target, release=graph_holder_names(holders), release_traceback=True,
                                 optimizers=optimizers, part_of=part_of)

    def _meta_fix(self, n: _Named, target: str) -> Fix | None:
        from ..findings import graph_holder_names, unsaved_meta_buffers

        model = self._model_of(n)
        if model is None:
            return None
        whole = all(d == "meta" for d in model.devices)
        if whole:
            self.whole_moves.add(model.name)
        fix = fixes.materialise(model.name, target if whole else None, max(1, model.unmaterialised),
                                initialiser=model.initialiser,
                                release=graph_holder_names(self.index.holders), release_traceback=True,
                                unsaved=unsaved_meta_buffers(self.index.result_under(model.name), model.name),
                                real_device=target)
        return dataclasses.replace(fix, rerun=fix.code is not None)

    def _meta_variable_fix(self, n: _Named, target: str) -> Fix:
        """A variable on the meta device holds no data to move: it is made again on ``target``,
        by an edit of the line that makes it when that line is known."""
        root = root_of(n.record.name)
        device_expr = device_names.device_expression(self.failure.namespace, target)
        origin = creation_sites.namespace_origin(root, self.cell, self.failing_line, [], device_expr)
        if origin is not None and origin.edit is not None:
            return self._edit_fix(origin, f"make {root} on {target} where it is made (on meta it holds no data to move)")
        return Fix(summary=f"make {root} again on {target}",
                   note=f"{root} is on the meta device and holds no data to move: create it on {target}")

    def _inputs_of_moved_models(self, target: str) -> list[Fix]:
        """Tensors passed on the user's lines to a model that the fix leaves wholly on ``target``:
        they would fail next, at its first layer."""
        if not self.whole_moves:
            return []
        return self._passed_tensors(target, lambda call: root_of(ast.unparse(call.func)) in self.whole_moves)

    def _passed_tensors(self, target: str, wanted: Callable[[ast.Call], bool]) -> list[Fix]:
        """Fixes of the namespace tensors off ``target`` that the user's lines pass to the calls
        ``wanted`` picks, each fixed where it is made (as an operand would be)."""
        out = []
        for frame in {id(f): f for f in (self.inner, self.cell) if f is not None}.values():
            try:
                tree = ast.parse(self.failure.source(frame).text)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call) or not wanted(node):
                    continue
                for arg in [line_names.converted_from(a.value if isinstance(a, ast.Starred) else a) for a in node.args] \
                        + [line_names.converted_from(k.value) for k in node.keywords]:
                    if creation_sites.factory_calls(arg) and ("line", id(frame)) not in self.handled:
                        # A tensor made right in the call (model(torch.ones(2, 4))): that line is the fix.
                        self.handled.add(("line", id(frame)))
                        fix = self._line_fix(self.failure.source(frame), target, frame)
                        if fix is not None:
                            out.append(fix)
                        continue
                    on_line = line_names.record_on_line(self.failure.namespace, self.index, arg)
                    r = self.index.record(ast.unparse(arg)) or (on_line[0] if on_line else None)
                    if r is None and isinstance(arg, (ast.Name, ast.Attribute, ast.Subscript)):
                        # model(**batch), model(*inputs): the tensors the container holds are passed.
                        r = next((u for u in self._plain_tensors_under(ast.unparse(arg)) if u.device != target
                                  and u.name not in self.handled), None)
                    if r is None or r.device == target or r.alias_of is not None or r.kind != "tensor" \
                            or r.name in self.handled:
                        continue
                    self.handled.add(r.name)
                    named = _Named(Operand(r.name, "namespace", r.device, r.dtype or "?", None),
                                   on_line[1] if on_line else None, record=r)
                    fix = self._meta_variable_fix(named, target) if r.device == "meta" else \
                        self._namespace_fix(named, target)
                    if fix is not None:
                        out.append(fix)
        return out

