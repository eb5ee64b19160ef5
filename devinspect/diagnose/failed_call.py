"""Naming the operands of a call that failed on mixed devices, and choosing the fix.

Shared by ``%%devcheck`` (which sees the failing call itself, on the live stack) and
the explanation after the fact (which finds it in the traceback's frames). Everything
here runs only after an error, reads the user's objects statically, and never raises
into the user's code: the callers catch.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping

import torch

from ..collect import locations
from ..collect import tensorbase as tb
from ..model.check_report import Mismatch, Operand
from ..model.fixes import Fix, Move
from ..model.records import SourceLine, device_is_accelerator
from . import fixes

_T = torch.Tensor


def tensor_inputs(args: tuple, kwargs: dict) -> Iterator[Any]:
    for value in (*args, *kwargs.values()):
        if isinstance(value, _T):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, _T):
                    yield item


def first_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    try:
        text = BaseException.__str__(exc).strip().splitlines()
    except Exception:
        text = []
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def op_name(func: Any) -> str:
    name = getattr(func, "__name__", repr(func))
    qual = getattr(func, "__qualname__", name)
    module = getattr(func, "__module__", "") or ""
    if qual.startswith(("TensorBase.", "Tensor.", "_TensorBase.")):
        return f"Tensor.{name}"
    if module.startswith("torch.nn.functional") or module == "torch._C._nn":
        return f"F.{name}"
    if qual.startswith("_VariableFunctionsClass.") or module == "torch":
        return f"torch.{name}"
    return f"{module}.{name}" if module else name


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


def diagnose(failure: Failure, op: str, tensors: list, devices: list[str], exc: BaseException) -> Mismatch:
    """Name the operands of a call that failed with inputs on ``devices`` and choose the fix."""
    return _Diagnosis(failure, op, tensors, devices, exc).build()


class _Diagnosis:
    """Names the operands of a failed op and chooses the fix. Runs only after an error."""

    def __init__(self, failure: Failure, op: str, tensors: list, devices: list[str], exc: BaseException):
        self.failure, self.op, self.tensors, self.devices, self.exc = failure, op, tensors, devices, exc

    def build(self) -> Mismatch:
        from ..collect.scan import NameIndex, module_paths

        failure = self.failure
        frames = locations.user_frames(failure.stack)
        inner = frames[0] if frames else None
        cell = next((f for f in frames if failure.is_cell_frame(f)), None)
        self.index = NameIndex(failure.namespace)
        modules = module_paths(failure.namespace)
        module_path = _innermost_module_path(modules, failure.stack)
        operands = [self._operand(t, inner, modules) for t in self.tensors]
        self.created = {id(o): failure.created(t) for o, t in zip(operands, self.tensors)}
        target = self._target_device(operands)
        fix = self._fix(operands, target, inner) if target else None
        return Mismatch(
            op=self.op,
            error=first_line(self.exc),
            devices=tuple(self.devices),
            operands=tuple(operands),
            cell_line=failure.source(cell) if cell is not None else None,
            user_frame=failure.source(inner) if inner is not None and inner is not cell else None,
            module_path=module_path,
            target_device=target,
            fix=fix,
        )

    def _operand(self, t: Any, frame: Any, modules: dict[int, str]) -> Operand:
        device, dtype = str(tb.device(t)), str(tb.dtype(t)).removeprefix("torch.")
        shape = tuple(int(s) for s in tb.shape(t))
        created = self.failure.created(t)
        detail = ""
        if created is not None:
            where, factory, given = created
            detail = f"created at {where.label} by torch.{factory}" + ("" if given else " without device=")
        found = self.index.lookup(t)
        if found is not None:
            record, is_view = found
            if is_view:
                detail = "; ".join(filter(None, [f"a view of {record.name}", detail]))
            return Operand(record.name, self.index.source(record), device, dtype, shape, detail)
        if frame is not None:
            local = _local_name(frame, t, modules)
            if local is not None:
                name, source = local
                return Operand(name, source, device, dtype, shape, detail or f"in {frame.f_code.co_name}")
        inside = next((locations.package_of(f.f_code.co_filename) for f in _frames(self.failure.stack)
                       if not locations.is_user_code(f.f_code) and not locations.is_own_file(f.f_code.co_filename)), "")
        return Operand(None, "created" if created else "unknown", device, dtype, shape,
                       detail or (f"made inside {inside}" if inside else "a temporary"))

    def _target_device(self, operands: list[Operand]) -> str | None:
        # One rule with %devices: an accelerator wins over the CPU; between accelerators,
        # the device of the model whose parameter is an operand (most of its bytes).
        devices = [o.device for o in operands]
        accelerators = {d for d in devices if device_is_accelerator(d)}
        if len(accelerators) > 1:
            for o in operands:
                module = self._module_of(o)
                if module is not None:
                    return fixes.target_device(module.devices)
        return fixes.target_device(devices)

    def _module_of(self, o: Operand) -> Any:
        from .findings import root_module

        if o.name is None or o.source not in ("parameter", "buffer", "gradient", "attribute"):
            return None
        return root_module(self.index.result, o.name)

    def _fix(self, operands: list[Operand], target: str, frame: Any) -> Fix | None:
        result = self.index.result
        parts: list[Fix] = []
        moved_modules: set[str] = set()
        misplaced = [o for o in operands if o.device != target]
        derived: list[Fix] = []

        def move_model(module: Any) -> None:
            if module.name not in moved_modules:
                moved_modules.add(module.name)
                parts.append(self._move_module(result, module, target))

        for o in misplaced:
            module = self._module_of(o)
            if module is not None and o.source in ("parameter", "buffer", "gradient"):
                move_model(module)  # a model in the wrong place moves whole, to the one target
                continue
            fix = self._operand_fix(o, target, frame, operands, module)
            if fix is not None:
                if o.source == "local" and fix.edits and self.created.get(id(o)) is None:
                    derived.append(fix)  # a local computed from the inputs, not made on the wrong device
                parts.append(fix)
            elif o.source in ("created", "unknown", "local"):
                # A temporary made inside library code: a split model it met explains it.
                for other in operands:
                    split = self._module_of(other)
                    if split is not None and len([d for d in split.devices if d != "meta"]) > 1:
                        move_model(split)
        # A model split between the host and an accelerator fails at its next part whatever
        # moves now: it moves whole, as %devices says (a split across accelerators may be
        # deliberate model parallelism, and moves only when its own part is misplaced).
        for o in operands:
            split = self._module_of(o)
            if split is not None and split.name not in moved_modules and not split.deliberate_split:
                real = [d for d in split.devices if d != "meta"]
                if len(real) > 1 and any(not device_is_accelerator(d) for d in real):
                    move_model(split)
                    parts.insert(0, parts.pop())  # the model first: the larger change
        # Inputs named on the user's line that are elsewhere move too: the next one would fail
        # next, and after a split model moves they would fail at its first layer.
        named = {p.action.name for p in parts if isinstance(p.action, Move)}
        inputs = [f for f in self._user_inputs([frame, self._cell_or(frame)], target)
                  if not (isinstance(f.action, Move) and f.action.name in named)]
        if inputs and derived:
            # A local computed from inputs that sit on the wrong device moves with them: moving
            # the inputs is the fix (an edit is for a tensor the function makes on the wrong device).
            parts = [p for p in parts if not any(p is d for d in derived)]
        parts.extend(inputs)
        if not parts:
            names = ", ".join(o.name or o.detail for o in misplaced)
            return Fix(summary=f"put {names} on {target}",
                       note=f"{names} is made inside library code from your inputs: move the inputs you pass in "
                            f"to {target}")
        return fixes.combine(parts)

    def _cell_or(self, frame: Any) -> Any:
        """The checked cell's frame (the user's own line that called everything), else ``frame``."""
        return next((f for f in locations.user_frames(self.failure.stack) if self.failure.is_cell_frame(f)), frame)

    def _move_module(self, result: Any, module: Any, target: str) -> Fix:
        from .findings import move_fix

        swap_flag = bool(result.options.get("swap_flag"))
        if module.held_parameters and any(not fixes.moves_in_place(d, target, swap_flag) for d in module.devices):
            # The failing call's frames hold the graph that saved them; they become the traceback.
            names = tuple(r.name for r in result.records if r.kind == "tensor" and r.requires_grad and not r.is_leaf
                          and fixes.assignment(r.name, f"{r.name}.detach()"))
            return fixes.move_module(module.name, target, release=names, release_traceback=True,
                                     optimizers=_optimizers_of(result, module.name))
        return move_fix(result, module, target)

    def _operand_fix(self, o: Operand, target: str, frame: Any, operands: list[Operand], module: Any) -> Fix | None:
        result = self.index.result
        record = next((r for r in result.records if r.name == o.name), None) if o.name else None
        if o.source == "namespace" and record is not None:
            grads = {r.param for r in result.records if r.kind == "gradient"}
            return fixes.move_tensor(record.name, target, source=record.device, requires_grad=record.requires_grad,
                                     is_leaf=record.is_leaf, is_parameter=record.type_name == "Parameter",
                                     has_grad=record.name in grads, swap_flag=bool(result.options.get("swap_flag")))
        if o.source == "optimizer_state" and o.name:
            return fixes.optimizer_state(o.name.split(".state[", 1)[0])
        if o.source == "attribute" and module is not None:
            u = next((u for m in result.modules for u in m.unregistered if o.name and (
                o.name == u.name or o.name.startswith(u.name + "[") or o.name.startswith(u.name + "."))), None)
            if u is not None:
                return fixes.register_buffer(u, target)
        if o.source == "local" and o.name and frame is not None and locations.is_user_code(frame.f_code):
            return self._local_fix(o, target, frame, operands)
        return None

    def _local_fix(self, o: Operand, target: str, frame: Any, operands: list[Operand]) -> Fix | None:
        """A local of the user's own function: edit their line (never rebind a variable from outside)."""
        local = o.name.split(".")[0] if o.name else ""
        anchor = next((x.name for x in operands if x.device == target and x.source == "local" and x.name
                       and fixes.is_identifier(x.name)), None)
        if anchor is None:
            anchor = next((k for k, v in frame.f_locals.items()
                           if k != "self" and isinstance(v, _T) and str(tb.device(v)) == target), None)
        device_expr = f"{anchor}.device" if anchor else fixes.device_literal(target)
        edit = None
        created = self.created.get(id(o))
        if created is not None and not created[2]:
            line, factory, _given = created
            edit = fixes.factory_device_edit(line, factory, device_expr)
        if edit is None:
            edit = fixes.wrap_name_edit(self.failure.source(frame), local, device_expr)
        if edit is None:
            return None
        return Fix(summary=f"create {local} on the device of the other inputs, in {edit.context or 'your code'}",
                   edits=(edit,))

    def _user_inputs(self, frames: list[Any], target: str) -> list[Fix]:
        """Namespace tensors named on the user's lines (the innermost one and the cell's) that are
        not on ``target``: an input passed into code that failed further in."""
        import ast

        wanted: set[str] = set()  # the expressions on those lines, compared by their parsed form
        for frame in {id(f): f for f in frames if f is not None}.values():
            try:
                tree = ast.parse(self.failure.source(frame).text)
            except SyntaxError:
                continue
            moved = set()  # expressions the line itself moves (batch["ids"].to(device)) need no fix
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in ("to", "cuda", "xpu", "mps")):
                    moved.add(ast.dump(node.func.value, annotate_fields=False, include_attributes=False))
            bases = {id(n.value) for n in ast.walk(tree) if isinstance(n, (ast.Attribute, ast.Subscript))}
            for node in ast.walk(tree):
                # An expression used whole (x, batch["ids"], model(**batch)), not only as the base of one.
                if isinstance(node, (ast.Name, ast.Attribute, ast.Subscript, ast.Call)) and id(node) not in bases:
                    dump = ast.dump(node, annotate_fields=False, include_attributes=False)
                    if dump not in moved:
                        wanted.add(dump)
        result = self.index.result
        grads = {r.param for r in result.records if r.kind == "gradient"}
        out = []
        for r in result.records:
            loose = r.kind == "tensor" or (r.kind == "parameter" and r.owner is None)
            if not loose or r.alias_of is not None or r.device == target:
                continue
            if _named_in(r.name, wanted):
                out.append(fixes.move_tensor(r.name, target, source=r.device, requires_grad=r.requires_grad,
                                             is_leaf=r.is_leaf, is_parameter=r.type_name == "Parameter",
                                             has_grad=r.name in grads,
                                             swap_flag=bool(result.options.get("swap_flag"))))
        return out


def _named_in(name: str, wanted: set[str]) -> bool:
    """Whether ``name`` (or a container it is in: ``batch`` for ``batch["ids"]``) is among ``wanted``."""
    import ast

    try:
        node = ast.parse(name, mode="eval").body
    except SyntaxError:
        return False
    while True:
        if ast.dump(node, annotate_fields=False, include_attributes=False) in wanted:
            return True
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            node = node.value
        else:
            return False


def _frames(frame: Any) -> Iterator[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back


def _optimizers_of(result: Any, module: str) -> tuple[str, ...]:
    from .findings import optimizers_with_state_under

    return optimizers_with_state_under(result, module)


def _innermost_module_path(modules: dict[int, str], frame: types.FrameType | None) -> str | None:
    """Path of the innermost module whose method is on the stack (``model.fc1``)."""
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_name in ("forward", "_call_impl") else None
        if owner is not None and id(owner) in modules:
            return modules[id(owner)]
        frame = frame.f_back
    return None


def _local_name(frame: Any, t: Any, modules: dict[int, str]) -> tuple[str, str] | None:
    from ..collect.static import instance_dict

    local_vars = frame.f_locals
    for key, value in local_vars.items():
        if value is t and key != "self":
            return key, "local"
    owner = local_vars.get("self")
    if owner is not None and issubclass(type(owner), torch.nn.Module):
        d = instance_dict(owner)
        path = modules.get(id(owner))
        prefix = path if path is not None else "self"
        for group, source in (("_parameters", "parameter"), ("_buffers", "buffer")):
            for key, value in (d.get(group) or {}).items():
                if value is t:
                    return f"{prefix}.{key}", source
        for key, value in d.items():
            if value is t:
                return f"{prefix}.{key}", "attribute"
    return None
