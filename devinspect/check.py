"""The scoped torch mode behind ``%%devcheck``: transfers, host syncs and device mismatches.

A :class:`~torch.overrides.TorchFunctionMode` does the work. It sees every tensor
call made from Python (``.item()``, ``.to()``, ``.numpy()``, printing) at about a
microsecond per call and, unlike a dispatch mode, leaves ``torch.compile`` and other
modes alone. The copies autograd makes in the backward pass (a gradient going back
across devices through ``.to()``) are counted by a pre-hook on each such ``.to()``'s
autograd node, set when the forward copy is seen and removed when the check ends.
Uninteresting calls return after one set lookup; copies and syncs are attributed to the innermost line of user code; when a call raises and its tensor
inputs sit on different devices (decided from the inputs, never from the message),
the operands are named in the user's words and the fix is written out.
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import time
import types
from collections import defaultdict
from typing import Any, Callable, Iterator, Mapping

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakIdKeyDictionary

from .model import SEVERITY_ORDER, CheckReport, Finding, LineStats, Mismatch, Operand, SourceLine, device_is_accelerator
from .render.units import human_bytes

_T = torch.Tensor

_LIBRARY_DIRS = tuple(
    os.path.dirname(os.path.abspath(m.__file__)) + os.sep
    for m in (torch, contextlib, sys.modules[__name__.rsplit(".", 1)[0]])
    if getattr(m, "__file__", None)
)
_SYNC_METHODS = {
    "item": ".item()", "__float__": "float()", "__int__": "int()", "__bool__": "bool()", "__index__": "int()",
    "tolist": ".tolist()", "numpy": ".numpy()", "__repr__": "print", "__str__": "print", "__format__": "print",
    "nonzero": "nonzero", "masked_select": "masked_select", "unique": "unique", "argwhere": "nonzero",
}
_FACTORIES = frozenset({
    "ones", "zeros", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "eye", "tensor", "as_tensor",
    "ones_like", "zeros_like", "empty_like", "full_like", "rand_like", "randn_like",
})
_INTERESTING = frozenset({*_SYNC_METHODS, "to", "cpu", "cuda", "xpu", "mps", "copy_", "__getitem__", "backward",
                          *_FACTORIES})

#: A line whose host syncs repeat at least this often is flagged as syncing in a loop.
LOOP_SYNCS = 10


class _Counts:
    __slots__ = ("where", "cell_line", "h2d", "d2h", "d2d", "syncs")

    def __init__(self, where: SourceLine, cell_line: int | None):
        self.where, self.cell_line = where, cell_line
        self.h2d = [0, 0]
        self.d2h = [0, 0]
        self.d2d = [0, 0]
        self.syncs: dict[str, int] = defaultdict(int)


class DeviceCheckMode(TorchFunctionMode):
    """Counts copies and syncs per source line and explains device mismatches.

    ``is_cell_frame(frame)`` says which frames are the checked code itself (a notebook
    cell, or the block under ``with check():``); ``namespace`` is where variable names
    are looked up when a mismatch needs explaining.
    """

    def __init__(self, namespace: Mapping[str, Any], is_cell_frame: Callable[[types.FrameType], bool]):
        super().__init__()
        self.namespace = namespace
        self.is_cell_frame = is_cell_frame
        self._lines: dict[tuple[str, int], _Counts] = {}
        self._library_code: dict[types.CodeType, bool] = {}
        self._from_device = WeakIdKeyDictionary()  # host tensor made by a device->host copy -> line
        self._moved = WeakIdKeyDictionary()  # host tensor -> times copied to a device
        self._created = WeakIdKeyDictionary()  # tensor -> (line label, factory, device given?)
        self._flags: list[Finding] = []
        self._flagged: set[tuple[str, str]] = set()
        self.mismatch: Mismatch | None = None
        self._backward_where: tuple[SourceLine, int | None] | None = None
        self._hooks: list[Any] = []  # handles of the gradient-copy hooks, removed on exit

    def __exit__(self, *exc: Any) -> Any:
        for handle in self._hooks:
            handle.remove()  # the user's autograd graph is left as it was
        self._hooks.clear()
        return super().__exit__(*exc)

    # -- the hot path ----------------------------------------------------------

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if kwargs is None:
            kwargs = {}
        name = getattr(func, "__name__", None)
        if name not in _INTERESTING:
            try:
                return func(*args, **kwargs)
            except Exception as exc:
                self._on_error(func, args, kwargs, exc)
                raise
        try:
            before = self._before(name, func, args, kwargs)
            if name == "backward":
                # Gradient copies run inside autograd (on its own threads for CUDA): they are
                # counted by the hooks set in _after, on the line that called .backward().
                self._backward_where = self._where()
                try:
                    result = func(*args, **kwargs)
                finally:
                    self._backward_where = None
            else:
                result = func(*args, **kwargs)
        except Exception as exc:
            self._on_error(func, args, kwargs, exc)
            raise
        self._after(name, args, kwargs, result, before)
        return result

    # -- events ----------------------------------------------------------------

    def _before(self, name: str, func: Any, args: tuple, kwargs: dict) -> Any:
        self_t = args[0] if args and isinstance(args[0], _T) else None
        if name in _SYNC_METHODS and self_t is not None:
            if device_is_accelerator(str(self_t.device)):
                self._sync(_SYNC_METHODS[name])
            return None
        if name == "__getitem__" and self_t is not None and len(args) > 1:
            index = args[1]
            if isinstance(index, _T) and index.dtype == torch.bool and device_is_accelerator(str(self_t.device)):
                self._sync("bool-mask indexing")
            return None
        if name in ("to", "cpu", "cuda", "xpu", "mps") and self_t is not None:
            return self._planned_copy(name, self_t, args, kwargs)
        if name == "copy_" and self_t is not None and len(args) > 1 and isinstance(args[1], _T):
            src = args[1]
            self._copy(src.device, self_t.device, src.nbytes, src, kwargs.get("non_blocking", False))
        return None

    def _after(self, name: str, args: tuple, kwargs: dict, result: Any, before: Any) -> None:
        if before is not None and isinstance(result, _T):
            src, dst = before
            if dst.type == "cpu" and src.type != "cpu":
                self._from_device[result] = self._where()[0].label
            if src != dst and result.grad_fn is not None:
                self._count_gradient_copy(result.grad_fn, src)
        elif name in _FACTORIES and isinstance(result, _T):
            where = self._where()
            given = kwargs.get("device") is not None or name.endswith("_like")
            self._created[result] = (where[0].label, name, given)
            if name in ("tensor", "as_tensor") and given and device_is_accelerator(str(result.device)):
                self._count(where, "h2d", result.nbytes)
                self._sync(f"torch.{name}(…, device=)", where)

    def _count_gradient_copy(self, node: Any, src: Any) -> None:
        """Count, during backward, the copy of the gradient back to ``src`` through ``node``
        (a fresh node per forward copy, so each gets one hook)."""

        def before_node(grad_outputs: tuple) -> None:
            grad = grad_outputs[0] if grad_outputs else None
            if isinstance(grad, _T) and grad.device != src:
                where = self._backward_where or self._where()
                self._copy_counted(where, grad.device, src, grad.nbytes, "backward copy to host")

        self._hooks.append(node.register_prehook(before_node))

    def _planned_copy(self, name: str, t: Any, args: tuple, kwargs: dict) -> Any:
        src = t.device
        non_blocking = bool(kwargs.get("non_blocking", False))
        if name == "cpu":
            dst = torch.device("cpu")
        elif name in ("cuda", "xpu", "mps"):
            index = args[1] if len(args) > 1 else kwargs.get("device")
            dst = torch.device(name, index) if isinstance(index, int) else torch.device(index or name)
        else:
            try:
                dst, _dtype, non_blocking, _fmt = torch._C._nn._parse_to(*args[1:], **kwargs)
            except Exception:
                return None
            if dst is None:
                return None
        if dst == src or (dst.type == src.type and dst.index is None):
            return None  # no copy: already there
        self._copy(src, dst, t.nbytes, t, non_blocking)
        return (src, dst)

    def _copy(self, src: Any, dst: Any, nbytes: int, source_tensor: Any, non_blocking: bool) -> None:
        if src == dst:
            return
        where = self._where()
        if self._copy_counted(where, src, dst, nbytes, ".cpu()") == "h2d":
            self._host_to_device_checks(where[0], source_tensor, nbytes, non_blocking)

    def _copy_counted(self, where: tuple[SourceLine, int | None], src: Any, dst: Any, nbytes: int,
                      sync_kind: str) -> str:
        """Count one copy between two different devices; a copy to the host is also a sync."""
        src_host, dst_host = src.type == "cpu", dst.type == "cpu"
        direction = "h2d" if src_host and not dst_host else "d2h" if dst_host and not src_host else "d2d"
        self._count(where, direction, nbytes)
        if direction == "d2h":
            self._sync(sync_kind, where)
        return direction

    def _host_to_device_checks(self, where: SourceLine, t: Any, nbytes: int, non_blocking: bool) -> None:
        origin = self._from_device.get(t)
        if origin is not None:
            self._flag(
                "round-trip", where.label, "warning",
                f"{where.label}: data brought to the host at {origin} is sent back to the device",
                "keep the computation on the device (avoid .cpu()/.item() between device steps)",
            )
        count = self._moved.get(t, 0) + 1
        self._moved[t] = count
        if count == 2:
            self._flag(
                "repeated-transfer", where.label, "warning",
                f"{where.label}: the same host tensor ({human_bytes(nbytes)}) is copied to the device again on every pass",
                "move it to the device once, before the loop",
            )
        if non_blocking:
            pinned = False
            with contextlib.suppress(Exception):
                pinned = bool(t.is_pinned())
            if not pinned:
                self._flag(
                    "non-blocking-unpinned", where.label, "hint",
                    f"{where.label}: non_blocking=True from pageable (unpinned) memory copies synchronously",
                    "pin the source: DataLoader(..., pin_memory=True) or tensor.pin_memory()",
                )

    def _sync(self, kind: str, where: tuple[SourceLine, int | None] | None = None) -> None:
        where = where or self._where()
        self._counts(where).syncs[kind] += 1

    def _count(self, where: tuple[SourceLine, int | None], direction: str, nbytes: int) -> None:
        pair = getattr(self._counts(where), direction)
        pair[0] += 1
        pair[1] += int(nbytes)

    def _counts(self, where: tuple[SourceLine, int | None]) -> _Counts:
        line, cell_line = where
        key = (line.file, line.line)
        counts = self._lines.get(key)
        if counts is None:
            counts = self._lines[key] = _Counts(line, cell_line)
        return counts

    def _flag(self, code: str, subject: str, severity: str, message: str, fix: str) -> None:
        if (code, subject) not in self._flagged:
            self._flagged.add((code, subject))
            self._flags.append(Finding(code=code, severity=severity, subject=subject, message=message, fix=fix))

    # -- where in the user's code --------------------------------------------------

    def _is_library(self, code: types.CodeType) -> bool:
        known = self._library_code.get(code)
        if known is None:
            known = self._library_code[code] = code.co_filename.startswith(_LIBRARY_DIRS) or code.co_filename.startswith("<frozen")
        return known

    def _user_frames(self) -> Iterator[types.FrameType]:
        frame = sys._getframe(2)
        while frame is not None:
            if not self._is_library(frame.f_code):
                yield frame
            frame = frame.f_back

    def _where(self) -> tuple[SourceLine, int | None]:
        inner = None
        cell_line = None
        for frame in self._user_frames():
            if inner is None:
                inner = frame
            if self.is_cell_frame(frame):
                cell_line = frame.f_lineno
                break
        if inner is None:
            return SourceLine("<unknown>", 0, ""), None
        return _source_line(inner, self.is_cell_frame(inner)), cell_line

    # -- device mismatch -------------------------------------------------------------

    def _on_error(self, func: Any, args: tuple, kwargs: dict, exc: BaseException) -> None:
        if self.mismatch is not None or getattr(exc, "_devinspect_seen", False):
            return
        tensors = list(_tensor_inputs(args, kwargs))
        devices = sorted({str(t.device) for t in tensors if not (t.device.type == "cpu" and t.dim() == 0)})
        if len(devices) < 2:
            return
        with contextlib.suppress(Exception):
            exc._devinspect_seen = True  # type: ignore[attr-defined]
        try:
            self.mismatch = _Diagnosis(self, func, tensors, devices, exc).build()
        except Exception:  # noqa: BLE001 - a diagnosis must never hide the user's error
            self.mismatch = Mismatch(
                op=_op_name(func), error=_first_line(exc), devices=tuple(devices), operands=(), cell_line=None,
                user_frame=None, module_path=None, target_device=None, fix=None,
            )

    # -- result ---------------------------------------------------------------------------

    def report(self, error: BaseException | None = None, elapsed_s: float | None = None) -> CheckReport:
        lines = []
        for counts in self._lines.values():
            lines.append(
                LineStats(
                    where=counts.where, cell_line=counts.cell_line,
                    h2d_count=counts.h2d[0], h2d_bytes=counts.h2d[1], d2h_count=counts.d2h[0], d2h_bytes=counts.d2h[1],
                    d2d_count=counts.d2d[0], d2d_bytes=counts.d2d[1],
                    syncs=tuple(sorted(counts.syncs.items(), key=lambda kv: -kv[1])),
                )
            )
        findings = list(self._flags)
        for s in lines:
            if s.sync_count >= LOOP_SYNCS:
                kinds = ", ".join(f"{k} ×{n}" for k, n in s.syncs)
                if any(kind in (".item()", "float()", "int()", "print", ".tolist()") for kind, _ in s.syncs):
                    fix = "accumulate on the device (`total += loss.detach()`) and read it once after the loop"
                elif any(kind == ".cpu()" for kind, _ in s.syncs):
                    fix = "keep the tensor on the device; copy to the host once, after the loop"
                else:
                    fix = "avoid data-dependent shapes and Python control flow on device values inside the loop"
                findings.append(Finding(
                    code="sync-in-loop", severity="warning", subject=s.where.label,
                    message=f"{s.where.label}: the host waits for the device {s.sync_count} times ({kinds})",
                    fix=fix,
                ))
        findings.sort(key=lambda f: SEVERITY_ORDER.get(f.severity, 9))
        return CheckReport(
            lines=tuple(lines), findings=tuple(findings), mismatch=self.mismatch,
            error=_first_line(error) if error is not None else None, elapsed_s=elapsed_s,
        )


def _source_line(frame: types.FrameType, in_cell: bool) -> SourceLine:
    code = frame.f_code
    text = linecache.getline(code.co_filename, frame.f_lineno).strip()
    return SourceLine("<cell>" if in_cell else code.co_filename, frame.f_lineno, code.co_name, text)


def _tensor_inputs(args: tuple, kwargs: dict) -> Iterator[Any]:
    for value in (*args, *kwargs.values()):
        if isinstance(value, _T):
            yield value
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, _T):
                    yield item


def _first_line(exc: BaseException | None) -> str:
    if exc is None:
        return ""
    try:
        text = str(exc).strip().splitlines()
    except Exception:
        text = []
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _op_name(func: Any) -> str:
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


class _Diagnosis:
    """Names the operands of a failed op and writes the fix. Runs only after an error."""

    def __init__(self, mode: DeviceCheckMode, func: Any, tensors: list, devices: list[str], exc: BaseException):
        self.mode, self.func, self.tensors, self.devices, self.exc = mode, func, tensors, devices, exc

    def build(self) -> Mismatch:
        from .scan import module_paths, tensor_names

        frames = list(self.mode._user_frames())
        inner = frames[0] if frames else None
        cell = next((f for f in frames if self.mode.is_cell_frame(f)), None)
        namespace = self.mode.namespace
        names = tensor_names(namespace, self.tensors)
        modules = module_paths(namespace)
        module_path = _innermost_module_path(modules)
        operands = [self._operand(t, names[i], inner, modules) for i, t in enumerate(self.tensors)]
        target = self._target_device(operands)
        fix, action = self._fix(operands, target, inner)
        return Mismatch(
            op=_op_name(self.func),
            error=_first_line(self.exc),
            devices=tuple(self.devices),
            operands=tuple(operands),
            cell_line=_source_line(cell, True) if cell is not None else None,
            user_frame=_source_line(inner, False) if inner is not None and inner is not cell else None,
            module_path=module_path,
            target_device=target,
            fix=fix,
            action=action,
        )

    def _operand(self, t: Any, found: tuple[str, str, bool] | None, frame: Any, modules: dict[int, str]) -> Operand:
        device, dtype, shape = str(t.device), str(t.dtype).removeprefix("torch."), tuple(t.shape)
        created = self.mode._created.get(t)
        detail = ""
        if created is not None:
            where, factory, given = created
            detail = f"created at {where} by torch.{factory}" + ("" if given else " without device=")
        if found is not None:
            name, source, is_view = found
            if is_view:
                detail = "; ".join(filter(None, [f"a view of {name}", detail]))
            return Operand(name, source, device, dtype, shape, detail)
        if frame is not None:
            local = _local_name(frame, t, modules)
            if local is not None:
                name, source = local
                return Operand(name, source, device, dtype, shape, detail or f"in {frame.f_code.co_name}")
        return Operand(None, "created" if created else "unknown", device, dtype, shape, detail or "a temporary")

    def _target_device(self, operands: list[Operand]) -> str | None:
        # Forgetting to move something to the accelerator is the common bug, so the
        # accelerator wins; between accelerators, the device the model's weights are on.
        accelerators = [o for o in operands if device_is_accelerator(o.device)]
        if len({o.device for o in accelerators}) > 1:
            for o in accelerators:
                if o.source in ("parameter", "buffer"):
                    return o.device
        if accelerators:
            return accelerators[0].device
        return operands[0].device if operands else None

    def _fix(self, operands: list[Operand], target: str | None, frame: Any) -> tuple[str | None, dict | None]:
        if target is None:
            return None, None
        anchor = next((o.name for o in operands if o.device == target and o.name and o.source in ("parameter", "buffer")), None)
        local_anchor = next((o.name for o in operands if o.device == target and o.source == "local" and o.name), None)
        if local_anchor is None and frame is not None:
            local_anchor = next((k for k, v in frame.f_locals.items()
                                 if k != "self" and isinstance(v, _T) and str(v.device) == target), None)
        device_expr = f"{anchor}.device" if anchor else f'"{target}"'
        local_ref = f"{local_anchor}.device" if local_anchor else f'"{target}"'
        lines: list[str] = []
        action = None
        for o in operands:
            if o.device == target:
                continue
            if o.source == "namespace" and o.name:
                lines.append(f"{o.name} = {o.name}.to({device_expr})")
                action = action or {"kind": "move", "name": o.name, "device": target}
            elif o.source == "optimizer_state" and o.name:
                opt = o.name.split(".state[", 1)[0]
                lines.append(
                    f"for state in {opt}.state.values():  # state loaded before the model moved\n"
                    f"    for k, v in state.items():\n"
                    f"        if torch.is_tensor(v) and v.dim() > 0:\n"
                    f'            state[k] = v.to("{target}")'
                )
                action = action or {"kind": "move_optimizer_state", "name": opt, "device": target}
            elif o.source == "gradient" and o.name:
                root = o.name.split(".")[0].split("[")[0]
                lines.append(f'{root}.to("{target}")  # moves parameters and their .grad')
                action = action or {"kind": "move", "name": root, "device": target}
            elif o.source in ("parameter", "buffer") and o.name:
                root = o.name.split(".")[0].split("[")[0]
                lines.append(f'{root}.to("{target}")')
                action = action or {"kind": "move", "name": root, "device": target}
            elif o.source == "attribute" and o.name:
                owner, _, attr = o.name.rpartition(".")
                lines.append(f'# in __init__: self.register_buffer("{attr}", ...) instead of self.{attr} = ...\n'
                             f'{owner}.register_buffer("{attr}", {owner}.__dict__.pop("{attr}").to("{target}"))')
                action = action or {"kind": "register_buffer", "name": owner, "attr": attr, "device": target}
            elif o.source == "local" and o.name:
                local = o.name.split(" ")[0]
                if "without device=" in o.detail:
                    factory = o.detail.split("by torch.", 1)[1].split(" ")[0]
                    lines.append(f"# at {o.detail.split(' by ')[0].removeprefix('created at ')}:\n"
                                 f"{local} = torch.{factory}(..., device={local_ref})")
                else:
                    lines.append(f"{local} = {local}.to({local_ref})")
            elif "without device=" in o.detail:
                factory = o.detail.split("by torch.", 1)[1].split(" ")[0]
                lines.append(f"torch.{factory}(..., device=\"{target}\")  # {o.detail}")
        return ("\n".join(lines) or None), action


def _innermost_module_path(modules: dict[int, str]) -> str | None:
    """Path of the innermost module whose method is on the stack (``model.fc1``)."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self") if frame.f_code.co_name in ("forward", "_call_impl") else None
        if isinstance(owner, torch.nn.Module) and id(owner) in modules:
            return modules[id(owner)]
        frame = frame.f_back
    return None


def _local_name(frame: Any, t: Any, modules: dict[int, str]) -> tuple[str, str] | None:
    local_vars = frame.f_locals
    for key, value in local_vars.items():
        if value is t and key != "self":
            return key, "local"
    owner = local_vars.get("self")
    if isinstance(owner, torch.nn.Module):
        from .scan import _instance_dict

        d = _instance_dict(owner)
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


@contextlib.contextmanager
def check(namespace: Mapping[str, Any] | None = None, *, strict: bool = False) -> Iterator[_Handle]:
    """Check the block for device mismatches, copies and host syncs.

    ::

        with devinspect.check() as c:
            train_step()
        c.report            # a CheckReport: per-line copies/syncs, findings, mismatch

    A device-mismatch error raised in the block gets the diagnosis as an exception
    note and propagates unchanged. With ``strict=True`` findings raise
    :class:`DeviceCheckError` after the block.
    """
    caller = sys._getframe(2)
    if namespace is None:
        namespace = caller.f_globals
    code = caller.f_code
    handle = _Handle()
    mode = DeviceCheckMode(namespace, lambda frame: frame.f_code is code)
    start = time.perf_counter()
    try:
        with mode:
            yield handle
    except BaseException as exc:
        handle.report = mode.report(exc, time.perf_counter() - start)
        attach_note(exc, handle.report)
        raise
    handle.report = mode.report(None, time.perf_counter() - start)
    if strict and handle.report.has_findings:
        raise DeviceCheckError(handle.report)


class _Handle:
    """What ``with check() as c`` gives: ``c.report`` once the block is done."""

    report: CheckReport | None = None


class DeviceCheckError(AssertionError):
    """Raised by ``strict`` checks when the code copied or synced in a way worth fixing."""

    def __init__(self, report: CheckReport):
        self.report = report
        problems = [f.message for f in report.findings]
        if report.mismatch is not None:
            problems.insert(0, report.mismatch.summary().splitlines()[0])
        super().__init__("devinspect found device problems:\n" + "\n".join(f"- {p}" for p in problems))

    def _render_traceback_(self) -> list[str]:
        # IPython shows this instead of a traceback through devinspect's own frames.
        return [f"DeviceCheckError: {self}"]


def attach_note(exc: BaseException, report: CheckReport) -> None:
    """Add the mismatch diagnosis to the exception as a note (shown with the traceback)."""
    if report.mismatch is not None and hasattr(exc, "add_note"):
        with contextlib.suppress(Exception):
            exc.add_note("devinspect: " + report.mismatch.summary())
