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
from typing import Any

from ...collect import (
    MODULE_METHODS,
    Result,
    Temporary,
    Traced,
    binds_module,
    call_stack,
    first_line,
    line_names,
    locations,
    model_output_on_line,
)
from ...model import Cause, Fix, Mismatch, Operand, device_is_accelerator
from ...runtime import tensor_getters
from .. import edit_checks, fix_builders
from ..causes import (
    WHEN_NO_FIX,
    CauseContext,
    FailedCall,
    Failure,
    NamedOperand,
    causes,
    factory_made,
    library,
    model_of,
)

__all__ = ["Failure", "diagnose"]


def diagnose(failure: Failure, op: str, operands: list, devices: list[str], exc: BaseException) -> Mismatch:
    """Name the operands (tensors, or :class:`~devinspect.collect.code.failing_call.Temporary`) of a call
    that failed with inputs on ``devices``, and choose the fix."""
    return _Diagnosis(failure, op, operands, devices, exc).build()


class _Diagnosis:
    """Names the operands of a failed op and chooses the fix from the cause rules. Runs only after an error."""

    def __init__(self, failure: Failure, op: str, operands: list, devices: list[str], exc: BaseException):
        self.failure, self.op, self.values, self.devices, self.exc = failure, op, operands, devices, exc

    def build(self) -> Mismatch:
        from ...collect import NameIndex, module_paths

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
        fix = fix_builders.importing_torch(edit_checks.with_edits_that_run(fix), binds_module(failure.namespace, "torch"))
        fix = fix_builders.with_note(fix, fix_builders.PARTIAL_STEP_NOTE) if call_stack.optimizer_step_running(failure.stack) else fix
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

    def _name(self, value: Any) -> NamedOperand:
        if type(value) is Result:
            inner = self._name(value.stand_in)
            shown = Operand(value.text, "result", value.device, "?", None,
                            f"computed from {inner.operand.name or 'its inputs'}, on its device")
            return dataclasses.replace(inner, shown=shown)
        if type(value) is Temporary:
            where = locations.source_line(value.filename, value.lineno, value.function)
            detail = f"made by {value.text} at {where.label}" + ("" if value.given else " (no device=)")
            operand = Operand(None, "temporary", value.device, "?", None, detail)
            return NamedOperand(operand, value, frame=value.frame,
                          created=Cause(where, "factory", factory=value.factory.split(".")[-1],
                                        device_given=value.given))
        if type(value) is Traced:
            where = locations.source_line(value.filename, value.lineno, value.function)
            operand = Operand(value.name, "traced", value.device, "?", None,
                              f"traced by torch.compile at {where.label}")
            return NamedOperand(operand, value, local=value.name)
        device, dtype = str(tensor_getters.device(value)), str(tensor_getters.dtype(value)).removeprefix("torch.")
        try:
            shape = tuple(int(s) for s in tensor_getters.shape(value))
        except Exception:  # a symbolic or unreadable shape
            shape = None
        created = self.failure.created(value)
        detail = factory_made.creation_detail(created)
        # The names walked first (modules, tensors, optimizers), then a local of the user's function;
        # the rest of the session (lists, dicts, objects) only for what neither names.
        found = self.index.lookup(value, rest=False)
        if found is None and not self._local_not_reached(value):
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
            return NamedOperand(Operand(record.name, self.index.source(record), device, dtype, shape, detail), value,
                          record=record, created=created)
        for frame in self.user_frames:
            local = call_stack.local_name(frame, value, self.modules)
            if local is not None:
                name, source = local
                operand = Operand(name, source, device, dtype, shape, detail or f"in {frame.f_code.co_name}")
                return NamedOperand(operand, value, frame=frame, local=name if source == "local" else None,
                              created=created)
        if created is None:
            # Made by library code: its source says how, when it is a factory call without device=.
            created = factory_made.library_factory(call_stack.frames_from(self.failure.stack), value)
            detail = factory_made.creation_detail(created)
        inside = library(self._call([], "?"))
        source = "created" if created else "unknown"
        # A model's output handed straight on (loss_fn(model(x), y)): said as the line writes it.
        written = (model_output_on_line(self.failure.namespace, self.failure.source(self.cell).text,
                                        {path for path in self.modules.values() if "." not in path and "[" not in path},
                                        MODULE_METHODS) or "") if self.cell is not None and created is None else ""
        return NamedOperand(Operand(None, source, device, dtype, shape,
                                    detail or (f"made inside {inside}" if inside else "a temporary"),
                                    written=f"the output of {written}" if written else ""), value, created=created)

    def _local_not_reached(self, value: Any) -> bool:
        """Whether ``value`` is a local of a user function and none of the session's names not walked
        yet is read by the user's frames or the failing line (so none of them was handed it)."""
        if not any(call_stack.local_name(f, value, {}) for f in self.user_frames
                   if locations.frame_locals(f) is not f.f_globals):
            return False
        read = {name for f in self.user_frames for name in f.f_code.co_names}
        if self.cell is not None:
            try:
                read |= {n.id for n in ast.walk(ast.parse(self.failure.source(self.cell).text)) if isinstance(n, ast.Name)}
            except SyntaxError:
                return False
        return not (read & self.index.rest_roots())

    # -- the one device everything should be on -------------------------------------------------
    def _call(self, named: list[NamedOperand], target: str) -> FailedCall:
        return FailedCall(self.failure, self.op, target, tuple(self.user_frames), self.inner, self.cell, self.cell_file,
                          self.failing_line, self.index, self.modules, tuple(named))

    def _target(self, named: list[NamedOperand]) -> str | None:
        real = [n.device for n in named if n.device not in ("meta", "?")]
        accelerators = list(dict.fromkeys(d for d in real if device_is_accelerator(d)))
        if len(accelerators) > 1:
            # Between accelerators (a pipeline, a dispatched model): the device of the module
            # whose forward is running, else of the model whose parameter is an operand.
            running = call_stack.running_module_device(self.failure.stack)
            if running in accelerators:
                return running
            call = self._call(named, "?")
            for n in named:
                model = model_of(call, n)
                if model is not None:
                    return fix_builders.target_device(model.devices)
        return fix_builders.target_device(real)

    # -- the fix: the table of cause rules -------------------------------------------------------
    def _fix(self, named: list[NamedOperand], target: str) -> Fix | None:
        call = self._call(named, target)
        parts = causes(call)
        if not parts:
            return WHEN_NO_FIX(CauseContext(call)).fix
        fix = fix_builders.combine(parts)
        call_line = self.failure.source(self.cell).text if self.cell is not None else ""
        note = call_stack.keyword_hook_gap(self.failure.stack,
                                           [(n.operand.name, n.local, n.value) for n in call.misplaced],
                                           self.modules, call_line)
        return fix_builders.with_note(fix, note) if note else fix
