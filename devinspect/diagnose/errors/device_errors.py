"""Device errors other than a mismatch, explained at their cause from the error's traceback.

Each kind is recognised by the objects involved, read statically from the traceback's frames;
where PyTorch says what went wrong only in its message, the stable part of that message is
matched and the comment next to it says so:

* **host array** — a tensor on a device read as a NumPy array: ``t.numpy()``, or a library
  (``np.asarray``, matplotlib, pandas, scikit-learn) handed the tensor. The user's line is
  edited to copy it to the host (``.detach()`` first only where it requires grad);
* **pinned device tensor** and **device tensor in a worker** — a DataLoader whose dataset
  holds device tensors, with ``pin_memory=True`` or worker processes (see
  :mod:`.loader_errors`);
* **generator device** — a random op given a generator of another device than the tensor it
  makes (``torch.set_default_device(dev)`` then ``torch.randperm(n, generator=g)``, or a
  DataLoader's ``shuffle=True``);
* **meta data** — a value read from a tensor on meta that a model with parameters on meta made
  (see :mod:`.meta_data`).

Everything here runs only after an error, reads the user's objects statically and never raises:
a kind that cannot be read is not claimed.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import types
from typing import Any, Mapping

import torch

from ...collect import (
    FACTORIES,
    Entry,
    Result,
    first_line,
    locations,
    message,
    running_expression,
    traceback_entries,
    value_in_frame,
)
from ...model import DeviceError, Fix, Operand
from ...runtime import tensor_getters
from .. import edit_checks
from ..causes import device_names, dropped_move_fix, generator_edits, line_edits
from .failed_frames import Failed, describe, source_of
from .loader_errors import loader_error, loader_generator
from .meta_data import meta_data

_T = torch.Tensor


def explain_device_error(exc: BaseException | None, namespace: Mapping[str, Any],
                         entries: list[Entry] | None = None) -> DeviceError | None:
    """The device error behind ``exc`` when it is one of the kinds this module knows, else None.
    ``entries``: its frames, when they are more than its own traceback's (a re-raised error)."""
    if exc is None or not isinstance(exc, (TypeError, RuntimeError)) or isinstance(exc, torch.OutOfMemoryError):
        return None
    try:
        entries = list(traceback_entries(exc.__traceback__)) if entries is None else entries
        failed = Failed(exc, entries, namespace)
    except Exception:  # an error whose frames cannot be read is not claimed
        return None
    with torch._C.DisableTorchFunction():
        for reader in (host_array, loader_error, generator_device, meta_data):
            try:
                found = reader(failed) if entries else None
            except Exception:  # a kind that cannot be read is not claimed
                found = None
            if found is not None:
                fix = getattr(found, "fix", None)
                return dataclasses.replace(found, fix=edit_checks.with_edits_that_run(fix)) if fix is not None else found
    return None


# -- a device tensor read as a NumPy array ----------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Items:
    """A list or tuple of tensors, some of them on a device (``losses`` handed to ``plt.plot``)."""

    kind: str
    tensors: tuple[Any, ...]

    @property
    def on_device(self) -> Any:
        return next(t for t in self.tensors if _on_device(t))


#: A list longer than this is not read item by item.
_ITEMS_READ = 100_000


def _items(value: Any) -> _Items | None:
    """``value`` as a list of tensors when it is a plain list or tuple of tensors only, some on a
    device (read without running anything: a builtin sequence and the tensors' types)."""
    if type(value) not in (list, tuple) or not 0 < len(value) <= _ITEMS_READ:
        return None
    tensors = tuple(value)
    if not all(issubclass(type(t), _T) for t in tensors) or not any(_on_device(t) for t in tensors):
        return None
    return _Items(type(value).__name__, tensors)


def _on_device(value: Any) -> bool:
    """A tensor on a device, a list of tensors some on a device, or a result on the failing line
    never computed whose inputs are there (``scores.argmax(1)``)."""
    if type(value) is _Items:
        return True
    if type(value) is Result:
        return value.device.split(":")[0] not in ("cpu", "meta")
    return issubclass(type(value), _T) and tensor_getters.device(value).type not in ("cpu", "meta")


def _leaves(node: ast.expr) -> list[ast.expr]:
    """The expressions a call's argument is made of: the items of a literal list, tuple or dict."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return [leaf for item in node.elts for leaf in _leaves(item)]
    if isinstance(node, ast.Dict):
        return [leaf for item in node.values for leaf in _leaves(item)]
    if isinstance(node, ast.Starred):
        return _leaves(node.value)
    return [node]


def _detached(node: ast.expr) -> bool:
    """Whether the expression already ends in a ``.detach()`` (or ``.data``) of its tensor."""
    while isinstance(node, (ast.Call, ast.Attribute, ast.Subscript)):
        if isinstance(node, ast.Attribute) and node.attr in ("detach", "data"):
            return True
        node = node.func if isinstance(node, ast.Call) else node.value
    return False


def _undetached(node: ast.expr) -> ast.expr:
    """The tensor an expression detaches: ``z`` for ``z.detach()`` or ``z.data`` (the same data)."""
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "detach" \
            or isinstance(node, ast.Attribute) and node.attr == "data":
        node = node.func.value if isinstance(node, ast.Call) else node.value
    return node


def _named(node: ast.expr) -> str:
    """How an explanation names a tensor: ``z`` for ``z.detach()`` (its own data, the same tensor)."""
    return ast.unparse(_undetached(node))


def _names_in(node: ast.expr) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _host_array_leaves(node: ast.AST, frame: types.FrameType) -> list[tuple[ast.expr, Any]]:
    """The expressions on the user's line that hand a device tensor to be read as an array: the
    object of a ``.numpy()`` call, or an argument of a call into library code."""
    found: list[tuple[ast.expr, Any]] = []
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func = call.func
        if isinstance(func, ast.Attribute) and func.attr == "numpy":
            parts = [func.value]
        else:
            parts = [leaf for arg in [*call.args, *(k.value for k in call.keywords)] for leaf in _leaves(arg)]
        for part in parts:
            value = value_in_frame(part, frame)
            value = _items(value) or value
            if _on_device(value) and all(part is not seen for seen, _ in found):
                found.append((part, value))
    return found


#: PyTorch's message when no tensor on the user's line can be read ("can't convert cuda:0 device
#: type tensor to numpy"): only then is the message alone enough to say the kind.
_DEVICE_TO_NUMPY = re.compile(r"can't convert (\S+) device type tensor to numpy")


def host_array(failed: Failed) -> DeviceError | None:
    # PyTorch says it only in its message ("can't convert cuda:0 device type tensor to numpy"):
    # its stable part is that a tensor is converted to numpy; the tensor itself is read below.
    if not isinstance(failed.exc, TypeError) or "to numpy" not in message(failed.exc):
        return None
    inner = failed.inner
    if inner is None:
        return None
    node = running_expression(inner)
    leaves = _host_array_leaves(node, inner.frame) if node is not None else []
    if not leaves:  # said, with no tensor named: never a mismatch made up from the library's locals
        device = _DEVICE_TO_NUMPY.search(message(failed.exc))
        if device is None:
            return None
        what = f"a tensor on {device.group(1)} is read as a NumPy array"
        return DeviceError("host array", first_line(failed.exc), what, failed.line(failed.cell), failed.deeper_line(),
                           (), "a NumPy array lives in host memory", Fix(
                               summary="copy the tensor to the host first (.cpu()) where your line reads it or passes "
                                       "it on", note="run the cell under %%devcheck to see the line that copies it"))
    dropped = _dropped_host_move(failed, inner, leaves)
    if dropped is not None:
        return dropped
    statement = failed.statement(inner)
    library = failed.library()
    changes = line_edits.Changes(statement) if statement is not None else None
    operands, shown, needs_grad, lists = [], [], False, 0
    for leaf, value in leaves[:8]:
        text = _named(leaf)
        written = line_edits.find(statement.node, ast.unparse(leaf)) if statement is not None else None
        if type(value) is _Items:
            grad = any(tensor_getters.requires_grad(t) for t in value.tensors)
            item = next(n for n in ("t", "item", "tensor", "_t") if n not in _names_in(leaf))
            shown.append(f"[{item}{'.detach()' if grad else ''}.cpu() for {item} in {ast.unparse(leaf)}]")
            first = describe(value.on_device, text, source_of(inner.frame, failed))
            detail = f"a {value.kind} of {len(value.tensors)} tensors" + (" that require grad" if grad else "")
            operands.append(Operand(text, first.source, first.device, first.dtype, None, detail))
            if changes is not None and written is not None:
                changes.items_on_host(written, grad, item)
            lists += 1
        else:
            tensor = value.stand_in if type(value) is Result else value
            grad = tensor_getters.requires_grad(tensor)
            detach = grad and not _detached(leaf)
            shown.append(f"{ast.unparse(leaf)}{'.detach()' if detach else ''}.cpu()")
            operands.append(describe(tensor, text, source_of(inner.frame, failed), "requires grad" if grad else "")
                            if type(value) is not Result
                            else Operand(text, "result", value.device, "?", None, "computed on the line"))
            if changes is not None and written is not None:
                changes.on_host(written, detach)
        needs_grad = needs_grad or grad
        if changes is not None and written is None:
            changes.failed = True
    names = ", ".join(o.name or "?" for o in operands)
    device = operands[0].device
    reader = f"{library} reads" if library and library != "torch" else "NumPy reads"
    held = "hold tensors" if lists and len(operands) > 1 else "holds tensors" if lists else ""
    what = f"{names} {held or ('is' if len(operands) == 1 else 'are')} on {device}, and {reader} it as a NumPy array"
    grad = "; .detach() first for a tensor that requires grad" if needs_grad else ""
    cause = (f"a NumPy array lives in host memory: a tensor on {device} has to be copied to the host first "
             f"(.cpu(): a device-to-host copy, which waits for the device){grad}")
    edits = changes.edits() if changes is not None else None
    summary = f"copy {names} to the host where it is read: {', '.join(shown)}"
    fix = failed.edit_fix(summary, edits) if edits else Fix(summary=summary, note="change the line that reads it "
                                                                               "so that it reads " + ", ".join(shown))
    return DeviceError("host array", first_line(failed.exc), what, failed.line(failed.cell), failed.deeper_line(),
                       tuple(operands), cause, fix)


def _dropped_host_move(failed: Failed, inner: Entry, leaves: list[tuple[ast.expr, Any]]) -> DeviceError | None:
    """A tensor read as an array after ``x.cpu()`` (or ``x.to("cpu")``) was written as a statement:
    that move, whose copy was dropped, is the cause, and its line keeps the copy. Only where the
    copy alone makes the read work: one tensor, read by its name, not requiring grad (or detached
    on the line)."""
    if len(leaves) != 1 or type(leaves[0][1]) is Result:
        return None
    leaf, value = leaves[0]
    if not issubclass(type(value), _T):
        return None
    read = _undetached(leaf)
    if not isinstance(read, ast.Name) or (tensor_getters.requires_grad(value) and not _detached(leaf)):
        return None
    lines = {id(e.frame): e.lineno for e in failed.entries}
    frames = [e.frame for e in reversed(failed.users)]
    cell = failed.cell.frame if failed.cell is not None else None
    name = read.id if inner is failed.cell else None
    device = str(tensor_getters.device(value))
    fix = dropped_move_fix(failed.namespace, value, name, device, "cpu", frames, cell,
                           lambda frame: lines.get(id(frame), 1 << 30))
    if fix is None:
        return None
    library = failed.library()
    reader = f"{library} reads" if library and library != "torch" else "NumPy reads"
    what = f"{read.id} is on {device}, and {reader} it as a NumPy array"
    cause = (f"a NumPy array lives in host memory; the line that copies {read.id} to the host drops the copy "
             "(Tensor.cpu and Tensor.to return a copy and leave the tensor where it is)")
    operand = describe(value, read.id, source_of(inner.frame, failed))
    return DeviceError("host array", first_line(failed.exc), what, failed.line(failed.cell), failed.deeper_line(),
                       (operand,), cause, fix)


# -- a generator of another device -------------------------------------------------------------------

#: PyTorch's check of a generator's device says it only in its message (``at::check_generator``).
_GENERATOR_WORDS = re.compile(r"Expected a '(\w+)' device type for generator but found '(\w+)'")


def _generator_call(failed: Failed, wanted: str, found: str) -> tuple[Entry, ast.Call, ast.expr, Any] | None:
    """The innermost running call with a ``generator=`` of device type ``found``."""
    for entry in reversed(failed.entries):
        if locations.is_own_file(entry.frame.f_code.co_filename):
            continue
        node = running_expression(entry)
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)) if node is not None else ():
            given = next((k.value for k in call.keywords if k.arg == "generator"), None)
            value = value_in_frame(given, entry.frame) if given is not None else None
            if type(value) is torch.Generator and value.device.type == found:
                return entry, call, given, value
    return None


def generator_device(failed: Failed) -> DeviceError | None:
    match = _GENERATOR_WORDS.search(message(failed.exc))
    if not isinstance(failed.exc, RuntimeError) or match is None:
        return None
    wanted, found = match.groups()
    made = _generator_call(failed, wanted, found)
    if made is None:
        return None
    entry, call, given, generator = made
    default = failed.device_of_default()
    target = default if default.split(":")[0] == wanted else wanted
    device_expr = device_names.device_expression(failed.namespace, target)
    operand = Operand(ast.unparse(given), "generator", str(generator.device), "?", None,
                      f"a torch.Generator, used by {ast.unparse(call.func)}")
    scoped = (f"or keep {target} as the default device only where tensors are made (with torch.device("
              f"{device_expr}): …) instead of torch.set_default_device") if default.split(":")[0] == wanted else ""
    if locations.is_user_code(entry.frame.f_code):
        return _generator_on_line(failed, entry, call, given, target, device_expr, operand, scoped)
    return loader_generator(failed, operand, target, device_expr, scoped) or \
        _generator_passed(failed, generator, operand, target, device_expr, scoped)


def _generator_passed(failed: Failed, generator: Any, operand: Operand, target: str, device_expr: str,
                      scoped: str) -> DeviceError | None:
    """A library call of the user's line (``random_split(ds, lengths, generator=g)``) draws, on the
    device, with the host generator that line gives it: that generator is made on the device."""
    for entry in reversed(failed.users):
        node = running_expression(entry)
        for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)) if node is not None else ():
            given = generator_edits.given_generator(call)
            if given is None or not (value_in_frame(given, entry.frame) is generator
                                     or generator_edits.makes_generator(given, entry.frame)):
                continue
            statement = failed.statement(entry)
            written = line_edits.find(statement.node, ast.unparse(call), (ast.Call,)) if statement is not None else None
            edits = generator_edits.on_device(statement, written, entry.frame, failed.namespace, device_expr) \
                if written is not None else None
            own, called = ast.unparse(given), ast.unparse(call.func)
            what = f"{called} draws on {target} (the default device) with {own}, a host generator"
            cause = (f"with {target} as the default device, the random op inside {called} makes its tensor there, "
                     f"and a random op draws from a generator of the device it makes its tensor on")
            summary = f"make the generator {own} on {target}: torch.Generator(device={device_expr})"
            note = (scoped[0].upper() + scoped[1:] + ".") if scoped else None
            fix = failed.edit_fix(summary, edits, note=note) if edits else Fix(summary=summary, note=note)
            return DeviceError("generator device", first_line(failed.exc), what, failed.line(failed.cell),
                               failed.deeper_line(), (dataclasses.replace(operand, name=own),), cause, fix)
    return None


def _generator_on_line(failed: Failed, entry: Entry, call: ast.Call, given: ast.expr, target: str, device_expr: str,
                       operand: Operand, scoped: str) -> DeviceError:
    """A random op of the user's, given a host generator, makes its tensor on the device: it makes it
    where its generator is, then moves it (the same numbers as on the host, where they were meant)."""
    gen = ast.unparse(given)
    what = f"{ast.unparse(call.func)} makes its tensor on {target}, but its generator {gen} is on {operand.device}"
    cause = (f"a random op draws from a generator of the device it makes its tensor on; {gen} is a host "
             f"generator, and the tensor is made on {target}"
             + (" (the default device)" if not any(k.arg == "device" for k in call.keywords) else ""))
    statement = failed.statement(entry)
    written = line_edits.find(statement.node, ast.unparse(call), (ast.Call,)) if statement is not None else None
    factory = isinstance(call.func, ast.Attribute) and call.func.attr in FACTORIES
    edits = None
    if written is not None and factory:
        edits = line_edits.Changes(statement).keyword(written, "device", f"{gen}.device") \
            .append(written, f".to({device_expr})").edits()
    summary = f"draw the numbers where {gen} is, then move them: device={gen}.device, then .to({device_expr})"
    note = "; ".join(filter(None, [f"Or make the generator on the device (torch.Generator(device={device_expr})), "
                                   "where the device has generators", scoped])) + "."
    fix = failed.edit_fix(summary, edits, note=note) if edits else Fix(
        summary=f"give {ast.unparse(call.func)} a generator on {target}", note=note)
    return DeviceError("generator device", first_line(failed.exc), what, failed.line(failed.cell),
                       failed.deeper_line(), (operand,), cause, fix)
